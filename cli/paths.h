/* The submitter's paths in `kolo submit`'s flags (docs/API.md): relative paths mean the folder
 * kolo runs in, not the worker's. Pure string work on the submitting host. */
#ifndef KOLO_CLI_PATHS_H
#define KOLO_CLI_PATHS_H

#include <stddef.h>

#include "kolo/v1/job.pb-c.h"

/* path made absolute against the submitter's folder (malloc'd; NULL when out of memory or
 * the folder is unknown). */
char *kolo_cli_absolute(const char *path);

/* An --exec program's paths: a program path with a '/' ("./train.sh", "venv/bin/python")
 * becomes absolute against this folder; the working dir is workdir (made absolute) when
 * given, else this folder when an argument names a file here ("train.py"). A program without
 * a '/' ("python3") is looked up in the worker's PATH. Each change is said on stderr. x must
 * be new (its working_dir protobuf-c's static ""). 0, or -1 with err set. */
int kolo_cli_exec_paths(Kolo__V1__ExecProgram *x, const char *workdir, char *err, size_t err_len);

#endif

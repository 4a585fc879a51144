/* Implementation of paths.h. */
#define _GNU_SOURCE
#include "cli/paths.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

char *kolo_cli_absolute(const char *path) {
  if (path[0] == '/') return strdup(path);
  char here[4096];
  if (getcwd(here, sizeof here) == NULL) return NULL;
  while (strncmp(path, "./", 2) == 0) path += 2;
  char *out = NULL;
  if (strcmp(path, ".") == 0) return strdup(here);
  if (asprintf(&out, "%s/%s", here, path) < 0) return NULL;
  return out;
}

/* The working dir: this folder when an argument names a file here; NULL when none does. */
static char *folder_of_local_files(const Kolo__V1__ExecProgram *x, int *failed) {
  for (size_t k = 1; k < x->n_argv; k++) {
    const char *arg = x->argv[k];
    if (arg[0] == '/' || arg[0] == '-' || arg[0] == '\0' || access(arg, F_OK) != 0) continue;
    char *here = kolo_cli_absolute(".");
    if (here == NULL) {
      *failed = 1;
      return NULL;
    }
    fprintf(stderr,
            "kolo: --exec: %s is a file here: the job runs in %s (give --workdir to choose)\n",
            arg, here);
    return here;
  }
  return NULL;
}

int kolo_cli_exec_paths(Kolo__V1__ExecProgram *x, const char *workdir, char *err, size_t err_len) {
  char *program = x->argv[0];
  if (program[0] != '/' && strchr(program, '/') != NULL) {
    char *full = kolo_cli_absolute(program);
    if (full == NULL) {
      snprintf(err, err_len, "--exec: cannot resolve %s against this folder", program);
      return -1;
    }
    fprintf(stderr, "kolo: --exec: %s is %s (relative paths are this folder's)\n", program, full);
    free(x->argv[0]);
    x->argv[0] = full;
  }
  int failed = 0;
  char *dir = workdir ? kolo_cli_absolute(workdir) : folder_of_local_files(x, &failed);
  if (failed || (workdir && dir == NULL)) {
    snprintf(err, err_len, "cannot tell the path of %s", workdir ? workdir : "this folder");
    return -1;
  }
  if (dir) x->working_dir = dir; /* it held protobuf-c's static "": nothing to free */
  return 0;
}

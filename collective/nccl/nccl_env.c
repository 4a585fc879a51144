/* kolo_nccl: what NCCL will read from its environment that kolo must know
 * before it calls NCCL. NCCL_COMM_BLOCKING=1 (environment or NCCL's conf files)
 * overrides config.blocking = 0, and a blocking ncclCommInitRankConfig waits for
 * missing peers with no deadline; kolo refuses to create such a communicator. */
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nccl_internal.h"

#define BLOCKING_NAME "NCCL_COMM_BLOCKING"
#define CONF_MAX_BYTES (64 * 1024)

int kolo_nccl_conf_value(const char *text, const char *name, char *value, size_t length) {
  if (text == NULL || name == NULL || value == NULL || length == 0) return 0;
  size_t name_length = strlen(name);
  const char *line = text;
  while (*line != '\0') {
    const char *end = strchr(line, '\n');
    size_t line_length = end ? (size_t)(end - line) : strlen(line);
    /* NCCL's reader: '#' starts a comment line; NAME is everything before the
     * first '='; no trimming */
    if (line[0] != '#' && line_length > name_length && memcmp(line, name, name_length) == 0 &&
        line[name_length] == '=') {
      size_t n = line_length - name_length - 1;
      if (n >= length) n = length - 1;
      memcpy(value, line + name_length + 1, n);
      value[n] = '\0';
      return 1;
    }
    if (end == NULL) break;
    line = end + 1;
  }
  return 0;
}

int kolo_nccl_blocking_value(const char *value) {
  if (value == NULL || value[0] == '\0') return 0;
  char *end = NULL;
  long long parsed = strtoll(value, &end, 0); /* NCCL: strtoll(str, nullptr, 0) */
  return end != value && parsed == 1;
}

/* The value of NCCL_COMM_BLOCKING in one conf file, if it sets it. */
static int conf_file_value(const char *path, char *value, size_t length) {
  FILE *file = fopen(path, "r");
  if (file == NULL) return 0;
  char *text = malloc(CONF_MAX_BYTES + 1);
  int found = 0;
  if (text != NULL) {
    size_t n = fread(text, 1, CONF_MAX_BYTES, file);
    text[n] = '\0';
    found = kolo_nccl_conf_value(text, BLOCKING_NAME, value, length);
    free(text);
  }
  fclose(file);
  return found;
}

int kolo_nccl_blocking_forced(char *source, size_t length) {
  char value[64];
  const char *env = getenv(BLOCKING_NAME);
  if (env != NULL && env[0] != '\0') {
    if (source != NULL && length > 0) snprintf(source, length, "the environment");
    return kolo_nccl_blocking_value(env);
  }
  /* NCCL reads NCCL_CONF_FILE, else ~/.nccl.conf, then /etc/nccl.conf, and never
   * overwrites a variable already set: the first file that sets it wins. */
  char path[1024];
  const char *user_file = getenv("NCCL_CONF_FILE");
  if (user_file != NULL && user_file[0] != '\0') {
    snprintf(path, sizeof path, "%s", user_file);
  } else {
    struct passwd *pw = getpwuid(getuid());
    if (pw != NULL && pw->pw_dir != NULL)
      snprintf(path, sizeof path, "%s/.nccl.conf", pw->pw_dir);
    else
      path[0] = '\0';
  }
  const char *files[2] = {path, "/etc/nccl.conf"};
  for (int i = 0; i < 2; i++) {
    if (files[i][0] != '\0' && conf_file_value(files[i], value, sizeof value)) {
      if (source != NULL && length > 0) snprintf(source, length, "%s", files[i]);
      return kolo_nccl_blocking_value(value);
    }
  }
  return 0;
}

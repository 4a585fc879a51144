/* Implementation of etcd_access.h: the endpoint list and the checks of the etcd
 * TLS/auth flags and the password file read, then the client made from them. */
#include "coordination/etcd_access.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static kolo_status refuse(char *err, size_t err_len, const char *format, const char *a,
                          const char *b) {
  if (err && err_len) snprintf(err, err_len, format, a, b);
  return KOLO_ERR_INVALID_ARG;
}

static kolo_status readable(const char *flag, const char *path, char *err, size_t err_len) {
  if (path[0] == '\0' || access(path, R_OK) == 0) return KOLO_OK;
  if (err && err_len) snprintf(err, err_len, "%s %s: %s", flag, path, strerror(errno));
  return KOLO_ERR_INVALID_ARG;
}

static kolo_status read_password(kolo_etcd_access *a, char *err, size_t err_len) {
  FILE *f = fopen(a->password_file, "r");
  if (f == NULL)
    return refuse(err, err_len, "--etcd-password-file %s: %s", a->password_file, strerror(errno));
  char line[sizeof a->password + 1];
  size_t n = fread(line, 1, sizeof line - 1, f);
  int too_long = n == sizeof line - 1 && fgetc(f) != EOF;
  fclose(f);
  line[n] = '\0';
  line[strcspn(line, "\n")] = '\0'; /* the first line */
  char *start = line, *end = line + strlen(line);
  while (*start && isspace((unsigned char)*start)) start++;
  while (end > start && isspace((unsigned char)end[-1])) *--end = '\0';
  if (too_long)
    return refuse(err, err_len, "--etcd-password-file %s: %s", a->password_file,
                  "longer than 255 bytes");
  if (*start == '\0')
    return refuse(err, err_len, "--etcd-password-file %s: %s", a->password_file, "empty");
  size_t len = strlen(start);
  if (len >= sizeof a->password)
    return refuse(err, err_len, "--etcd-password-file %s: %s", a->password_file,
                  "longer than 255 bytes");
  memcpy(a->password, start, len + 1);
  memset(line, 0, sizeof line);
  return KOLO_OK;
}

kolo_status kolo_etcd_access_load(kolo_etcd_access *a, char *err, size_t err_len) {
  if ((a->cert_file[0] != '\0') != (a->key_file[0] != '\0'))
    return refuse(err, err_len, "%s%s",
                  a->cert_file[0] ? "--etcd-cert needs --etcd-key" : "--etcd-key needs --etcd-cert",
                  "");
  if ((a->user[0] != '\0') != (a->password_file[0] != '\0'))
    return refuse(err, err_len, "%s%s",
                  a->user[0] ? "--etcd-user needs --etcd-password-file"
                             : "--etcd-password-file needs --etcd-user",
                  "");
  kolo_status rc = readable("--etcd-ca", a->ca_file, err, err_len);
  if (rc == KOLO_OK) rc = readable("--etcd-cert", a->cert_file, err, err_len);
  if (rc == KOLO_OK) rc = readable("--etcd-key", a->key_file, err, err_len);
  if (rc == KOLO_OK && a->user[0]) rc = read_password(a, err, err_len);
  return rc;
}

void kolo_etcd_access_apply(const kolo_etcd_access *a, kolo_etcd_config *config) {
  if (a == NULL) return;
  config->ca_file = a->ca_file[0] ? a->ca_file : NULL;
  config->cert_file = a->cert_file[0] ? a->cert_file : NULL;
  config->key_file = a->key_file[0] ? a->key_file : NULL;
  config->user = a->user[0] ? a->user : NULL;
  config->password = a->user[0] ? a->password : NULL;
}

kolo_status kolo_etcd_access_set_endpoints(kolo_etcd_access *a, const char *text, char *err,
                                           size_t err_len) {
  a->n_endpoints = 0;
  const char *p = text ? text : "";
  while (*p) {
    size_t n = strcspn(p, ",");
    if (n > 0) {
      if (a->n_endpoints == KOLO_ETCD_MAX_ENDPOINTS) {
        if (err && err_len)
          snprintf(err, err_len, "--etcd: more than %d endpoints", KOLO_ETCD_MAX_ENDPOINTS);
        return KOLO_ERR_INVALID_ARG;
      }
      int http = n > 7 && strncmp(p, "http://", 7) == 0,
          https = n > 8 && strncmp(p, "https://", 8) == 0,
          unix_socket = n > 8 && strncmp(p, "unix:///", 8) == 0; /* --etcd auto's socket */
      if (n > KOLO_ETCD_ENDPOINT_MAX || (!http && !https && !unix_socket)) {
        if (err && err_len)
          snprintf(err, err_len,
                   "--etcd: '%.*s' is not an http://, https:// or unix:/// URL of at most %d "
                   "bytes",
                   (int)(n > 200 ? 200 : n), p, KOLO_ETCD_ENDPOINT_MAX);
        return KOLO_ERR_INVALID_ARG;
      }
      memcpy(a->endpoints[a->n_endpoints], p, n);
      a->endpoints[a->n_endpoints++][n] = '\0';
    }
    p += n;
    if (*p == ',') p++;
  }
  if (a->n_endpoints == 0) {
    if (err && err_len) snprintf(err, err_len, "--etcd: no endpoint");
    return KOLO_ERR_INVALID_ARG;
  }
  return KOLO_OK;
}

kolo_status kolo_etcd_access_connect(const kolo_etcd_access *a, const kolo_etcd_config *tuning,
                                     kolo_etcd **out) {
  if (a == NULL || a->n_endpoints == 0 || out == NULL) return KOLO_ERR_INVALID_ARG;
  const char *list[KOLO_ETCD_MAX_ENDPOINTS];
  for (size_t i = 0; i < a->n_endpoints; i++) list[i] = a->endpoints[i];
  kolo_etcd_config config = {0};
  if (tuning != NULL) {
    config.request_timeout_ms = tuning->request_timeout_ms;
    config.connect_timeout_ms = tuning->connect_timeout_ms;
    config.watch_idle_ms = tuning->watch_idle_ms;
    config.max_value_bytes = tuning->max_value_bytes;
  }
  config.endpoints = list;
  config.endpoint_count = a->n_endpoints;
  kolo_etcd_access_apply(a, &config);
  return kolo_etcd_create(&config, out);
}

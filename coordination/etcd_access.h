/* How a kolo binary reaches etcd: its client URLs (--etcd, comma-separated), TLS
 * files (CA bundle, client certificate and key) and etcd user/password auth, the
 * password read from a file (never a flag). kolo-server and kolo-worker parse one
 * of these once, from --etcd/--etcd-ca/--etcd-cert/--etcd-key/--etcd-user/
 * --etcd-password-file, and make every etcd client with kolo_etcd_access_connect,
 * so no client of a binary differs from another (each picks only its timeouts).
 * https:// endpoints use TLS. */
#ifndef KOLO_ETCD_ACCESS_H
#define KOLO_ETCD_ACCESS_H

#include <stddef.h>

#define KOLO_ETCD_MAX_ENDPOINTS 16
#define KOLO_ETCD_ENDPOINT_MAX 255 /* bytes of one URL */

#include "coordination/etcd.h"
#include "kolo/status.h"

typedef struct kolo_etcd_access {
  char ca_file[512];       /* PEM CA bundle to verify etcd; "" = the system's */
  char cert_file[512];     /* client certificate (PEM); "" = none */
  char key_file[512];      /* its key (PEM) */
  char user[128];          /* etcd user; "" = no auth */
  char password_file[512]; /* file holding the user's password */
  char password[256];      /* filled by kolo_etcd_access_load */
  /* filled by kolo_etcd_access_set_endpoints */
  char endpoints[KOLO_ETCD_MAX_ENDPOINTS][KOLO_ETCD_ENDPOINT_MAX + 1];
  size_t n_endpoints;
} kolo_etcd_access;

/* Parses text, etcd client URLs separated by commas (empty items skipped), into
 * access: 1..KOLO_ETCD_MAX_ENDPOINTS of them, each http:// or https:// and at most
 * KOLO_ETCD_ENDPOINT_MAX bytes. KOLO_ERR_INVALID_ARG with a one-line reason in err
 * naming --etcd. */
kolo_status kolo_etcd_access_set_endpoints(kolo_etcd_access *access, const char *text, char *err,
                                           size_t err_len);

/* Creates a client for access's endpoints with its TLS and auth; tuning (NULL = the
 * defaults) gives only the timeouts and limits, its other fields are ignored. This is
 * how kolo's binaries make every etcd client. KOLO_ERR_INVALID_ARG without endpoints. */
kolo_status kolo_etcd_access_connect(const kolo_etcd_access *access, const kolo_etcd_config *tuning,
                                     kolo_etcd **out);

/* Checks the settings and reads the password file: a certificate needs its key
 * (and the other way round), a user needs a password file (and the other way
 * round), every named file must be readable, the password (first line, surrounding
 * whitespace trimmed) must not be empty. KOLO_ERR_INVALID_ARG with a one-line
 * reason in err naming the flag. No network I/O. */
kolo_status kolo_etcd_access_load(kolo_etcd_access *access, char *err, size_t err_len);

/* Sets config's TLS and auth fields from access (pointers into it; NULL where
 * unset). access may be NULL (nothing set). */
void kolo_etcd_access_apply(const kolo_etcd_access *access, kolo_etcd_config *config);

#endif

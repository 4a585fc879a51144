/* Unit tests for server/options.c: defaults, a config file, flags overriding it, and
 * errors that name the bad flag, key or line. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "server/options.h"

static void the_defaults_are_loopback_and_etcd_auto(void **state) {
  (void)state;
  kolo_server_options o;
  char err[256];
  char *argv[] = {"kolo-server", NULL};
  assert_int_equal(kolo_server_options_parse(1, argv, &o, err, sizeof err), KOLO_OK);
  assert_string_equal(o.etcd, "auto");
  assert_string_equal(o.grpc_listen, "127.0.0.1:7070");
  assert_string_equal(o.http_listen, "127.0.0.1:7080");
  assert_int_equal(o.max_message_bytes, 4u << 20);
}

static void flags_override_the_config_file(void **state) {
  (void)state;
  char path[] = "/tmp/kolo-options-XXXXXX";
  int fd = mkstemp(path);
  FILE *f = fdopen(fd, "w");
  fprintf(f, "# comment\n grpc-listen = 0.0.0.0:9000\nmax-message-bytes=8192\netcd = http://e:2379\n");
  fclose(f);
  kolo_server_options o;
  char err[256];
  char *argv[] = {"kolo-server", "--config", path, "--etcd", "none", "--threads=3", NULL};
  assert_int_equal(kolo_server_options_parse(6, argv, &o, err, sizeof err), KOLO_OK);
  assert_string_equal(o.grpc_listen, "0.0.0.0:9000");
  assert_int_equal(o.max_message_bytes, 8192);
  assert_string_equal(o.etcd, "none");
  assert_int_equal(o.threads, 3);
  unlink(path);
}

static void bad_input_is_named(void **state) {
  (void)state;
  kolo_server_options o;
  char err[256];
  char *a[] = {"kolo-server", "--colour", "red", NULL};
  assert_int_equal(kolo_server_options_parse(3, a, &o, err, sizeof err), KOLO_ERR_INVALID_ARG);
  assert_non_null(strstr(err, "--colour"));
  char *b[] = {"kolo-server", "--threads", "many", NULL};
  assert_int_equal(kolo_server_options_parse(3, b, &o, err, sizeof err), KOLO_ERR_INVALID_ARG);
  assert_non_null(strstr(err, "threads"));
  char *c[] = {"kolo-server", "--tls-cert", "/x", NULL};
  assert_int_equal(kolo_server_options_parse(3, c, &o, err, sizeof err), KOLO_ERR_INVALID_ARG);
  assert_non_null(strstr(err, "tls-key"));
  char *e[] = {"kolo-server", "--grpc-listen", "127.0.0.1:99999", NULL};
  assert_int_equal(kolo_server_options_parse(3, e, &o, err, sizeof err), KOLO_ERR_INVALID_ARG);
  assert_non_null(strstr(err, "grpc-listen"));
  char *g[] = {"kolo-server", "--http-listen", "nocolon", NULL};
  assert_int_equal(kolo_server_options_parse(3, g, &o, err, sizeof err), KOLO_ERR_INVALID_ARG);
  assert_non_null(strstr(err, "http-listen"));
  char path[] = "/tmp/kolo-options-XXXXXX";
  int fd = mkstemp(path);
  FILE *f = fdopen(fd, "w");
  fprintf(f, "etcd = auto\nbogus = 1\n");
  fclose(f);
  char *d[] = {"kolo-server", "--config", path, NULL};
  assert_int_equal(kolo_server_options_parse(3, d, &o, err, sizeof err), KOLO_ERR_INVALID_ARG);
  assert_non_null(strstr(err, ":2: unknown key 'bogus'"));
  unlink(path);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(the_defaults_are_loopback_and_etcd_auto),
      cmocka_unit_test(flags_override_the_config_file),
      cmocka_unit_test(bad_input_is_named),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

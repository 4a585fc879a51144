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
#include "server/service.h"

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
  fprintf(f,
          "# comment\n grpc-listen = 0.0.0.0:9000\nmax-message-bytes=8192\netcd = http://e:2379\n");
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

/* --etcd is parsed once with the options into the binary's etcd access (every client
 * of kolo-server is made from it); auto and none are not URLs. */
static void etcd_endpoints_are_parsed_once_with_the_options(void **state) {
  (void)state;
  kolo_server_options o;
  char err[256];
  char *two[] = {"kolo-server", "--etcd", "http://a:1,,https://b:2/", NULL};
  assert_int_equal(kolo_server_options_parse(3, two, &o, err, sizeof err), KOLO_OK);
  assert_int_equal(o.etcd_access.n_endpoints, 2);
  assert_string_equal(o.etcd_access.endpoints[0], "http://a:1");
  assert_string_equal(o.etcd_access.endpoints[1], "https://b:2/");
  char *bare[] = {"kolo-server", "--etcd", "127.0.0.1:2379", NULL};
  assert_int_equal(kolo_server_options_parse(3, bare, &o, err, sizeof err), KOLO_ERR_INVALID_ARG);
  assert_non_null(
      strstr(err, "--etcd: '127.0.0.1:2379' is not an http://, https:// or unix:/// URL"));
  char *empty[] = {"kolo-server", "--etcd", ",", NULL};
  assert_int_equal(kolo_server_options_parse(3, empty, &o, err, sizeof err), KOLO_ERR_INVALID_ARG);
  assert_non_null(strstr(err, "--etcd: no endpoint"));
  char many[17 * 12 + 1] = "";
  for (int i = 0; i < 17; i++) strcat(many, i ? ",http://h:1" : "http://h:1");
  char *seventeen[] = {"kolo-server", "--etcd", many, NULL};
  assert_int_equal(kolo_server_options_parse(3, seventeen, &o, err, sizeof err),
                   KOLO_ERR_INVALID_ARG);
  assert_non_null(strstr(err, "more than 16 endpoints"));
  char *none[] = {"kolo-server", "--etcd", "none", NULL};
  assert_int_equal(kolo_server_options_parse(3, none, &o, err, sizeof err), KOLO_OK);
  assert_int_equal(o.etcd_access.n_endpoints, 0);
}

static void a_token_file_is_trimmed_and_must_hold_one_visible_token(void **state) {
  (void)state;
  char err[256];
  const char *token = NULL;
  char good[] = "  s3cret-Token_1\r\n";
  assert_int_equal(kolo_server_token_parse(good, &token, err, sizeof err), KOLO_OK);
  assert_string_equal(token, "s3cret-Token_1");
  const char *bad[] = {"", "   \n\t \r\n", "two words\n", "tab\there", "caf\xc3\xa9"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char text[64];
    snprintf(text, sizeof text, "%s", bad[i]);
    assert_int_equal(kolo_server_token_parse(text, &token, err, sizeof err), KOLO_ERR_INVALID_ARG);
  }
  char blank[] = " \n";
  kolo_server_token_parse(blank, &token, err, sizeof err);
  assert_non_null(strstr(err, "no token"));
}

static void the_bearer_scheme_matches_in_any_case_and_the_token_exactly(void **state) {
  (void)state;
  const char *t = "abc123";
  const char *yes[] = {"Bearer abc123", "bearer abc123", "BEARER abc123", "bEaReR   abc123"};
  for (size_t i = 0; i < 4; i++) assert_true(kolo_server_bearer_matches(yes[i], strlen(yes[i]), t));
  const char *no[] = {"Bearer abc12",  "Bearer abc1234", "Bearer ABC123", "Bearerabc123",
                      "Basic abc123",  "abc123",         "Bearer ",       "",
                      "Bearer abc123 "};
  for (size_t i = 0; i < sizeof no / sizeof no[0]; i++)
    assert_false(kolo_server_bearer_matches(no[i], strlen(no[i]), t));
  assert_false(kolo_server_bearer_matches(NULL, 0, t));
  /* a length-delimited value with a NUL inside is not the token */
  assert_false(kolo_server_bearer_matches("Bearer abc123\0x", 15, t));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(the_defaults_are_loopback_and_etcd_auto),
      cmocka_unit_test(etcd_endpoints_are_parsed_once_with_the_options),
      cmocka_unit_test(flags_override_the_config_file),
      cmocka_unit_test(bad_input_is_named),
      cmocka_unit_test(a_token_file_is_trimmed_and_must_hold_one_visible_token),
      cmocka_unit_test(the_bearer_scheme_matches_in_any_case_and_the_token_exactly),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

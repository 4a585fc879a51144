/* libFuzzer target: kolo-server's HTTP request framer (server/http_frame.c), which reads
 * every byte a client sends before libmicrohttpd may see it. Input: byte 0 picks where the
 * stream is split in two feeds, the rest is the client's byte stream.
 * Properties: no crash, no out-of-bounds; feeding the stream whole, split in two or a byte
 * at a time gives the same verdict, cleared length, request count and error; the cleared
 * bytes never pass what was fed, and all of them are cleared when nothing broke the rules;
 * an error has one of the framer's statuses, a code and a message, and every later feed
 * fails; the cleared prefix of any stream is itself well framed and cleared whole. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/http_frame.h"

static void check(int ok, const char *what) {
  if (ok) return;
  fprintf(stderr, "http frame property failed: %s\n", what);
  abort();
}

static int run(kolo_server_http_frame *f, const char *data, size_t len, size_t step) {
  kolo_server_http_frame_init(f);
  int rc = 0;
  if (step == 0) return kolo_server_http_frame_feed(f, data, len);
  for (size_t i = 0; i < len && rc == 0; i += step)
    rc = kolo_server_http_frame_feed(f, data + i, len - i < step ? len - i : step);
  return rc;
}

static void same(const kolo_server_http_frame *a, int ra, const kolo_server_http_frame *b, int rb) {
  check(ra == rb, "the verdict depends on how the stream is split");
  check(a->ready == b->ready, "the cleared length depends on the split");
  check(a->requests == b->requests, "the request count depends on the split");
  if (ra != 0) {
    check(a->error.status == b->error.status, "the error status depends on the split");
    check(strcmp(a->error.message, b->error.message) == 0, "the error depends on the split");
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  const char *stream = (const char *)data + 1;
  size_t len = size - 1;
  static kolo_server_http_frame whole, halves, bytes, prefix;
  int rw = run(&whole, stream, len, 0);
  check(whole.ready <= whole.fed && whole.fed <= len, "cleared past what was fed");
  if (rw == 0) check(whole.fed == len, "a good stream was not read whole");
  if (rw != 0) {
    int s = whole.error.status;
    check(s == 400 || s == 413 || s == 414 || s == 431 || s == 501 || s == 505, "unknown status");
    check(whole.error.code != NULL && whole.error.message[0] != '\0', "an error without text");
    uint64_t ready = whole.ready;
    check(kolo_server_http_frame_feed(&whole, "GET / HTTP/1.1\r\n\r\n", 18) == -1,
          "a feed after an error succeeded");
    check(whole.ready == ready, "a feed after an error cleared bytes");
  }
  /* split in two at byte 0's share of the length */
  size_t cut = len * data[0] / 256;
  kolo_server_http_frame_init(&halves);
  int rh = kolo_server_http_frame_feed(&halves, stream, cut);
  if (rh == 0) rh = kolo_server_http_frame_feed(&halves, stream + cut, len - cut);
  same(&whole, rw, &halves, rh);
  int rb = run(&bytes, stream, len, 1);
  same(&whole, rw, &bytes, rb);
  /* the cleared prefix alone frames cleanly and is cleared whole */
  int rp = run(&prefix, stream, (size_t)whole.ready, 0);
  check(rp == 0, "the cleared prefix does not frame");
  check(prefix.ready == whole.ready, "the cleared prefix is not cleared whole");
  return 0;
}

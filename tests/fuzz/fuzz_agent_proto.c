/* libFuzzer target: the agent protocol's lines (common/agent_proto.c), as libkolo
 * reads the agent's (first byte even) and kolo-worker reads the process's (odd).
 * Properties: no crash or leak; a refused line has an error message; an accepted
 * line has no control byte and fits the line limit; what parses formats again,
 * and the formatted line is the input itself (the codec has one spelling per
 * message; an unversioned HELLO gains its version 1) and parses back to an equal
 * message. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/agent_proto.h"

static void check(int ok, const char *what, const uint8_t *data, size_t size) {
  if (ok) return;
  fprintf(stderr, "agent protocol property failed: %s on '%.*s'\n", what, (int)size,
          (const char *)data);
  abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  kolo_agent_direction direction = data[0] % 2 ? KOLO_AGENT_TO_AGENT : KOLO_AGENT_TO_PROCESS;
  const char *line = (const char *)data + 1;
  size_t length = size - 1;
  kolo_agent_msg msg;
  char error[256];
  error[0] = '\0';
  if (kolo_agent_msg_parse(line, length, direction, &msg, error, sizeof error) != KOLO_OK) {
    check(error[0] != '\0' && msg.verb == KOLO_AGENT_NONE && msg.storage_ == NULL,
          "a refusal says why", data, size);
    return 0;
  }
  check(length < KOLO_AGENT_MAX_LINE, "accepted lines fit", data, size);
  for (size_t i = 0; i < length; i++)
    check((unsigned char)line[i] >= 0x20 && line[i] != 0x7f, "accepted lines hold no control byte",
          data, size);
  char *formatted = NULL;
  check(kolo_agent_msg_format(&msg, &formatted, error, sizeof error) == KOLO_OK,
        "what parses formats", data, size);
  size_t out = strlen(formatted);
  check(out > 0 && formatted[out - 1] == '\n', "a formatted line ends with its newline", data,
        size);
  int unversioned =
      msg.verb == KOLO_AGENT_HELLO && memchr(line + 6, ' ', length > 6 ? length - 6 : 0) == NULL;
  if (unversioned)
    check(out == length + 3 && memcmp(formatted, line, length) == 0 &&
              memcmp(formatted + length, " 1\n", 3) == 0,
          "an unversioned HELLO formats as version 1", data, size);
  else
    check(out == length + 1 && memcmp(formatted, line, length) == 0, "one spelling per message",
          data, size);
  kolo_agent_msg again;
  check(kolo_agent_msg_parse(formatted, out - 1, direction, &again, error, sizeof error) == KOLO_OK,
        "a formatted line parses", data, size);
  check(kolo_agent_msg_equal(&msg, &again), "a formatted line parses to the same message", data,
        size);
  kolo_agent_msg_clear(&again);
  kolo_agent_msg_clear(&msg);
  free(formatted);
  return 0;
}

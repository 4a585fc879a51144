#!/usr/bin/python3
"""A training process that will not stop on its own (test program, not a test).

It speaks the agent's line protocol (common/agent_proto.h, version 2) just enough to
be a member (HELLO <pid> 2, FORMED for every RING), ignores STOP and SIGTERM, and writes every event with the wall-clock time
in milliseconds to $KOLO_STUBBORN_LOG ("START", "RING <epoch>", "STOP <reason>",
"TERM"), so a test can check that the agent escalates STOP -> SIGTERM -> SIGKILL."""
import os
import signal
import socket
import time


def log(line: str) -> None:
    with open(os.environ["KOLO_STUBBORN_LOG"], "a") as f:
        f.write("%d %s\n" % (int(time.time() * 1000), line))


def main() -> None:
    signal.signal(signal.SIGTERM, lambda *_: log("TERM"))
    log("START")
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.connect(os.environ["KOLO_AGENT_SOCKET"])
    conn.sendall(b"HELLO %d 2\n" % os.getpid())
    buffered = b""
    while True:
        try:
            chunk = conn.recv(4096)
        except InterruptedError:
            continue
        if not chunk:  # the agent went away: keep running until killed
            while True:
                time.sleep(0.05)
        buffered += chunk
        while b"\n" in buffered:
            line, buffered = buffered.split(b"\n", 1)
            words = line.decode(errors="replace").split()
            if words and words[0] == "RING":
                log("RING " + words[1])
                conn.sendall(("FORMED %s %s %s\n" % (words[1], words[2], words[3])).encode())
            elif words and words[0] == "STOP":
                log("STOP " + " ".join(words[1:]))


if __name__ == "__main__":
    main()

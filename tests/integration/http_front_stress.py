#!/usr/bin/python3
"""Stress of kolo-server's HTTP front end (server/http_front.c, http_frame.c): hundreds of
concurrent keep-alive clients, pipelining, clients that disconnect (or reset) mid-request
and mid-response, clients that never read (also an SSE stream), SSE streams opened and
dropped, HTTP/1.0, HEAD, bodies near the limit, garbage bytes, all at once, plain or TLS.
The server must stay up, answer every API request with a JSON body, keep its memory
bounded, and exit 0 on SIGTERM (under ASan: no report).

    /usr/bin/python3 tests/integration/http_front_stress.py [--bin build/bin/kolo-server]
        [--tls] [--clients 300] [--rounds 3] [--wrapper 'valgrind --error-exitcode=9 ...']

Not a CTest test (it runs about a minute and measures memory); run it by hand."""
import argparse
import asyncio
import os
import random
import shlex
import signal
import socket
import ssl
import struct
import subprocess
import sys
import tempfile
import time

ap = argparse.ArgumentParser()
ap.add_argument("--bin", default=os.path.join(os.path.dirname(__file__), "../../build/bin/kolo-server"))
ap.add_argument("--tls", action="store_true")
ap.add_argument("--clients", type=int, default=300)
ap.add_argument("--rounds", type=int, default=3)
ap.add_argument("--wrapper", default="")
ap.add_argument("--keep", action="store_true", help="leave the server's log")
args = ap.parse_args()

tmp = tempfile.mkdtemp(prefix="kolo-stress-")
port_file = os.path.join(tmp, "ports")
extra = []
ctx = None
if args.tls:
    cert, key = os.path.join(tmp, "cert.pem"), os.path.join(tmp, "key.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj",
                    "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", key, "-out", cert],
                   check=True, capture_output=True)
    extra = ["--tls-cert", cert, "--tls-key", key]
    ctx = ssl.create_default_context(cafile=cert)
log = open(os.path.join(tmp, "server.log"), "w")
cmd = shlex.split(args.wrapper) + [args.bin, "--etcd", "none", "--grpc-listen", "127.0.0.1:0",
                                   "--http-listen", "127.0.0.1:0", "--port-file", port_file] + extra
proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
deadline = time.monotonic() + 120
port = None
while time.monotonic() < deadline and port is None:
    if proc.poll() is not None:
        sys.exit("server exited at start: %s" % open(log.name).read()[-2000:])
    try:
        for line in open(port_file):
            if line.startswith("http_port="):
                port = int(line.split("=")[1])
    except FileNotFoundError:
        pass
    time.sleep(0.1)
assert port, "no port file"

failures = []
counts = {}


def count(what):
    counts[what] = counts.get(what, 0) + 1


def fail(what):
    if len(failures) < 50:
        failures.append(what)


def rss_kb():
    for line in open("/proc/%d/status" % proc.pid):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


async def connect():
    r, w = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port, ssl=ctx,
                                                          server_hostname="127.0.0.1" if ctx else None), 30)
    return r, w


def reset(w):
    """Closes with RST (SO_LINGER 0)."""
    sock = w.get_extra_info("socket")
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    w.transport.abort()


async def read_answer(r, head_only=False):
    """One HTTP answer: (status, headers, body)."""
    head = await asyncio.wait_for(r.readuntil(b"\r\n\r\n"), 30)
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    hd = {}
    for line in lines[1:]:
        k, _, v = line.partition(":")
        if k:
            hd[k.strip().lower()] = v.strip()
    if head_only:
        return status, hd, b""
    if hd.get("transfer-encoding", "").lower() == "chunked":
        body = b""
        while True:
            size = int((await asyncio.wait_for(r.readuntil(b"\r\n"), 30)).split(b";")[0], 16)
            body += await asyncio.wait_for(r.readexactly(size + 2), 30)
            if size == 0:
                break
        return status, hd, body
    n = int(hd.get("content-length", "0"))
    return status, hd, await asyncio.wait_for(r.readexactly(n), 30)


def check_json(what, status, hd, body, want=None):
    if want is not None and status not in (want if isinstance(want, tuple) else (want,)):
        fail("%s: status %d, want %s: %r" % (what, status, want, body[:200]))
    if not hd.get("content-type", "").startswith(("application/json", "text/plain")):
        fail("%s: content-type %r: %r" % (what, hd.get("content-type"), body[:200]))


GET = b"GET /v1/jobs HTTP/1.1\r\nHost: x\r\n\r\n"


async def keepalive(i):
    r, w = await connect()
    try:
        for k in range(20):
            path = random.choice([b"/v1/jobs", b"/metrics", b"/v1/jobs/nope", b"/v1/workers", b"/healthz"])
            w.write(b"GET " + path + b" HTTP/1.1\r\nHost: x\r\n\r\n")
            await w.drain()
            st, hd, body = await read_answer(r)
            if path in (b"/v1/jobs", b"/metrics", b"/healthz"):
                check_json("keepalive %s" % path, st, hd, body, 200)
            count("keepalive")
        w.write(b"HEAD /v1/jobs HTTP/1.1\r\nHost: x\r\n\r\n")
        await w.drain()
        st, hd, _ = await read_answer(r, head_only=True)
        if st != 200:
            fail("HEAD: %d" % st)
        w.write(GET)
        await w.drain()
        st, hd, body = await read_answer(r)  # the answer after HEAD's must parse (no stray body)
        check_json("after HEAD", st, hd, body, 200)
    finally:
        w.close()


async def pipelined(i):
    r, w = await connect()
    try:
        n = 30
        w.write(GET * n)
        await w.drain()
        for _ in range(n):
            st, hd, body = await read_answer(r)
            check_json("pipelined", st, hd, body, 200)
        count("pipelined")
    finally:
        w.close()


async def drop_mid_request(i):
    r, w = await connect()
    kind = i % 4
    if kind == 0:
        w.write(b"GET /v1/jo")
    elif kind == 1:
        w.write(b"POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n" + b"{" * 5000)
    elif kind == 2:
        w.write(b"POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n10\r\nabc")
    else:
        w.write(GET + b"GET /v1/jobs HTTP/1.1\r\nHo")
    await w.drain()
    await asyncio.sleep(random.random() * 0.05)
    if i % 2:
        reset(w)
    else:
        w.close()
    count("drop_mid_request")


async def drop_mid_response(i):
    r, w = await connect()
    w.write(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n" * 50)
    await w.drain()
    await r.read(random.randint(1, 3000))
    if i % 2:
        reset(w)
    else:
        w.close()
    count("drop_mid_response")


never_readers = []


async def never_read(i):
    """Pipelines many requests (or opens an SSE stream) and never reads: held open."""
    r, w = await connect()
    if i % 2:
        w.write(b"GET /v1/stream?jobs=1&workers=1 HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\n\r\n")
    else:
        w.write(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n" * 2000)
    try:
        await asyncio.wait_for(w.drain(), 5)
    except asyncio.TimeoutError:
        pass
    never_readers.append(w)
    count("never_read")


async def half_open(i):
    """A raw TCP client that stops mid-way (in TLS mode: mid-handshake) and is held open."""
    r, w = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), 30)
    w.write(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" if ctx else b"GET /v1/jobs HTTP/1.1\r\nHo")
    await w.drain()
    never_readers.append(w)
    count("half_open")


async def sse_dropped(i):
    r, w = await connect()
    w.write(b"GET /v1/stream?jobs=1&workers=1 HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\n\r\n")
    await w.drain()
    st, hd, _ = await read_answer(r, head_only=True)
    if st != 200:
        fail("SSE status %d" % st)
    await asyncio.sleep(random.random() * 0.2)
    if i % 2:
        reset(w)
    else:
        w.close()
    count("sse")


async def http10(i):
    r, w = await connect()
    w.write(b"GET /v1/jobs HTTP/1.0\r\n\r\n")
    await w.drain()
    data = await asyncio.wait_for(r.read(), 30)  # HTTP/1.0: the server closes
    if not data.startswith(b"HTTP/1."):
        fail("HTTP/1.0: %r" % data[:100])
    w.close()
    count("http10")


async def big_body(i):
    r, w = await connect()
    limit = 4 << 20
    size = limit + (1 if i % 2 else -1)
    body = b"x" * size
    w.write(b"POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
            % size)
    w.write(body)
    try:
        await asyncio.wait_for(w.drain(), 30)
    except (ConnectionError, asyncio.TimeoutError):
        pass
    try:
        st, hd, b = await read_answer(r)
        check_json("big body %d" % size, st, hd, b, (400, 413))
    except (asyncio.IncompleteReadError, ConnectionError) as e:
        fail("big body %d: no answer (%r)" % (size, e))
    w.close()
    count("big_body")


async def garbage(i):
    r, w = await connect()
    rnd = random.Random(i)
    w.write(bytes(rnd.randrange(256) for _ in range(rnd.randint(1, 3000))))
    try:
        await asyncio.wait_for(w.drain(), 10)
        data = await asyncio.wait_for(r.read(), 30)
    except (ConnectionError, ssl.SSLError):
        data = b""
    if data and b"<html" in data.lower():
        fail("garbage got HTML: %r" % data[:300])
    w.close()
    count("garbage")


async def guarded(fn, i):
    try:
        await fn(i)
    except (asyncio.IncompleteReadError, ConnectionError, asyncio.TimeoutError, ssl.SSLError, OSError) as e:
        if fn not in (drop_mid_request, drop_mid_response, garbage, never_read):
            fail("%s %d: %r" % (fn.__name__, i, e))


async def wave():
    kinds = [keepalive, keepalive, pipelined, drop_mid_request, drop_mid_response, sse_dropped, http10,
             garbage, never_read, keepalive, half_open]
    tasks = [guarded(kinds[i % len(kinds)], i) for i in range(args.clients)]
    tasks += [guarded(big_body, i) for i in range(4)]
    await asyncio.gather(*tasks)


async def main():
    rss = [rss_kb()]
    t0 = time.monotonic()
    for rnd in range(args.rounds):
        await wave()
        rss.append(rss_kb())
        print("round %d: %.1f s, rss %d kB, never-readers held %d" % (rnd, time.monotonic() - t0, rss[-1],
                                                                      len(never_readers)), flush=True)
    # the server still serves while the never-readers hold their connections
    r, w = await connect()
    w.write(GET)
    await w.drain()
    st, hd, body = await read_answer(r)
    check_json("final", st, hd, body, 200)
    w.close()
    return rss


rss = asyncio.run(main())
print("counts:", counts)
alive = proc.poll() is None
t = time.monotonic()
proc.send_signal(signal.SIGTERM)
try:
    code = proc.wait(120)
except subprocess.TimeoutExpired:
    proc.kill()
    code = "hung"
print("SIGTERM exit: %s in %.1f s" % (code, time.monotonic() - t))
logtext = open(log.name, errors="replace").read()
for marker in ("ERROR: AddressSanitizer", "runtime error:", "LeakSanitizer", "definitely lost", "Invalid read",
               "Invalid write"):
    if marker in logtext:
        fail("server log has %r" % marker)
if not alive:
    fail("the server died during the run")
if code != 0:
    fail("exit code %s" % code)
print("rss kB per round:", rss)
print("log:", log.name)
if failures:
    print("FAILURES (%d):" % len(failures))
    for f in failures:
        print("  ", f)
    sys.exit(1)
print("OK")

"""A small Chrome DevTools Protocol client on the standard library only: starts Debian's
chromium headless with a fresh profile and every background network feature off, speaks the
WebSocket protocol (RFC 6455, client side) to its page target, and offers what the dashboard
tests need: navigate, evaluate JavaScript, wait for a condition, click, type, screenshots, and
the list of every URL the page requested. Every wait has a deadline; close() kills the browser
and removes its profile."""
import base64
import json
import os
import shutil
import socket
import struct
import subprocess
import tempfile
import time
import urllib.request

CHROMIUM = os.environ.get("KOLO_CHROMIUM", "/usr/bin/chromium")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-default-apps", "--disable-extensions", "--mute-audio", "--no-default-browser-check",
         "--metrics-recording-only", "--password-store=basic", "--window-size=1280,1000"]


def _read(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


class WebSocket:
    """Just enough of a WebSocket client for CDP: text frames, masked, fragmented or not."""

    def __init__(self, url, timeout=30):
        assert url.startswith("ws://")
        hostport, _, path = url[5:].partition("/")
        host, _, port = hostport.partition(":")
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall(("GET /%s HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                           "Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n\r\n" % (path, hostport, key)).encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = self.sock.recv(4096)
            if not chunk:
                raise ConnectionError("websocket handshake: connection closed")
            head += chunk
        head, _, self.pending = head.partition(b"\r\n\r\n")
        if b" 101 " not in head.split(b"\r\n")[0]:
            raise ConnectionError("websocket handshake refused: %r" % head[:200])

    def _read(self, n):
        while len(self.pending) < n:
            chunk = self.sock.recv(max(65536, n - len(self.pending)))
            if not chunk:
                raise ConnectionError("websocket closed")
            self.pending += chunk
        out, self.pending = self.pending[:n], self.pending[n:]
        return out

    def send(self, text):
        data = text.encode()
        header = bytes([0x81])
        n = len(data)
        if n < 126:
            header += bytes([0x80 | n])
        elif n < 65536:
            header += bytes([0x80 | 126]) + struct.pack(">H", n)
        else:
            header += bytes([0x80 | 127]) + struct.pack(">Q", n)
        mask = os.urandom(4)
        masked = bytes(b ^ mask[i % 4] for i, b in enumerate(data))
        self.sock.sendall(header + mask + masked)

    def recv(self, timeout):
        """One whole text message, or None after timeout seconds."""
        self.sock.settimeout(timeout)
        message = b""
        try:
            while True:
                b0, b1 = self._read(2)
                n = b1 & 0x7F
                if n == 126:
                    n = struct.unpack(">H", self._read(2))[0]
                elif n == 127:
                    n = struct.unpack(">Q", self._read(8))[0]
                payload = self._read(n)
                opcode = b0 & 0x0F
                if opcode == 0x8:
                    raise ConnectionError("websocket closed by the browser")
                if opcode == 0x9:  # ping
                    continue
                message += payload
                if b0 & 0x80:
                    return message.decode()
        except socket.timeout:
            if message:
                raise
            return None

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass


class Browser:
    def __init__(self, *extra_flags):
        self.profile = tempfile.mkdtemp(prefix="kolo-chromium-")
        self.log = open(os.path.join(self.profile, "chromium.log"), "w")
        self.proc = subprocess.Popen([CHROMIUM] + FLAGS + list(extra_flags) +
                                     ["--user-data-dir=" + self.profile, "--remote-debugging-port=0",
                                      "--remote-debugging-address=127.0.0.1", "about:blank"],
                                     stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        port_file = os.path.join(self.profile, "DevToolsActivePort")
        deadline = time.monotonic() + 60
        while not _read(port_file).count("\n") >= 1:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.close()
                raise RuntimeError("chromium did not start (see its log)")
            time.sleep(0.1)
        port = int(_read(port_file).split()[0])
        self.http = "http://127.0.0.1:%d" % port
        page = self._page_target()
        self.ws = WebSocket(page["webSocketDebuggerUrl"])
        self.next_id = 0
        self.events = []
        self.requests = []  # every URL the page asked for
        self.console = []   # console messages and exceptions
        for method in ("Page.enable", "Runtime.enable", "Network.enable"):
            self.call(method)

    def _page_target(self):
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with urllib.request.urlopen(self.http + "/json/list", timeout=10) as resp:
                pages = [t for t in json.load(resp) if t.get("type") == "page"]
            if pages:
                return pages[0]
            time.sleep(0.1)
        raise RuntimeError("chromium has no page target")

    def _note(self, message):
        method = message.get("method", "")
        params = message.get("params", {})
        if method == "Network.requestWillBeSent":
            self.requests.append(params["request"]["url"])
        elif method == "Runtime.consoleAPICalled":
            self.console.append(" ".join(str(a.get("value", a.get("description", ""))) for a in params.get("args", [])))
        elif method == "Runtime.exceptionThrown":
            details = params.get("exceptionDetails", {})
            self.console.append("exception: %s %s" % (details.get("text"), details.get("exception", {}).get("description")))
        self.events.append(message)
        del self.events[:-500]

    def call(self, method, timeout=30, **params):
        self.next_id += 1
        mine = self.next_id
        self.ws.send(json.dumps({"id": mine, "method": method, "params": params}))
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("CDP %s: no answer in %ss" % (method, timeout))
            text = self.ws.recv(left)
            if text is None:
                continue
            message = json.loads(text)
            if message.get("id") == mine:
                if "error" in message:
                    raise RuntimeError("CDP %s: %s" % (method, message["error"]))
                return message.get("result", {})
            self._note(message)

    def pump(self, seconds):
        """Reads events for a while (requests, console)."""
        deadline = time.monotonic() + seconds
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return
            text = self.ws.recv(left)
            if text:
                self._note(json.loads(text))

    def navigate(self, url):
        self.call("Page.navigate", url=url)

    def evaluate(self, expression, timeout=30):
        result = self.call("Runtime.evaluate", timeout=timeout, expression=expression, returnByValue=True,
                           awaitPromise=True)
        if "exceptionDetails" in result:
            raise RuntimeError("JS error in %r: %s" % (expression[:80], result["exceptionDetails"]))
        return result.get("result", {}).get("value")

    def wait(self, expression, timeout, what):
        """Waits until expression (JavaScript) is truthy; returns its value."""
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            try:
                last = self.evaluate(expression)
            except RuntimeError as e:
                last = str(e)
            else:
                if last:
                    return last
            self.pump(0.2)
        raise AssertionError("browser: timed out after %ss waiting for %s (last: %r)\nconsole: %s" %
                             (timeout, what, last, "\n".join(self.console[-10:])))

    def click(self, selector):
        found = self.evaluate("(() => { const e = document.querySelector(%s); if (!e) return false; e.click(); return true; })()"
                              % json.dumps(selector))
        if not found:
            raise AssertionError("browser: nothing to click at %s" % selector)

    def type(self, selector, text):
        self.evaluate("document.querySelector(%s).focus()" % json.dumps(selector))
        self.call("Input.insertText", text=text)

    def screenshot(self, path):
        data = self.call("Page.captureScreenshot", format="png", captureBeyondViewport=True)["data"]
        with open(path, "wb") as f:
            f.write(base64.b64decode(data))
        return path

    def close(self):
        if getattr(self, "ws", None):
            self.ws.close()
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, 9)
            except ProcessLookupError:
                pass
            self.proc.wait()
        self.log.close()
        shutil.rmtree(self.profile, ignore_errors=True)

"""scripts/quickstart.sh --keep-up: the quickstart prints the dashboard's URL, runs its job
(one epoch here), then keeps etcd, kolo-server and the workers up; the printed URL serves the
dashboard, the job is there with its metrics history; SIGINT (Ctrl-C) stops every process it
started and the script exits with the job's verdict (0). With the documented HTTP port (7080)
held by someone else it picks free ports and prints them (#29)."""
import json
import os
import re
import signal
import socket
import subprocess
import threading
import time
import unittest
import urllib.request

BIN = os.environ.get("KOLO_BIN_DIR", "build/bin")
SRC = os.environ.get("KOLO_SOURCE_DIR", ".")


def wait_for(fn, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = fn()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError("timed out after %ss waiting for %s" % (timeout, what))


def get(url):
    with urllib.request.urlopen(url, timeout=10) as resp:
        return resp.status, resp.headers.get("Content-Type", ""), resp.read().decode()


class QuickstartKeepUpTest(unittest.TestCase):
    def test_the_cluster_stays_up_for_the_dashboard_until_ctrl_c(self):
        # #29: another user holds the documented HTTP port: the quickstart takes free ones and prints them
        holder = socket.socket()
        try:
            holder.bind(("127.0.0.1", 7080))
            holder.listen(1)
        except OSError:
            pass  # someone holds it already: the same case
        self.addCleanup(holder.close)
        proc = subprocess.Popen([os.path.join(SRC, "scripts", "quickstart.sh"), "--bin", BIN, "--epochs", "1",
                                 "--min-accuracy", "0.5", "--keep-up"],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
        lines = []
        up = threading.Event()

        def read():
            for line in proc.stdout:
                lines.append(line)
                if "the cluster stays up" in line:
                    up.set()
        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        try:
            self.assertTrue(up.wait(600), "no 'stays up' line:\n" + "".join(lines))
            out = "".join(lines)
            printed = re.search(r"== dashboard: (http://127\.0\.0\.1:\d+)/", out)
            self.assertIsNotNone(printed, out)
            api = printed.group(1)
            self.assertNotEqual(api, "http://127.0.0.1:7080", "7080 is taken")
            ports = re.search(r"kolo-server gRPC 127\.0\.0\.1:(\d+) \(KOLO_SERVER\), HTTP 127\.0\.0\.1:(\d+)", out)
            self.assertIsNotNone(ports, out)
            self.assertEqual("http://127.0.0.1:" + ports.group(2), api)
            job = re.search(r"job (\S+) submitted", out).group(1)
            self.assertIn("%s/#/jobs/%s" % (api, job), out)
            status, kind, page = get(api + "/")
            self.assertEqual(status, 200)
            self.assertTrue(kind.startswith("text/html"))
            self.assertIn("/ui/app.js", page)
            final = json.loads(get(api + "/v1/jobs/" + job)[2])["status"]
            self.assertEqual(final["phase"], "SUCCEEDED")

            def recorded():  # the recorder writes the job's last progress within an interval
                points = json.loads(get(api + "/v1/jobs/%s/metrics" % job)[2])["points"]
                return points if points and points[-1]["step"] == final["progress"]["step"] else None
            points = wait_for(recorded, 30, "the job's final step in its metrics history")
            self.assertEqual(points[0]["step"], min(p["step"] for p in points))
            time.sleep(1.5)
            self.assertIsNone(proc.poll(), "the script must still be up")
            proc.send_signal(signal.SIGINT)
            self.assertEqual(proc.wait(timeout=60), 0, "".join(lines))
            with self.assertRaises(OSError):
                get(api + "/healthz")
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            reader.join(5)


if __name__ == "__main__":
    unittest.main(verbosity=2)

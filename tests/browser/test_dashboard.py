"""The dashboard in a real browser: Debian's chromium, headless, driven over the DevTools
protocol (tests/browser/cdp.py), during a real job on a real cluster (etcd, kolo-server, two
kolo-workers training the built-in MLP on Fashion-MNIST). The jobs table shows the job with its
progress and ETA; its page draws a loss curve that gains points as steps pass and follows the
training processes' logs; a SIGKILLed
worker shows up as a re-form marker on the curves, a WORKER_LOST event and a new ring epoch;
Scale rescales it and Cancel cancels it; Drain drains a worker. A second server on the same etcd with TLS and a token
shows the page over https after the token is asked once. The page loads nothing from anywhere
but its server. Screenshots are saved under <build>/tests/browser-artifacts/."""
import ctypes
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
sys.path.insert(0, HERE)

import cdp  # noqa: E402
from test_server_support import BIN, Etcd, Server, curl, wait_for  # noqa: E402

ART = os.path.join(os.environ.get("KOLO_BUILD_DIR", "build"), "tests", "browser-artifacts")
JOB = "dash-1"
TOKEN = "dash-token-0123456789"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def die_with_parent():
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


class Worker:
    def __init__(self, etcd_url, index, root):
        self.id = "worker-%d" % index
        self.log_path = os.path.join(root, self.id + ".log")
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            [os.path.join(BIN, "kolo-worker"), "--etcd", etcd_url, "--advertise", "127.0.0.1:%d" % free_port(),
             "--id", self.id, "--work-dir", os.path.join(root, self.id), "--lease-ttl", "2",
             "--stop-grace-ms", "500"],
            stdout=self.log, stderr=subprocess.STDOUT, preexec_fn=die_with_parent)

    def kill(self, sig=signal.SIGKILL):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


def js(expr):
    return "(() => { try { return %s; } catch (e) { return null; } })()" % expr


class DashboardTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        os.makedirs(ART, exist_ok=True)
        cls.root = tempfile.mkdtemp(prefix="kolo-dash-")
        cls.etcd = Etcd()
        cls.workers = []
        cls.servers = []
        try:
            cls.server = Server(cls.etcd.url, "--metrics-interval-ms", "300", "--leader-ttl", "2")
            cls.servers.append(cls.server)
            cls.origin = "http://127.0.0.1:%d" % cls.server.http_port
            cls.workers = [Worker(cls.etcd.url, i, cls.root) for i in (1, 2)]
            wait_for(lambda: len(cls.api("/v1/workers")["workers"]) == 2, 30, "two workers registered")
            code, job = curl(cls.server.http_port, "/v1/jobs", "POST", json.dumps({
                "id": JOB, "name": "fashion-mnist mlp", "min_workers": 1, "max_workers": 2,
                "builtin": {"model": "mlp", "dataset": "fashion-mnist", "learning_rate": 0.02, "epochs": 100,
                            "batch_size": 32, "hyper_parameters": {"hidden": "128", "seed": "7"}}}))
            assert code == 200, job
            cls.browser = cdp.Browser()
        except Exception:
            cls.tearDownClass()
            raise

    @classmethod
    def tearDownClass(cls):
        if getattr(cls, "browser", None):
            cls.browser.close()
        for w in cls.workers:
            w.kill(signal.SIGTERM)
        for s in cls.servers:
            s.kill()
        cls.etcd.stop()

    @classmethod
    def api(cls, path, server=None):
        code, body = curl((server or cls.server).http_port, path)
        assert code == 200, (path, code, body)
        return body

    def shot(self, name, browser=None):
        path = (browser or self.browser).screenshot(os.path.join(ART, name))
        print("screenshot", path)

    def test_1_the_jobs_table_shows_the_running_job_with_progress_and_eta(self):
        b = self.browser
        b.navigate(self.origin + "/")
        row = 'document.querySelector(\'#jobs-table tr.job[data-id="%s"]\')' % JOB
        b.wait(js(row + ".dataset.phase === 'RUNNING'"), 90, "the job RUNNING in the table")
        steps = b.wait(js(row + ".querySelector('.steps').textContent.match(/^[1-9]\\d* \\/ \\d+$/) && " +
                          row + ".querySelector('.steps').textContent"), 60, "progress with total steps")
        step, total = (int(x) for x in steps.split(" / "))
        self.assertGreater(total, step)
        self.assertEqual(total, self.api("/v1/jobs/" + JOB)["status"]["progress"]["total_steps"])
        b.wait(js(row + ".querySelector('.eta').textContent.match(/\\d+[smhd]/)"), 30, "an ETA")
        width = b.evaluate(js(row + ".querySelector('.bar span').style.width"))
        self.assertRegex(width, r"^\d+(\.\d)?%$")
        self.assertEqual(b.evaluate(js(row + ".querySelector('.name a').textContent")), "fashion-mnist mlp")
        # the phase filter
        b.click('#phase-filter button[data-phase="SUCCEEDED"]')
        b.wait(js("document.querySelectorAll('#jobs-table tr.job').length === 0"), 10, "filtered out")
        b.click('#phase-filter button[data-phase="RUNNING"]')
        b.wait(js(row + " !== null"), 10, "filtered in")
        self.shot("01-jobs.png")

    def test_2_the_job_page_draws_a_loss_curve_that_grows_and_marks_a_killed_worker(self):
        b = self.browser
        b.navigate(self.origin + "/#/jobs/" + JOB)
        points = "+document.querySelector('#chart-loss').dataset.points"
        first = b.wait(js(points + " >= 2 && " + points), 60, "a loss curve")
        grown = b.wait(js("%s >= %d && %s" % (points, first + 3, points)), 60, "more points as steps pass")
        self.assertGreaterEqual(grown, first + 3)
        b.wait(js("document.querySelector('#rings tr[data-epoch=\"1\"]').textContent.includes('worker-2')"), 20,
               "ring epoch 1 with both workers")
        self.assertEqual(b.evaluate(js("document.querySelectorAll('#chart-loss .reform').length")), 0)
        # the logs view follows the training processes' output (kolo-train's rank 0 prints its steps)
        b.wait(js("document.querySelector('#logs-text').textContent.match(/\\[0\\] .*\"step\":\\d+.*\"loss\"/)"),
               60, "rank 0's step lines in the logs view")
        b.wait(js("document.querySelectorAll('#logs-rank option').length === 3"), 10, "a choice of ranks")
        self.assertIn(b.evaluate(js("document.querySelector('#job-phase .badge').textContent")), ("RUNNING",))
        self.shot("02-job-curves.png")

        self.workers[1].kill(signal.SIGKILL)
        marker = b.wait(js("document.querySelector('#chart-loss .reform') && "
                           "document.querySelector('#chart-loss .reform').dataset.epoch"), 90, "a re-form marker")
        self.assertGreaterEqual(int(marker), 2)
        b.wait(js("document.querySelector('#events tr[data-type=\"WORKER_LOST\"]') !== null"), 30, "a WORKER_LOST event")
        lost = b.evaluate(js("document.querySelector('#events tr[data-type=\"WORKER_LOST\"] .msg').textContent"))
        self.assertIn("worker-2", lost)
        ring = b.wait(js("document.querySelector('#rings tr[data-epoch=\"%s\"]').textContent" % marker), 20,
                      "the new ring epoch")
        self.assertIn("worker-1", ring)
        self.assertNotIn("worker-2", ring)
        for chart in ("accuracy", "throughput"):
            self.assertGreaterEqual(b.evaluate(js("document.querySelectorAll('#chart-%s .reform').length" % chart)), 1)
        after = b.wait(js("%s >= %d && %s" % (points, grown + 2, points)), 60, "points after the re-form")
        # kolo-train reports training and test accuracy apart: two lines on the accuracy chart
        b.wait(js("+document.querySelector('#chart-accuracy polyline[data-field=\"train_accuracy\"]').dataset.points > 2"),
               30, "the training accuracy line")
        b.wait(js("+document.querySelector('#chart-accuracy polyline[data-field=\"test_accuracy\"]').dataset.points >= 1"),
               90, "the test accuracy line (after the first evaluated epoch)")
        history = self.api("/v1/jobs/%s/metrics" % JOB)["points"]
        self.assertLessEqual(len(history), after + 5)
        self.shot("03-job-reformed.png")

    def test_3_scale_rescales_and_cancel_cancels_the_job(self):
        b = self.browser
        b.navigate(self.origin + "/#/jobs/" + JOB)
        b.wait(js("document.querySelector('#btn-scale') !== null"), 30, "the Scale button")
        b.click("#btn-scale")
        b.evaluate("document.querySelector('#scale-max').value = ''")
        b.type("#scale-max", "3")
        b.click("#scale-apply")
        b.wait(js("document.querySelector('#job-message').textContent.includes('1–3')"), 30, "scaled to 1-3")
        self.assertEqual(self.api("/v1/jobs/" + JOB)["status"]["max_workers"], 3)
        b.wait(js("document.querySelector('#events tr[data-type=\"SCALED\"]') !== null"), 10, "the SCALED event")
        b.wait(js("document.querySelector('#btn-cancel') !== null"), 30, "the Cancel button")
        b.click("#btn-cancel")
        b.type("#cancel-reason", "seen enough")
        b.click("#cancel-confirm")
        b.wait(js("document.querySelector('#job-phase .badge').textContent === 'CANCELLED'"), 30, "CANCELLED")
        status = self.api("/v1/jobs/" + JOB)["status"]
        self.assertEqual(status["phase"], "CANCELLED")
        self.assertIn("seen enough", status["error"])
        b.wait(js("document.querySelector('#events tr[data-type=\"CANCELLED\"]') !== null"), 10, "the event")
        self.assertIsNone(b.evaluate(js("document.querySelector('#btn-cancel')")))
        self.shot("04-job-cancelled.png")

    def test_4_workers_are_listed_and_drain_works(self):
        b = self.browser
        b.navigate(self.origin + "/#/workers")
        row = "document.querySelector('#workers-table tr.worker[data-id=\"worker-1\"]')"
        b.wait(js(row + " !== null"), 30, "worker-1 listed")
        b.wait(js("document.querySelector('#workers-table tr.worker[data-id=\"worker-2\"]') === null"), 30,
               "the killed worker-2 gone with its lease")
        self.assertEqual(b.evaluate(js(row + ".querySelector('.draining').textContent")), "no")
        b.click('#workers-table tr.worker[data-id="worker-1"] button.drain')
        b.click('#workers-table tr.worker[data-id="worker-1"] button.confirm')
        b.wait(js(row + ".querySelector('.draining').textContent === 'yes'"), 30, "worker-1 draining")
        drained = [w for w in self.api("/v1/workers")["workers"] if w["id"] == "worker-1"]
        self.assertTrue(drained and drained[0]["draining"])
        self.shot("05-workers.png")

    def test_5_the_page_loads_nothing_from_elsewhere_and_threw_nothing(self):
        b = self.browser
        b.pump(0.5)
        self.assertTrue(b.requests)
        foreign = [u for u in b.requests if not (u.startswith(self.origin + "/") or u == "about:blank")]
        self.assertEqual(foreign, [])
        for asset in ("/ui/app.js", "/ui/api.js", "/ui/chart.js", "/ui/style.css"):
            self.assertIn(self.origin + asset, b.requests)
        self.assertEqual([c for c in b.console if c.startswith("exception")], [])

    def test_6_with_tls_and_a_token_the_page_asks_once_and_works_over_https(self):
        cert, key = os.path.join(self.root, "cert.pem"), os.path.join(self.root, "key.pem")
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj",
                        "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", key, "-out", cert],
                       check=True, capture_output=True)
        token_file = os.path.join(self.root, "token")
        with open(token_file, "w") as f:
            f.write(TOKEN + "\n")
        secure = Server(self.etcd.url, "--tls-cert", cert, "--tls-key", key, "--token-file", token_file)
        self.servers.append(secure)
        origin = "https://127.0.0.1:%d" % secure.http_port
        b = cdp.Browser("--ignore-certificate-errors")
        try:
            b.navigate(origin + "/")
            b.wait(js("document.getElementById('token-dialog').open"), 30, "the token dialog")
            self.assertEqual(b.evaluate(js("document.querySelectorAll('#jobs-table tr.job').length")), 0)
            b.type("#token-input", "not-the-token")
            b.click("#token-submit")
            b.wait(js("document.getElementById('token-dialog').open && !document.getElementById('token-error').hidden"),
                   30, "the wrong token refused")
            b.evaluate("document.getElementById('token-input').value = ''")
            b.type("#token-input", TOKEN)
            b.click("#token-submit")
            row = 'document.querySelector(\'#jobs-table tr.job[data-id="%s"]\')' % JOB
            b.wait(js(row + " !== null"), 30, "the job over https with the token")
            self.assertFalse(b.evaluate("document.getElementById('token-dialog').open"))
            self.assertEqual(b.evaluate("sessionStorage.getItem('kolo-token')"), TOKEN)
            b.navigate(origin + "/#/workers")
            b.wait(js("document.querySelector('#workers-table tr.worker') !== null"), 30, "workers with the kept token")
            self.assertFalse(b.evaluate("document.getElementById('token-dialog').open"))
            self.assertTrue(all(u.startswith(origin + "/") or u == "about:blank" for u in b.requests), b.requests)
            self.shot("06-tls-token.png", b)
        finally:
            b.close()


if __name__ == "__main__":
    unittest.main(verbosity=2)

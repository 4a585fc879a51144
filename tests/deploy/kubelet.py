"""What a kubelet does with the kolo chart's pods, done with local processes (no cluster can
run here): the chart is rendered with `helm template`, and each pod of a rendered workload is
started from its container's command and args with the environment Kubernetes would give it
(env values, fieldRefs, envFrom ConfigMaps; $(VAR) expanded in args), its volumes as temporary
directories (Secret items written from the rendered Secrets, emptyDirs empty) at the paths it
mounts them, cluster DNS names of the namespace resolving to 127.0.0.1, and its ports mapped
to free local ports (pods have an IP each; local processes share one). Pods are stopped as a
kubelet does (the preStop exec hook, SIGTERM, SIGKILL after terminationGracePeriodSeconds)
and their readiness is the rendered readinessProbe (httpGet). StatefulSet rollouts and
scaling follow Kubernetes' rules (highest ordinal first, each pod ready before the next;
Parallel scaling). Every process started here is killed by stop_all(), also on failure."""
import base64
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
CHART = os.path.join(ROOT, "deploy", "helm", "kolo")

_live = []  # every Pod started, for stop_all()
_claims = {}  # PersistentVolumeClaim name -> its local directory (outlives pods, as a PV)
_root = tempfile.mkdtemp(prefix="kolo-kubelet-")


_handed_out = set()  # every port free_port() returned in this process


def free_port():
    """A local port nothing holds now and that this process never handed out before: the
    kernel may offer a just-closed port again, and two pods given one port cannot both hold it."""
    for _ in range(100):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in _handed_out:
            _handed_out.add(port)
            return port
    raise RuntimeError("no fresh local port after 100 tries")


def wait_for(predicate, timeout, what, interval=0.05):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError("timed out after %.1fs waiting for %s" % (timeout, what))


def helm_binary():
    """helm from tests/deploy/setup-tools.sh (cached under the build tree)."""
    out = subprocess.run([os.path.join(HERE, "setup-tools.sh")], capture_output=True, text=True, check=True,
                         timeout=600)
    return out.stdout.splitlines()[0]


class Rendering:
    """`helm template` of the chart with some --set values; objects by kind and name."""

    def __init__(self, release, namespace, sets):
        args = [helm_binary(), "template", release, CHART, "--namespace", namespace]
        for key, value in sets.items():
            args += ["--set", "%s=%s" % (key, value)]
        out = subprocess.run(args, capture_output=True, text=True, timeout=120)
        if out.returncode != 0:
            raise RuntimeError("helm template failed: " + out.stderr)
        self.release, self.namespace = release, namespace
        self.objects = [o for o in yaml.safe_load_all(out.stdout) if o]

    def find(self, kind, name):
        for o in self.objects:
            if o["kind"] == kind and o["metadata"]["name"] == name:
                return o
        raise KeyError("%s/%s is not rendered" % (kind, name))

    def secret_value(self, name, key):
        return base64.b64decode(self.find("Secret", name)["data"][key]).decode()


def pod_template(workload):
    """The pod template of a Deployment, StatefulSet, Job or CronJob."""
    if workload["kind"] == "CronJob":
        return workload["spec"]["jobTemplate"]["spec"]["template"]
    return workload["spec"]["template"]


class Pod:
    """One pod of a rendered Deployment, StatefulSet, Job or CronJob, run as a local process.
    secrets: Secrets made outside the chart ({name: {key: bytes}}), as an operator or
    cert-manager would have made them."""

    def __init__(self, rendering, workload, name, bin_dir, ports=None, env=None, secrets=None):
        self.r, self.workload, self.name = rendering, workload, name
        self.secrets = secrets or {}
        spec = pod_template(workload)["spec"]
        self.spec, self.c = spec, spec["containers"][0]
        self.bin_dir = bin_dir
        self.ports = dict(ports or {})  # containerPort -> local port
        self.overrides = dict(env or {})
        self.dir = tempfile.mkdtemp(prefix="kolo-pod-%s-" % name)
        self.proc = None
        self.log_path = os.path.join(self.dir, "pod.log")
        self.mounts = self._volumes()
        self.env = self._environment()

    # ---- what the kubelet prepares ----

    def _volumes(self):
        """Mount path -> local directory, with Secret items written out."""
        volumes = {v["name"]: v for v in self.spec.get("volumes", [])}
        mounts = {}
        for m in self.c.get("volumeMounts", []):
            local = os.path.join(self.dir, "vol", m["name"])
            # a volumeClaimTemplate (not in volumes) is this pod's own volume
            v = volumes.get(m["name"], {"emptyDir": {}})
            if "persistentVolumeClaim" in v:
                local = _claims.setdefault(v["persistentVolumeClaim"]["claimName"],
                                           tempfile.mkdtemp(prefix="pvc-", dir=_root))
            os.makedirs(local, exist_ok=True)
            if "secret" in v:
                name = v["secret"]["secretName"]
                if name in self.secrets:
                    data = self.secrets[name]
                else:
                    data = {k: base64.b64decode(x) for k, x in self.r.find("Secret", name)["data"].items()}
                items = v["secret"].get("items") or [{"key": k, "path": k} for k in data]
                for item in items:
                    with open(os.path.join(local, item["path"]), "wb") as f:
                        f.write(data[item["key"]])
            mounts[m["mountPath"]] = local
        return mounts

    def _local(self, text):
        """A value as this pod sees it locally: mount paths, cluster DNS names, ports, binds."""
        text = str(text)
        if self.mounts:  # one pass, longest mount first (local dirs live under /tmp too)
            paths = "|".join(re.escape(p) for p in sorted(self.mounts, key=len, reverse=True))
            text = re.sub(r"(?<![\w/])(%s)(?=/|$|[\s\"',])" % paths, lambda m: self.mounts[m.group(1)], text)
        ns = re.escape(self.r.namespace)
        text = re.sub(r"[a-z0-9.-]+\.%s\.svc(\.cluster\.local)?" % ns, "127.0.0.1", text)
        for port, local in self.ports.items():
            text = re.sub(r"127\.0\.0\.1:%d\b" % port, "127.0.0.1:%d" % local, text)
        return text.replace("0.0.0.0:", "127.0.0.1:")

    def _environment(self):
        env = {"PATH": "%s:%s" % (self.bin_dir, os.environ.get("PATH", "/usr/bin:/bin"))}
        for src in self.c.get("envFrom", []):
            env.update(self.r.find("ConfigMap", src["configMapRef"]["name"])["data"])
        fields = {"metadata.name": self.name, "metadata.namespace": self.r.namespace, "status.podIP": "127.0.0.1"}
        for e in self.c.get("env", []):
            if "value" in e:
                env[e["name"]] = e["value"]
            elif "fieldRef" in e.get("valueFrom", {}):
                env[e["name"]] = fields[e["valueFrom"]["fieldRef"]["fieldPath"]]
        env.update(self.overrides)
        self.raw_env = env
        # PATH names this machine's directories (the build's bin/), not the pod's: localising
        # it would rewrite a checkout under /tmp, which the pods mount as an emptyDir
        return {k: v if k == "PATH" else self._local(v) for k, v in env.items()}

    def command(self):
        """command + args with $(VAR) expanded (from the pod's environment), then localised once."""
        expand = lambda s: re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", lambda m: self.raw_env.get(m.group(1), m.group(0)), s)
        return [self._local(expand(str(a))) for a in self.c["command"] + self.c.get("args", [])]

    # ---- lifecycle ----

    def start(self):
        cmd = self.command()
        self.log = open(self.log_path, "a")
        self.log.write("$ %s\n" % " ".join(cmd))
        self.log.flush()
        exe = os.path.join(self.bin_dir, cmd[0]) if os.path.exists(os.path.join(self.bin_dir, cmd[0])) else cmd[0]
        self.proc = subprocess.Popen([exe] + cmd[1:], env=self.env, stdout=self.log, stderr=subprocess.STDOUT,
                                     cwd=self.dir)
        _live.append(self)
        return self

    def running(self):
        return self.proc is not None and self.proc.poll() is None

    def probe(self, which="readinessProbe"):
        """One run of the rendered httpGet probe: True on 2xx/3xx."""
        get = self.c[which]["httpGet"]
        port = get["port"]
        if isinstance(port, str):
            port = next(p["containerPort"] for p in self.c["ports"] if p["name"] == port)
        url = "%s://127.0.0.1:%d%s" % (get.get("scheme", "HTTP").lower(), self.ports.get(port, port), get["path"])
        try:
            with urllib.request.urlopen(url, timeout=self.c[which].get("timeoutSeconds", 1)) as r:
                return 200 <= r.status < 400
        except (urllib.error.URLError, OSError, ValueError):
            return False

    def wait_ready(self, timeout=60):
        """Probes every periodSeconds (as the kubelet) until ready; returns seconds waited."""
        period = self.c["readinessProbe"].get("periodSeconds", 10)
        started = time.monotonic()
        time.sleep(self.c["readinessProbe"].get("initialDelaySeconds", 0))
        while not self.probe():
            if not self.running():
                raise AssertionError("pod %s exited (%s) before it was ready:\n%s" % (self.name, self.proc.returncode, self.read_log()))
            if time.monotonic() - started > timeout:
                raise AssertionError("pod %s not ready after %ds:\n%s" % (self.name, timeout, self.read_log()))
            time.sleep(period)
        return time.monotonic() - started

    def pre_stop(self):
        """Runs the rendered preStop exec hook in the pod's environment; returns its result."""
        hook = self.c.get("lifecycle", {}).get("preStop", {}).get("exec")
        if not hook:
            return None
        return subprocess.run([self._local(a) for a in hook["command"]], env=self.env, capture_output=True,
                              text=True, timeout=30)

    def terminate(self):
        """As the kubelet stops a pod: preStop, SIGTERM, SIGKILL past the grace period.
        Returns (preStop result, exit code, seconds from SIGTERM to exit)."""
        grace = self.spec.get("terminationGracePeriodSeconds", 30)
        started = time.monotonic()
        hook = self.pre_stop()
        if self.running():
            self.proc.send_signal(signal.SIGTERM)
        term_at = time.monotonic()
        try:
            self.proc.wait(timeout=max(1, grace - (term_at - started)))
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()
        return hook, self.proc.returncode, time.monotonic() - term_at

    def wait_exit(self, timeout=120):
        """For a Job's pod: waits for the process; returns its exit code."""
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError("pod %s still running after %ds:\n%s" % (self.name, timeout, self.read_log()))
        self.log.close()
        return self.proc.returncode

    def kill(self):
        if self.running():
            self.proc.kill()
            self.proc.wait()

    def read_log(self):
        try:
            with open(self.log_path) as f:
                return f.read()[-4000:]
        except OSError:
            return ""

    def cleanup(self):
        self.kill()
        if getattr(self, "log", None) and not self.log.closed:
            self.log.close()
        shutil.rmtree(self.dir, True)


def stop_all():
    for pod in _live:
        pod.cleanup()
    _live.clear()
    for d in _claims.values():
        shutil.rmtree(d, True)
    _claims.clear()


class StatefulSet:
    """A rendered StatefulSet run as pods named <name>-<ordinal>, each with its own ports."""

    def __init__(self, rendering, name, bin_dir, port_env):
        self.r, self.obj = rendering, rendering.find("StatefulSet", name)
        self.name, self.bin_dir = name, bin_dir
        self.port_env = port_env  # env var -> containerPort it holds (each pod gets its own)
        self.pods = {}

    def new_pod(self, ordinal):
        ports, env = {}, {}
        for var, container_port in self.port_env.items():
            local = free_port()
            ports[container_port] = local
            env[var] = str(local)
        return Pod(self.r, self.obj, "%s-%d" % (self.name, ordinal), self.bin_dir, ports=ports, env=env)

    def start(self, ordinal):
        pod = self.new_pod(ordinal).start()
        self.pods[ordinal] = pod
        return pod

    def scale(self, replicas):
        """podManagementPolicy Parallel: every pod above the new count goes at once, every
        missing one starts at once. Returns {ordinal: terminate() result} of removed pods."""
        gone = sorted((o for o in self.pods if o >= replicas), reverse=True)
        results, threads = {}, []
        for o in gone:
            t = threading.Thread(target=lambda o=o: results.__setitem__(o, self.pods[o].terminate()))
            t.start()
            threads.append(t)
        for t in threads:
            t.join()
        for o in gone:
            del self.pods[o]
        for o in range(replicas):
            if o not in self.pods:
                self.start(o)
        for o in range(replicas):
            self.pods[o].wait_ready()
        return results

    def rolling_restart(self, each=None):
        """RollingUpdate: from the highest ordinal down, stop the pod, start a new one under
        the same name, and wait until it is ready before taking the next. each(ordinal,
        terminate result, new pod) is called after every pod."""
        for o in sorted(self.pods, reverse=True):
            result = self.pods[o].terminate()
            pod = self.start(o)
            pod.wait_ready()
            if each:
                each(o, result, pod)


def http(port, path, token, method="GET", body=None):
    """(status, JSON) of the coordinators' HTTP API with the bearer token."""
    req = urllib.request.Request("http://127.0.0.1:%d%s" % (port, path), method=method,
                                 data=json.dumps(body).encode() if body is not None else None,
                                 headers={"Authorization": "Bearer " + token, "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, json.loads(r.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")

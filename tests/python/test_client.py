"""kolo.client against a real etcd, kolo-server and kolo-workers: every method,
errors as exceptions carrying the gRPC status and message, bad Python arguments,
and the token and TLS options (a second kolo-server with --token-file and a
self-signed certificate made by openssl)."""
import os
import shutil
import subprocess
import threading
import time

import pytest

import cluster
import kolotest
from kolo import client as kc
from kolo.client import Client


@pytest.fixture(scope="module")
def c():
    cl = cluster.Cluster()
    try:
        cl.start_worker("w1")
        yield cl
    finally:
        cl.stop()


@pytest.fixture(scope="module")
def api(c):
    with Client(c.grpc_target) as client:
        yield client


def pending_spec(job_id, **labels):
    # 64 workers: never scheduled here, so it stays PENDING
    return {"name": "pending", "id": job_id, "min_workers": 64, "labels": labels,
            "builtin": {"model": "mlp", "dataset": "fashion-mnist", "epochs": 1}}


def test_submit_get_list_scale_cancel_and_watch_work_on_a_real_server(api):
    job = api.submit(pending_spec("c-1", team="vision"))
    assert (job.id, Client.phase(job), job.spec.labels["team"]) == ("c-1", "PENDING", "vision")
    assert api.get("c-1").events[0].type == "SUBMITTED"
    api.submit(pending_spec("c-2", team="nlp"))
    assert [j.id for j in api.list(labels={"team": "vision"})] == ["c-1"]
    assert {"c-1", "c-2"} <= {j.id for j in api.list(phase="PENDING")}
    scaled = api.scale("c-1", 64, 80)
    assert (scaled.status.min_workers, scaled.status.max_workers) == (64, 80)
    seen = []
    watcher = threading.Thread(target=lambda: seen.extend(Client.phase(j) for j in api.watch("c-1", timeout=60)))
    watcher.start()
    time.sleep(0.5)
    cancelled = api.cancel("c-1", reason="enough")
    watcher.join(60)
    assert not watcher.is_alive(), "watch ends when the job ends"
    assert Client.phase(cancelled) == "CANCELLED" and "enough" in cancelled.status.error
    assert seen[0] == "PENDING" and seen[-1] == "CANCELLED"
    assert Client.phase(api.wait("c-1", timeout=10)) == "CANCELLED"
    api.cancel("c-2")  # a pending gang of 64 would hold every later job (FIFO)


def test_logs_come_back_by_rank_with_tail_and_follow(c, api):
    script = 'for i in 1 2 3; do echo "line $i of rank $KOLO_RANK"; sleep 0.1; done; echo "é ok" >&2'
    api.submit({"name": "echo", "id": "c-logs", "min_workers": 1, "exec": {"argv": ["/bin/sh", "-c", script]}})
    followed = [l.text for l in api.logs("c-logs", follow=True, timeout=120)]
    assert followed == ["line 1 of rank 0", "line 2 of rank 0", "line 3 of rank 0", "é ok"]
    assert Client.phase(api.get("c-logs")) == "SUCCEEDED"
    tail = list(api.logs("c-logs", ranks=[0], tail=2))
    assert [(l.rank, l.worker_id, l.text, l.notice) for l in tail] == [(0, "w1", "line 3 of rank 0", False),
                                                                        (0, "w1", "é ok", False)]
    assert tail[1].raw == "é ok".encode()
    assert list(api.logs("c-logs", ranks=[5])) == []


def test_workers_drain_and_undrain(api):
    workers = api.workers()
    assert [w.id for w in workers] == ["w1"]
    assert api.drain("w1").draining
    assert [w.draining for w in api.workers()] == [True]
    assert not api.undrain("w1").draining


def test_errors_carry_the_grpc_status_and_the_server_s_message(api):
    with pytest.raises(kc.NotFoundError) as e:
        api.get("nope")
    assert (e.value.code, e.value.message) == ("NOT_FOUND", "no job nope")
    with pytest.raises(kc.InvalidArgumentError) as e:
        api.submit({"name": "x", "min_workers": 0, "builtin": {"model": "mlp", "epochs": 1}})
    assert "min_workers" in e.value.message
    with pytest.raises(kc.InvalidArgumentError):
        api.submit({"name": "x", "no_such_field": 1})
    api.submit(pending_spec("c-3"))
    with pytest.raises(kc.AlreadyExistsError):
        api.submit(dict(pending_spec("c-3"), name="other"))
    api.cancel("c-3")  # pending jobs ahead of others hold them (FIFO)
    with pytest.raises(kc.FailedPreconditionError):
        api.cancel("c-3")
    with pytest.raises(kc.NotFoundError):
        list(api.logs("nope"))
    with pytest.raises(kc.NotFoundError):
        api.drain("no-such-worker")
    with pytest.raises(kc.ClientError) as e:
        list(api.watch("Bad/Id"))
    assert e.value.code == "INVALID_ARGUMENT"


def test_bad_python_arguments_are_refused_before_any_call(api):
    with pytest.raises(TypeError):
        api.get(None)
    with pytest.raises(TypeError):
        api.submit("not a spec")
    with pytest.raises(ValueError):
        api.list(phase="WAITING")
    with pytest.raises(TypeError):
        api.scale("c-1", -1)
    with pytest.raises(TypeError):
        list(api.logs("c-1", ranks=["0"]))
    with pytest.raises(TypeError):
        Client("127.0.0.1:1", tls=3)
    with pytest.raises(ValueError):
        Client("127.0.0.1:1", timeout=0)


def test_an_unreachable_server_is_unavailable_within_the_timeout():
    started = time.monotonic()
    with Client("127.0.0.1:1", timeout=2) as dead:
        with pytest.raises(kc.ClientError) as e:
            dead.workers()
    assert e.value.code in ("UNAVAILABLE", "DEADLINE_EXCEEDED")
    assert time.monotonic() - started < 10


def test_a_token_and_tls_are_used_like_the_cli(c, tmp_path):
    cert, key, token_file = tmp_path / "cert.pem", tmp_path / "key.pem", tmp_path / "token"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True)
    token_file.write_text("t0ken\n")
    ports = tmp_path / "ports"
    server = subprocess.Popen([os.path.join(kolotest.BIN, "kolo-server"), "--etcd", c.etcd_url, "--grpc-listen",
                               "127.0.0.1:0", "--http-listen", "off", "--port-file", str(ports), "--tls-cert",
                               str(cert), "--tls-key", str(key), "--token-file", str(token_file)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        cluster.wait_for(lambda: ports.exists() and "grpc_port=" in ports.read_text(), 30, "server ports")
        target = "127.0.0.1:" + dict(l.split("=") for l in ports.read_text().split())["grpc_port"]
        with Client(target, token="t0ken", tls=str(cert)) as secure:
            assert [w.id for w in secure.workers()] == ["w1"]
        with Client(target, token="wrong", tls=str(cert)) as wrong:
            with pytest.raises(kc.UnauthenticatedError):
                wrong.workers()
        with Client(target, token="t0ken", timeout=3) as plain:
            with pytest.raises(kc.ClientError):
                plain.workers()
    finally:
        server.kill()
        server.wait()


def test_a_checkout_without_a_build_names_the_fix_and_with_one_imports_its_messages(tmp_path):
    # a checkout (python/, proto/, include/) with no build/: kolo.client generates nothing at
    # import time, it raises ImportError naming the build; once <checkout>/build/python/kolo/v1
    # exists (CMake's kolo_python_proto), it imports from there
    src = kolotest.SRC
    checkout = tmp_path / "checkout"
    os.makedirs(checkout)
    subprocess.run(["cp", "-r"] + [os.path.join(src, d) for d in ("python", "proto", "include")] + [str(checkout)],
                   check=True)
    env = {k: v for k, v in os.environ.items() if k not in ("KOLO_BUILD_DIR", "PYTHONPATH")}
    env.update(PYTHONPATH=str(checkout / "python"), XDG_CACHE_HOME=str(tmp_path / "cache"), HOME=str(tmp_path))
    code = "import kolo.client as c; print(c.job_pb2.__file__); print(c.job_pb2.StreamLogsRequest(follow=True))"
    out = subprocess.run([kolotest.PYTHON, "-c", code], env=env, cwd=str(tmp_path), capture_output=True,
                         text=True, timeout=60)
    assert out.returncode != 0 and "ImportError" in out.stderr and "cmake --build build" in out.stderr, out.stderr
    assert not os.path.exists(tmp_path / "cache") and not os.path.exists(tmp_path / ".cache")
    generated = os.path.join(os.environ["KOLO_BUILD_DIR"], "python", "kolo", "v1")
    shutil.copytree(generated, str(checkout / "build" / "python" / "kolo" / "v1"))
    out = subprocess.run([kolotest.PYTHON, "-c", code], env=env, cwd=str(tmp_path), capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith(str(checkout / "build" / "python" / "kolo" / "v1")), out.stdout
    assert "follow: true" in out.stdout

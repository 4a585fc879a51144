"""Job blobs end to end (#29): real etcd, kolo-server and two kolo-workers. A kolo.Runner
function capturing a 20 MB numpy array (far past what the job spec can carry) runs on two
ranks and returns the right value: its payload is uploaded to kolo-server (PutJobBlob, in
256 KiB pieces, stored in etcd outside the spec), each worker fetches and checks it, and the
blob is deleted once the job has ended. An exec job reads its blob as KOLO_JOB_BLOB; a blob
corrupted or missing in etcd fails the job at once with the reason; bad uploads (over the
size limit, an oversized HTTP body, pieces out of order, a wrong digest, an unknown blob at
submit, a job that exists, no token) get clear errors and change nothing."""
import base64
import hashlib
import io
import json
import os
import subprocess
import time
import urllib.error
import urllib.request

import numpy as np
import pytest

import cluster
import kolotest
from kolo import client as kc
from kolo.runner import INLINE_PAYLOAD_BYTES, Runner

CHUNK = kc.BLOB_CHUNK_BYTES


@pytest.fixture(scope="module")
def c():
    cl = cluster.Cluster()
    try:
        for w in ("w1", "w2"):
            cl.start_worker(w)
        yield cl
    finally:
        cl.stop()


@pytest.fixture(scope="module")
def api(c):
    with kc.Client(c.grpc_target) as client:
        yield client


def etcd(c, path, body):
    request = urllib.request.Request(c.etcd_url + path, data=json.dumps(body).encode(), method="POST")
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


def b64(text):
    return base64.b64encode(text.encode() if isinstance(text, str) else text).decode()


def prefix_end(prefix):
    return prefix[:-1] + chr(ord(prefix[-1]) + 1)


def blob_keys(c, job_id):
    """Every etcd key of job_id's blob (meta and chunks)."""
    keys = []
    for prefix in ("/kolo/blobs/meta/%s" % job_id, "/kolo/blobs/data/%s/" % job_id):
        reply = etcd(c, "/v3/kv/range", {"key": b64(prefix), "range_end": b64(prefix_end(prefix)), "keys_only": True})
        keys += [base64.b64decode(kv["key"]).decode() for kv in reply.get("kvs", [])]
    return keys


def exec_spec(job_id, blob, script, workers=1):
    return {"name": "blob", "id": job_id, "min_workers": workers, "max_reconfigurations": 3,
            "exec": {"argv": ["/bin/sh", "-c", script], "blob": blob}}


def test_a_runner_function_capturing_a_20_mb_array_runs_and_returns_the_right_value(c, api):
    data = np.random.default_rng(29).standard_normal(2_500_000)  # 20 MB, random: compresses little

    def total():
        import kolo
        kolo.init()
        mine = np.array([data.sum(), float(data.size)])
        return kolo.allreduce(mine, op=kolo.Sum).tolist()

    runner = Runner(np=2, server=c.grpc_target, stream=io.StringIO(), timeout=300)
    started = time.monotonic()
    got = runner.run(total)
    print("20 MB closure: run() took %.1f s" % (time.monotonic() - started))
    assert got == pytest.approx([2 * data.sum(), 2 * data.size])
    spec = c.job(runner.job_id)["spec"]
    blob = spec["exec"]["blob"]
    assert int(blob["size"]) > 18 << 20 and len(blob["sha256"]) == 64
    assert len(json.dumps(spec)) < 8192, "the payload stayed out of the spec"
    assert "KOLO_RUNNER_PAYLOAD_0" not in spec["exec"]["env"]
    # the blob goes once the job has ended (the sweeper runs every 5 s)
    cluster.wait_for(lambda: not blob_keys(c, runner.job_id), 60, "the ended job's blob to be deleted")


def test_a_small_payload_still_rides_the_spec(c):
    runner = Runner(np=1, server=c.grpc_target, stream=io.StringIO(), timeout=180)
    assert runner.run(len, os.urandom(INLINE_PAYLOAD_BYTES // 2)) == INLINE_PAYLOAD_BYTES // 2
    spec = c.job(runner.job_id)["spec"]
    assert "blob" not in spec["exec"] and "KOLO_RUNNER_PAYLOAD_0" in spec["exec"]["env"]


def test_an_exec_job_reads_its_blob_as_kolo_job_blob(c, api):
    data = os.urandom(CHUNK * 2 + 1000)
    blob = api.put_blob("blob-ok", data)
    assert blob == {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    c.submit(exec_spec("blob-ok", blob, 'sha256sum "$KOLO_JOB_BLOB"; wc -c < "$KOLO_JOB_BLOB"'))
    c.wait_phase("blob-ok", ["SUCCEEDED"], 90)
    lines = [line.text for line in api.logs("blob-ok")]
    assert lines[0].split()[0] == blob["sha256"] and lines[1].strip() == str(len(data))


def test_a_corrupted_or_missing_blob_fails_the_job_at_once_with_the_reason(c, api):
    data = os.urandom(CHUNK * 3)
    for job_id, harm, reason in [
        ("blob-corrupt", lambda key: etcd(c, "/v3/kv/put", {"key": b64(key), "value": b64(b64(b"x" * CHUNK))}),
         "the job's blob is corrupted"),
        ("blob-missing", lambda key: etcd(c, "/v3/kv/deleterange", {"key": b64(key)}),
         "the job's blob is missing: chunk 1 of 3 is not in etcd"),
    ]:
        blob = api.put_blob(job_id, data)
        harm("/kolo/blobs/data/%s/00000001" % job_id)
        started = time.monotonic()
        c.submit(exec_spec(job_id, blob, "echo should not run", workers=2))
        job = c.wait_phase(job_id, ["FAILED"], 60)
        print("%s: FAILED after %.1f s" % (job_id, time.monotonic() - started))
        assert reason in job["status"]["error"], job["status"]["error"]
        assert job["status"].get("reconfigurations", 0) == 0, "a permanent failure, not retried as lost workers"
        assert not [line for line in api.logs(job_id) if "should not run" in line.text]


def put(api, job_id, data, size=None, offset=0, sha=None):
    return api._call("PutJobBlob", kc.job_pb2.PutJobBlobRequest(
        id=job_id, offset=offset, data=data, size=len(data) if size is None else size,
        sha256=sha or hashlib.sha256(data).hexdigest()))


def test_bad_uploads_get_clear_errors_and_change_nothing(c, api):
    jobs_before = sorted(j.id for j in api.list())
    with pytest.raises(kc.ResourceExhaustedError, match=r"over this server's limit of 67108864 .*--max-blob-bytes"):
        put(api, "bad-1", b"x" * 10, size=(64 << 20) + 1, sha="0" * 64)
    with pytest.raises(kc.InvalidArgumentError, match="data: at most 262144 bytes a piece"):
        put(api, "bad-1", b"x" * (CHUNK + 1))
    with pytest.raises(kc.InvalidArgumentError, match="sha256: the whole blob's SHA-256"):
        put(api, "bad-1", b"x", sha="not-hex")
    with pytest.raises(kc.FailedPreconditionError, match="no upload of job bad-1's blob is in progress"):
        put(api, "bad-1", b"x" * 10, size=CHUNK + 10, offset=CHUNK, sha="0" * 64)
    # pieces out of order
    first = b"a" * CHUNK
    put(api, "bad-2", first, size=3 * CHUNK, sha="1" * 64)
    with pytest.raises(kc.FailedPreconditionError, match=r"offset: expected 262144"):
        put(api, "bad-2", first, size=3 * CHUNK, offset=2 * CHUNK, sha="1" * 64)
    # the wrong digest: refused on the last piece, and nothing kept
    with pytest.raises(kc.InvalidArgumentError, match="hash to [0-9a-f]{64}, not the sha256 given .* nothing is kept"):
        put(api, "bad-3", b"y" * 100, sha="2" * 64)
    assert blob_keys(c, "bad-3") == []
    # an oversized HTTP body: 413, clear
    request = urllib.request.Request("http://127.0.0.1:%d/v1/jobs/bad-4/blob" % c.http_port,
                                     data=b'{"data":"' + b"A" * (5 << 20) + b'"}', method="POST",
                                     headers={"Content-Type": "application/json"})
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(request, timeout=30)
    assert e.value.code == 413 and b"byte limit" in e.value.read()
    assert blob_keys(c, "bad-4") == []
    # a blob no upload made, and one whose digest differs: refused at submit, no job made
    for job_id, blob, reason in [("bad-5", {"size": 10, "sha256": "3" * 64}, "no blob was uploaded for job bad-5"),
                                 ("bad-2", {"size": 3 * CHUNK, "sha256": "1" * 64}, "the upload for job bad-2 is not complete")]:
        with pytest.raises(kc.InvalidArgumentError, match="exec.blob: " + reason):
            api.submit(exec_spec(job_id, blob, "true"))
        with pytest.raises(kc.NotFoundError):
            api.get(job_id)
    # a job that exists takes no blob
    with pytest.raises(kc.AlreadyExistsError, match="job blob-ok exists"):
        put(api, "blob-ok", b"z")
    assert sorted(j.id for j in api.list()) == jobs_before
    # over HTTP, the same upload works (one piece, base64 in JSON)
    data = b"over http"
    reply = c.request("POST", "/v1/jobs/http-1/blob", {"data": data.hex(), "size": len(data),  # bytes: hex in kolo JSON
                                                       "sha256": hashlib.sha256(data).hexdigest()})
    assert reply == {"received": str(len(data)), "complete": True} or reply == {"received": len(data), "complete": True}


def test_uploads_need_the_server_s_token_like_every_write(c, tmp_path):
    token = tmp_path / "token"
    token.write_text("bl0b-t0ken\n")
    ports = tmp_path / "ports"
    server = subprocess.Popen([os.path.join(kolotest.BIN, "kolo-server"), "--etcd", c.etcd_url, "--grpc-listen",
                               "127.0.0.1:0", "--http-listen", "127.0.0.1:0", "--port-file", str(ports),
                               "--token-file", str(token), "--grace-ms", "200"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        cluster.wait_for(lambda: ports.exists() and "http_port=" in ports.read_text(), 30, "server ports")
        found = dict(line.split("=", 1) for line in ports.read_text().split())
        target = "127.0.0.1:%s" % found["grpc_port"]
        with kc.Client(target) as anonymous:
            with pytest.raises(kc.UnauthenticatedError):
                anonymous.put_blob("tok-1", b"secret")
        assert blob_keys(c, "tok-1") == []
        with kc.Client(target, token="bl0b-t0ken") as allowed:
            assert allowed.put_blob("tok-1", b"secret")["size"] == 6
    finally:
        server.terminate()
        server.wait(timeout=30)

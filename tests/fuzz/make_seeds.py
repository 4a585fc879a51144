#!/usr/bin/python3
"""Writes the seed corpora of tests/fuzz/corpus/<target>/ (committed; rerun after a schema
change): small valid inputs of every kind each target reads, so the fuzzer starts from
real structure. Each seed file is one input: a selector byte (see each target), then the
payload."""
import gzip
import json
import os
import struct
import subprocess
import sys
import tempfile
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.dirname(os.path.dirname(HERE))
CORPUS = os.path.join(HERE, "corpus")

# the order of kolo_fuzz_messages in fuzz_common.h (fuzz_json_codec adds AgentReport, Struct)
MESSAGES = ["JobSpec", "Job", "JobStatus", "Event", "Progress", "GetJobRequest", "ListJobsRequest",
            "ListJobsResponse", "CancelJobRequest", "ScaleJobRequest", "WatchJobRequest", "Worker",
            "ListWorkersResponse", "DrainWorkerRequest", "AgentReport", "Struct"]

SPEC = {"name": "mnist", "id": "mnist-1", "mode": "SYNC", "min_workers": 2, "max_workers": 4,
        "builtin": {"model": "mlp", "dataset": "fashion-mnist", "learning_rate": 0.05, "epochs": 3,
                    "steps": "18446744073709551615", "batch_size": 64, "hyper_parameters": {"hidden": "128"}},
        "labels": {"team": "vision"}, "checkpoint_dir": "/data/ckpt"}
STATUS = {"phase": "RUNNING", "epoch": 2, "members": [{"worker_id": "w1", "rank": 0, "host": "h", "address": "127.0.0.1:1"}],
          "progress": {"step": 10, "total_steps": 100, "loss": 0.5, "samples_per_sec": 100.0, "accuracy": 0.9},
          "created_unix_ms": 1, "started_unix_ms": 2, "updated_unix_ms": 3, "reconfigurations": 1,
          "error": "", "min_workers": 2, "max_workers": 4}
EVENT = {"seq": 1, "time_unix_ms": 5, "type": "SUBMITTED", "message": "job submitted", "epoch": 0}
JSON_SEEDS = {
    "JobSpec": [SPEC, {"name": "x", "min_workers": 1, "exec": {"argv": ["/bin/true", "-v"], "env": {"A": "1"},
                                                               "working_dir": "/tmp"}}],
    "Job": [{"id": "mnist-1", "spec": SPEC, "status": STATUS, "events": [EVENT]}],
    "JobStatus": [STATUS],
    "Event": [EVENT],
    "Progress": [STATUS["progress"]],
    "ListJobsRequest": [{"phase": "PENDING", "labels": {"team": "a"}, "page_size": 50, "page_token": "j-1"}],
    "CancelJobRequest": [{"id": "a", "reason": "because"}],
    "ScaleJobRequest": [{"id": "a", "min_workers": 1, "max_workers": 3}],
    "Worker": [{"id": "w1", "host": "h", "address": "a:1", "slots": 2, "gpus": 0, "state": "IDLE", "job_id": "",
                "registered_unix_ms": 7, "labels": {"zone": "z"}, "draining": False}],
}


def write(target, name, payload):
    d = os.path.join(CORPUS, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(payload)


def proto_seeds():
    """Protobuf bytes of the JSON seeds, through protoc's Python output."""
    out = tempfile.mkdtemp(prefix="kolo-seeds-")
    subprocess.run(["protoc", "--python_out=" + out, "-I", os.path.join(SRC, "proto"),
                    "kolo/v1/job.proto", "kolo/v1/cluster.proto"], check=True)
    sys.path.insert(0, out)
    from google.protobuf import json_format
    from kolo.v1 import cluster_pb2, job_pb2
    seeds = []
    for name, values in JSON_SEEDS.items():
        cls = getattr(job_pb2, name, None) or getattr(cluster_pb2, name)
        for v in values:
            msg = json_format.ParseDict(v, cls())
            seeds.append((MESSAGES.index(name), msg.SerializeToString()))
    return seeds


def main():
    for name, values in JSON_SEEDS.items():
        for i, v in enumerate(values):
            write("fuzz_json_codec", "%s-%d.json" % (name, i), bytes([MESSAGES.index(name)]) + json.dumps(v).encode())
    write("fuzz_json_codec", "bad-utf8", bytes([0]) + b'{"name":"\xff"}')
    struct_seed = {"progress": {"step": 40, "loss": 0.25, "event": "synced", "ok": True, "none": None,
                                "list": [1, -2, "x", False, None, [], {}], "nested": {"a": {"b": [{"c": 1.5}]}}}}
    write("fuzz_json_codec", "AgentReport-0.json",
          bytes([MESSAGES.index("AgentReport")]) + json.dumps(struct_seed).encode())
    write("fuzz_json_codec", "Struct-0.json",
          bytes([MESSAGES.index("Struct")]) + json.dumps(struct_seed["progress"]).encode())
    for i, (index, data) in enumerate(proto_seeds()):
        write("fuzz_pb_request", "%s-%d.pb" % (MESSAGES[index], i), bytes([index]) + data)
        write("fuzz_inflate", "gzip-%d" % i, gzip.compress(data))
        write("fuzz_inflate", "zlib-%d" % i, zlib.compress(data))
    write("fuzz_inflate", "bomb", gzip.compress(b"\0" * (1 << 20)))
    kv = {"key": "L2tvbG8vdjEvam9icy9hL3NwZWM=", "value": "e30=", "create_revision": "5", "mod_revision": "6",
          "version": "1", "lease": "0"}
    header = {"cluster_id": "1", "member_id": "2", "revision": "9", "raft_term": "3"}
    write("fuzz_etcd_reply", "watch-created", bytes([0]) + json.dumps(
        {"result": {"header": header, "created": True}}).encode())
    write("fuzz_etcd_reply", "watch-events", bytes([0]) + json.dumps(
        {"result": {"header": header, "events": [{"kv": kv}, {"type": "DELETE", "kv": kv, "prev_kv": kv}]}}).encode())
    write("fuzz_etcd_reply", "watch-compacted", bytes([0]) + json.dumps(
        {"result": {"header": header, "canceled": True, "compact_revision": "4", "cancel_reason": "compacted"}}).encode())
    write("fuzz_etcd_reply", "watch-error", bytes([0]) + json.dumps({"error": {"grpc_code": 14, "message": "x"}}).encode())
    write("fuzz_etcd_reply", "range", bytes([1]) + json.dumps({"header": header, "kvs": [kv, kv], "more": True,
                                                               "count": "3"}).encode())
    write("fuzz_etcd_reply", "kv", bytes([2]) + json.dumps(kv).encode())
    ring = {"job": "j1", "epoch": 3, "timeout_ms": 30000, "secret": "00112233445566778899aabbccddeeff", "members": [
        {"worker_id": "w1", "rank": 0, "host": "h1", "address": "127.0.0.1:5000", "local_rank": 0, "local_size": 1,
         "since_epoch": 1},
        {"worker_id": "w2", "rank": 1, "host": "h2", "address": "127.0.0.1:5001", "local_rank": 0, "local_size": 1,
         "since_epoch": 3}], "lost": [{"worker_id": "w0", "why": "its lease expired"}], "planned": True}
    write("fuzz_coord_records", "ringspec", bytes([0]) + json.dumps(ring).encode())
    member = {"id": "w1", "host": "h1", "address": "127.0.0.1:5000", "cpus": 2, "gpus": 0, "labels": {"z": "a"},
              "state": "idle"}
    write("fuzz_coord_records", "member", bytes([1]) + json.dumps(member).encode())
    write("fuzz_coord_records", "drain", bytes([2]) + json.dumps({"worker": "w1", "lease": 12345}).encode())
    assignment = {"job": "j1", "epoch": 3, "ring": "/kolo/v1/jobs/j1/ring/00000000000000000003", "rank": 1}
    write("fuzz_coord_records", "assignment", bytes([3]) + json.dumps(assignment).encode())
    report = {"worker": "w1", "epoch": 3, "formed_epoch": 3, "failed_epoch": 0, "failed_rank": -1,
              "failed_status": "", "exited": True, "exit_code": 1, "exit_epoch": 3,
              "time_unix_ms": 1700000000000, "pid": 42, "progress": {"step": 4, "event": "synced"},
              "stderr_tail": "boom"}
    write("fuzz_coord_records", "report", bytes([4]) + json.dumps(report).encode())
    # progress is a kolo.v1.Struct: one past the depth limit, one past the value limit
    deep = 0
    for _ in range(40):
        deep = {"x": deep}
    write("fuzz_coord_records", "report-deep-progress",
          bytes([4]) + json.dumps({"worker": "w1", "progress": deep}, separators=(",", ":")).encode())
    huge = {"worker": "w1", "progress": {"l": [0] * 10001, "s": "x" * 64, "n": None, "b": [True, 1.5]}}
    write("fuzz_coord_records", "report-huge-progress",
          bytes([4]) + json.dumps(huge, separators=(",", ":")).encode())
    write("fuzz_train_files", "csv", bytes([0, 0]) + b"label,a,b\n1,0.5,0.25\n0,1,2\n")
    write("fuzz_train_files", "libsvm", bytes([1, 1]) + b"1 1:0.5 3:2\n-1 2:1\n0 1:1 2:2 3:3\n")
    images = struct.pack(">IIII", 0x803, 2, 2, 2) + bytes(range(8))
    labels = struct.pack(">II", 0x801, 2) + bytes([1, 7])
    cut = round(len(images) * 255 / (len(images) + len(labels)))
    write("fuzz_train_files", "idx", bytes([2, cut]) + images + labels)
    write("fuzz_train_files", "idx-gz", bytes([2, 128]) + gzip.compress(images) + gzip.compress(labels))
    write("fuzz_train_files", "checkpoint", bytes([3, 0]) + b"KOLOCKPT" + bytes(64))
    agent_seeds()
    ring_wire_seeds()
    http_route_seeds()
    http_frame_seeds()


def agent_seeds():
    """fuzz_agent_proto: byte 0 even = a line the agent sends, odd = one the process sends."""
    to_process = {"ring": b"RING 3 1 3 0 1 30000 00112233 0.0.0.0:5001 h0:5000 h1:5001 h2:5002",
                  "ring-planned": b"RING 4 0 2 0 2 0 - 127.0.0.1:1 127.0.0.1:1 127.0.0.1:2 planned",
                  "stop": b"STOP job cancelled", "leave": b"LEAVE drained",
                  "hold": b"HOLD no renewal of the worker's lease acknowledged for 2500 ms (TTL 3 s)",
                  "release": b"RELEASE etcd renewed the lease",
                  "refused": b"REFUSED 1 2 agent protocol version 9 is not spoken by this kolo-worker"}
    to_agent = {"hello": b"HELLO 4242 4", "hello-v3": b"HELLO 4242 3", "hello-v2": b"HELLO 4242 2", "hello-v1": b"HELLO 4242",
                "mode": b"MODE DILOCO", "mode-async": b"MODE ASYNC", "formed": b"FORMED 3 1 3",
                "failed": b"FAILED 3 KOLO_ERR_PEER_LOST 2", "failed-none": b"FAILED 3 KOLO_ERR_TIMEOUT -1",
                "report": b'REPORT {"event":"progress","step":10,"loss":0.5}'}
    for name, line in to_process.items():
        write("fuzz_agent_proto", name, bytes([0]) + line)
    for name, line in to_agent.items():
        write("fuzz_agent_proto", name, bytes([1]) + line)


def ring_wire_seeds():
    """fuzz_ring_wire: byte 0 = hello / ack / control, byte 1 = ring size (1 + b % 8) and expected rank."""
    secret = b"fuzz-ring-secret"
    ring = 1 + 3 * 8  # size 2, expected rank 1

    def hello(kind, secret, name=b"", nonce=0):
        return (struct.pack(">IIIIIII", 0x4B4F4C4F, (2 << 16) | kind, 0, 7, 1, 2, len(secret)) + secret +
                struct.pack(">III", len(name), nonce >> 32, nonce & 0xFFFFFFFF) + name)
    write("fuzz_ring_wire", "hello-control", bytes([0, ring]) + hello(2, secret))
    write("fuzz_ring_wire", "hello-bell-shm", bytes([0, ring]) + hello(3, secret, b"shm", 0x1234567890))
    write("fuzz_ring_wire", "hello-wrong-secret", bytes([0, ring]) + hello(1, b"not-the-secret"))
    write("fuzz_ring_wire", "ack-ok", bytes([1, ring]) + struct.pack(">III", 0x4B41434B, 0, 1))
    write("fuzz_ring_wire", "ack-auth", bytes([1, ring]) + struct.pack(">III", 0x4B41434B, 5, 0))
    control = struct.pack("<Iiii", 0x4B43544C, 3, 1, 0) + struct.pack("<Iiii", 0x4B424541, 0, 0, 0) + \
        struct.pack("<Iiii", 0x4B4E4547, 64, 9, 0) + struct.pack("<Iiii", 0x4B43544C, 0, 0, 0)
    write("fuzz_ring_wire", "control", bytes([2, ring]) + control)


def http_route_seeds():
    """fuzz_http_route: byte 0 = method (GET HEAD POST PUT DELETE PATCH OPTIONS get), path, then args."""
    seeds = {"list": (0, b"/v1/jobs\nphase=RUNNING\nlabel=team=vision\npage_size=50\npage_token=j-1"),
             "logs": (0, b"/v1/jobs/mnist-1/logs\nrank=0\nrank=2\ntail=100\nfollow=1"),
             "metrics": (1, b"/v1/jobs/mnist-1/metrics\nsince_step=0042"),
             "stream": (0, b"/v1/stream\njobs=1\nworkers\njob=mnist-1"),
             "cancel": (2, b"/v1/jobs/mnist-1:cancel"), "scale": (2, b"/v1/jobs/a:scale"),
             "drain": (2, b"/v1/workers/w:1:drain"), "undrain": (2, b"/v1/workers/w1:undrain"),
             "events": (0, b"/v1/jobs/x/events"), "delete": (4, b"/v1/jobs/x"), "ui": (0, b"/ui/app.js"),
             "healthz": (2, b"/healthz"), "demand": (1, b"/v1/demand")}
    for name, (method, text) in seeds.items():
        write("fuzz_http_route", name, bytes([method]) + text)


def http_frame_seeds():
    """fuzz_http_frame: byte 0 = where the stream is split in two feeds, then a client's bytes."""
    get = b"GET /v1/jobs?phase=RUNNING&page_size=5 HTTP/1.1\r\nHost: x\r\nCookie: a=1; b=2\r\n\r\n"
    seeds = {"pipeline": get + b"HEAD /healthz HTTP/1.0\r\n\r\n" + get,
             "content-length": b"POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Length: 11\r\n\r\n{\"name\":1}\n",
             "chunked": b"POST /v1/jobs HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
                        b"5;ext=\"v\"\r\n{\"a\":\r\n1\r\n}\r\n0\r\nX-Trailer: t\r\n\r\n" + get,
             "empty-lines": b"\r\n\r\n" + get,
             "bad-length": get + b"POST / HTTP/1.1\r\nContent-Length: 1x\r\n\r\n",
             "both": b"POST / HTTP/1.1\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n",
             "bad-chunk": b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}}\r\n",
             "version": b"GET / HTTP/2.0\r\n\r\n", "fold": b"GET / HTTP/1.1\r\nA: 1\r\n 2\r\n\r\n"}
    for i, (name, text) in enumerate(sorted(seeds.items())):
        write("fuzz_http_frame", name, bytes([(i * 37) % 256]) + text)


if __name__ == "__main__":
    main()

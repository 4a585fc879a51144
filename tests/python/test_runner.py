"""kolo.Runner end to end: real etcd, kolo-server and three kolo-workers; the
function travels pickled through the job spec and its result back through rank
0's log. run(fn, x=3) on 2 workers returns rank 0's value and streams its prints;
an exception in fn surfaces with its remote traceback, also when only rank 1 raised
(that rank's error, not the abort it caused on rank 0); local helper modules ship with
the function; np=-1 and np=-2 need no server; a function from an exec'd namespace (no
file behind it, as in Jupyter) runs too; an elastic run survives a SIGKILLed worker;
bad arguments are refused, a payload past the limit with the remedy."""
import importlib
import io
import os
import re
import sys
import threading
import time

import numpy as np
import pytest

import cluster
import kolo
import kolo.mode
from kolo.runner import INLINE_PAYLOAD_BYTES, MAX_PAYLOAD_BYTES, RemoteTraceback, Runner, RunnerError


@pytest.fixture(scope="module")
def c():
    cl = cluster.Cluster()
    try:
        for w in ("w1", "w2", "w3"):
            cl.start_worker(w)
        yield cl
    finally:
        cl.stop()


def where_am_i(x):
    import kolo

    print("hello from rank %d of %d" % (kolo.rank(), kolo.size()))
    total = kolo.allreduce(np.ones(1), op=kolo.Sum)
    return kolo.rank(), kolo.size(), x * 2, float(total[0])


def fails(x):
    if x > 0:
        raise ValueError("x must not be positive, got %d" % x)


def test_run_returns_rank_zero_s_value_and_streams_its_prints(c):
    out = io.StringIO()
    runner = Runner(np=2, server=c.grpc_target, stream=out, timeout=180)
    assert runner.run(where_am_i, x=3) == (0, 2, 6, 2.0)
    assert "hello from rank 0 of 2" in out.getvalue()
    assert "rank 1" not in out.getvalue() and "@kolo-result" not in out.getvalue()
    assert c.wait_phase(runner.job_id, ["SUCCEEDED"], 60)


def test_an_exception_in_fn_is_raised_here_with_the_remote_traceback(c):
    runner = Runner(np=2, server=c.grpc_target, stream=io.StringIO(), timeout=180)
    with pytest.raises(ValueError, match="x must not be positive, got 3") as e:
        runner.run(fails, 3)
    assert isinstance(e.value.__cause__, RemoteTraceback)
    assert "in fails" in e.value.__cause__.text and "ValueError" in e.value.__cause__.text
    job = c.wait_phase(runner.job_id, ["CANCELLED", "FAILED"], 60)
    assert job["status"]["phase"] in ("CANCELLED", "FAILED")


def fails_on_rank_one():
    import numpy as np

    import kolo

    if kolo.rank() == 1:
        raise ValueError("rank one cannot go on")
    kolo.allreduce(np.ones(1), op=kolo.Sum)  # fails on rank 0 once rank 1 is gone
    return "not reached"


def test_an_exception_on_rank_one_only_is_raised_as_that_rank_s_error(c):
    runner = Runner(np=2, server=c.grpc_target, stream=io.StringIO(), timeout=180)
    with pytest.raises(ValueError, match="rank one cannot go on") as e:
        runner.run(fails_on_rank_one)
    assert e.value.kolo_rank == 1
    notes = "\n".join(getattr(e.value, "__notes__", []))
    assert "raised on rank 1 of job %s" % runner.job_id in notes
    assert "kolo logs %s --rank 1" % runner.job_id in notes
    assert "in fails_on_rank_one" in e.value.__cause__.text
    # the same with local ranks (kolorun): rank 1's file, not rank 0's abort
    with pytest.raises(ValueError, match="rank one cannot go on"):
        Runner(np=-2, stream=io.StringIO(), timeout=120).run(fails_on_rank_one)


HELPER = "def triple(x):\n    return 3 * x\n"


def test_local_helper_modules_ship_with_the_function(c, tmp_path):
    (tmp_path / "kolo_runner_helper.py").write_text(HELPER)
    (tmp_path / "kolo_runner_pkg").mkdir()
    (tmp_path / "kolo_runner_pkg" / "__init__.py").write_text("from .inner import OFFSET\n")
    (tmp_path / "kolo_runner_pkg" / "inner.py").write_text("OFFSET = 100\n")
    (tmp_path / "hidden").mkdir()
    (tmp_path / "hidden" / "kolo_runner_hidden.py").write_text("VALUE = 7\n")
    sys.path.insert(0, str(tmp_path))
    try:
        helper = importlib.import_module("kolo_runner_helper")

        def uses_helpers(x):  # a module it holds, a package it imports in its body
            import kolo_runner_pkg

            return helper.triple(x) + kolo_runner_pkg.OFFSET

        runner = Runner(np=2, server=c.grpc_target, stream=io.StringIO(), timeout=180)
        assert runner.run(uses_helpers, 5) == 115

        def imports_by_name():  # nothing names the module: py_modules= ships it
            return importlib.import_module("kolo_runner_" + "hidden").VALUE

        with pytest.raises(ModuleNotFoundError, match="kolo_runner_hidden"):
            runner.run(imports_by_name)
        assert (
            Runner(
                np=1,
                server=c.grpc_target,
                stream=io.StringIO(),
                timeout=180,
                py_modules=[str(tmp_path / "hidden" / "kolo_runner_hidden.py")],
            ).run(imports_by_name)
            == 7
        )
    finally:
        sys.path.remove(str(tmp_path))
        for name in ("kolo_runner_helper", "kolo_runner_pkg", "kolo_runner_pkg.inner"):
            sys.modules.pop(name, None)


def test_a_payload_near_the_inline_limit_runs_in_the_spec(c):
    # bigger ones go as the job's blob: tests/python/test_runner_blob.py
    data = os.urandom(INLINE_PAYLOAD_BYTES - (32 << 10))  # random: compression does not shrink it
    assert Runner(np=1, server=c.grpc_target, stream=io.StringIO(), timeout=180).run(len, data) == len(data)


def test_a_bad_interpreter_fails_the_run_at_once_with_the_reason(c):
    started = time.monotonic()
    runner = Runner(np=2, server=c.grpc_target, python="/nonexistent/bin/python3", stream=io.StringIO(), timeout=120)
    with pytest.raises(RunnerError, match="could not be started: cannot execute /nonexistent/bin/python3") as e:
        runner.run(len, b"x")
    print("FAILED after %.1f s" % (time.monotonic() - started))
    assert e.value.phase == "FAILED" and "kolo logs %s" % runner.job_id in str(e.value)
    assert c.job(runner.job_id)["status"].get("reconfigurations", 0) == 0  # not re-planned as lost workers


def test_np_minus_one_and_minus_two_run_without_a_server():
    assert Runner(np=-1).run(lambda a, b=1: a + b, 41) == 42
    out = io.StringIO()
    assert Runner(np=-2, stream=out, timeout=120).run(where_am_i, x=3) == (0, 2, 6, 2.0)
    assert "hello from rank 1 of 2" in out.getvalue()
    with pytest.raises(ValueError, match="got 5"):
        Runner(np=-2, stream=io.StringIO(), timeout=120).run(fails, 5)


def test_a_function_without_a_file_behind_it_runs_like_in_a_notebook(c):
    namespace = {}
    exec("def cell(x):\n    import kolo\n    return [x, kolo.size()]\n", namespace)
    scale = 10
    assert Runner(np=1, server=c.grpc_target, stream=io.StringIO(), timeout=180).run(
        lambda x: namespace["cell"](x * scale), 4
    ) == [40, 1]


def elastic_sum(steps, delay):
    import time

    import numpy as np

    import kolo

    state = kolo.elastic.ObjectState(step=0, total=0.0, sizes=[])

    @kolo.elastic.run
    def loop(state):
        while state.step < steps:
            state.total += float(kolo.allreduce(np.ones(1), op=kolo.Sum)[0]) / kolo.size()
            state.step += 1
            if state.step % 2 == 0:
                state.sizes.append(kolo.size())
                state.commit()
            print("step %d size %d" % (state.step, kolo.size()))
            time.sleep(delay)
        return state

    done = loop(state)
    return done.step, done.total, kolo.size(), kolo.elastic.reconfigurations()


def test_an_elastic_run_survives_a_sigkilled_worker(c):
    # a job of an earlier case may still hold a worker: this one would start at size 2 and
    # grow only after its first steps (CI, ASan, 2 loaded cores)
    c.wait_jobs_ended(60)
    out = io.StringIO()
    runner = Runner(np=(2, 3), server=c.grpc_target, stream=out, timeout=300, max_reconfigurations=3)
    result = {}
    thread = threading.Thread(target=lambda: result.setdefault("value", runner.run(elastic_sum, 40, 0.1)))
    thread.start()
    three = re.compile(r"^step \d+ size 3$", re.M)
    cluster.wait_for(lambda: len(three.findall(out.getvalue())) >= 6, 120, "three ranks stepping")
    job = c.job(runner.job_id)
    victim = next(m["worker_id"] for m in job["status"]["members"] if m["rank"] == 2)
    c.kill_worker(victim)
    thread.join(240)
    assert not thread.is_alive()
    steps, total, size, reconfigurations = result["value"]
    assert (steps, size) == (40, 2) and reconfigurations >= 1
    assert total == pytest.approx(40.0)  # every step counted once, whatever the ring size
    assert "size 2" in out.getvalue()


def test_bad_arguments_are_refused_before_anything_runs(c):
    for bad, error in [
        (0, ValueError),
        ("2", TypeError),
        ((3, 2), ValueError),
        ((0, 2), ValueError),
        (True, TypeError),
    ]:
        with pytest.raises(error):
            Runner(np=bad)
    with pytest.raises(TypeError):
        Runner(np=1).run("not a function")
    with pytest.raises(ValueError, match="over the Runner's limit .* load big data inside fn"):
        Runner(np=1, server=c.grpc_target).run(len, os.urandom(MAX_PAYLOAD_BYTES + 1))
    with pytest.raises(TypeError):
        Runner(np=1, env={"A": 1})
    assert isinstance(RunnerError("x"), RuntimeError) and kolo.Runner is Runner


def the_mode():
    import kolo
    import kolo.mode

    kolo.init()
    spec = kolo.mode.from_env()  # what kolo.torch's DistributedOptimizer reads
    kolo.mode.acknowledge(spec.mode)
    return spec.as_dict()


def test_the_runner_passes_the_mode_and_its_parameters_into_the_job(c):
    runner = Runner(
        np=2,
        server=c.grpc_target,
        stream=io.StringIO(),
        timeout=180,
        mode="diloco",
        average_every=7,
        outer_momentum=0.5,
        compression="int8",
    )
    got = runner.run(the_mode)
    assert (got["mode"], got["sync_every"], got["outer_momentum"], got["compression"]) == ("DILOCO", 7, 0.5, "int8")
    assert got["outer_lr"] == kolo.mode.default("DILOCO").outer_lr  # the others keep libkolo's defaults
    assert c.job(runner.job_id)["spec"]["mode"] == "DILOCO"


def test_a_mode_parameter_out_of_range_is_refused_at_submit_naming_it(c):
    runner = Runner(np=2, server=c.grpc_target, stream=io.StringIO(), timeout=180, mode="DILOCO", outer_momentum=1.5)
    with pytest.raises(Exception, match="outer_momentum"):
        runner.run(the_mode)


def test_bad_mode_arguments_are_refused_before_anything_is_submitted():
    with pytest.raises(ValueError, match="mode must be one of"):
        Runner(np=2, mode="fast")
    with pytest.raises(TypeError, match="unknown argument"):
        Runner(np=2, mode="DILOCO", outer_lr=0.5)
    with pytest.raises(ValueError, match="without a mode"):
        Runner(np=2, average_every=3)
    with pytest.raises(TypeError, match="average_every must be int"):
        Runner(np=2, mode="ASYNC", average_every=2.5)


def test_a_local_run_passes_the_mode_to_kolorun():
    got = Runner(np=-2, stream=io.StringIO(), timeout=120, mode="local-sgd", average_every=5).run(the_mode)
    assert (got["mode"], got["sync_every"]) == ("LOCAL_SGD", 5), got


def test_an_unknown_compression_is_refused_before_anything_is_submitted():
    with pytest.raises(ValueError, match="compression must be none, fp16 or int8"):
        Runner(np=2, mode="DILOCO", compression="int4")

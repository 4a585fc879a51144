"""kolo.Runner end to end: real etcd, kolo-server and three kolo-workers; the
function travels pickled through the job spec and its result back through rank
0's log. run(fn, x=3) on 2 workers returns rank 0's value and streams its prints;
an exception in fn surfaces with its remote traceback; np=-1 and np=-2 need no
server; a function from an exec'd namespace (no file behind it, as in Jupyter)
runs too; an elastic run survives a SIGKILLed worker; bad arguments are refused."""
import io
import threading
import time

import numpy as np
import pytest

import cluster
import kolo
from kolo.runner import MAX_PAYLOAD_BYTES, RemoteTraceback, Runner, RunnerError


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
        lambda x: namespace["cell"](x * scale), 4) == [40, 1]


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
    out = io.StringIO()
    runner = Runner(np=(2, 3), server=c.grpc_target, stream=out, timeout=300, max_reconfigurations=3)
    result = {}
    thread = threading.Thread(target=lambda: result.setdefault("value", runner.run(elastic_sum, 40, 0.1)))
    thread.start()
    cluster.wait_for(lambda: "step 6 size 3" in out.getvalue(), 120, "three ranks stepping")
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
    for bad, error in [(0, ValueError), ("2", TypeError), ((3, 2), ValueError), ((0, 2), ValueError), (True, TypeError)]:
        with pytest.raises(error):
            Runner(np=bad)
    with pytest.raises(TypeError):
        Runner(np=1).run("not a function")
    with pytest.raises(ValueError, match="over the Runner's limit"):
        Runner(np=1, server=c.grpc_target).run(len, b"x" * (MAX_PAYLOAD_BYTES + 1))
    with pytest.raises(TypeError):
        Runner(np=1, env={"A": 1})
    assert isinstance(RunnerError("x"), RuntimeError) and kolo.Runner is Runner

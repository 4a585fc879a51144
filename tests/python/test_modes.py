"""kolo.torch.modes (ASYNC, LOCAL_SGD, DILOCO) on 2 and 3 real ranks under
kolorun, each against its definition replayed in one process
(workers/modes_check.py), and the mode taken from the job's environment by
the unchanged Horovod-style DistributedOptimizer."""
import json
import re

import pytest

import kolotest

CHECK = kolotest.worker("modes_check.py")


@pytest.mark.parametrize("np", [2, 3])
def test_every_mode_matches_its_single_process_definition(np):
    result = kolotest.kolorun(np, CHECK, timeout=300)
    for rank in range(np):
        done = [line[3:] for line in result.lines(rank) if line.startswith("OK ")]
        assert len(done) == 9, (rank, done, result)


def test_a_rank_runs_at_most_max_staleness_averages_ahead_of_a_slow_one():
    # the last rank sleeps 50 ms a step; the others hit the bound (2 in flight) and never pass it
    result = kolotest.kolorun(3, CHECK, "async_staleness_is_bounded_with_a_slow_rank", timeout=300)
    staleness = {rank: tuple(int(v) for v in value.split()) for rank, value in result.values("STALENESS").items()}
    assert staleness[0] == (2, 2) and staleness[1] == (2, 2), (staleness, result)
    assert staleness[2][0] <= 2 and staleness[2][1] <= 2, staleness


def test_a_slow_rank_does_fewer_steps_a_round_instead_of_slowing_the_others():
    # rank 2 four times slower: rounds end at the fastest rank's H steps of compute
    result = kolotest.kolorun(3, CHECK, "the_fastest_rank_sets_the_pace", timeout=300)
    steps = {rank: int(value) for rank, value in result.values("STEPS").items()}
    assert steps[2] < 0.75 * min(steps[0], steps[1]), steps
    assert min(steps[0], steps[1]) >= 6 * 6 - 6, steps  # the fast ranks did (about) H steps every round


def test_the_unchanged_horovod_script_trains_in_the_mode_of_the_environment():
    # KOLO_MODE* as a kolo job (or kolorun --mode) sets them; DistributedOptimizer reads them through libkolo
    script = kolotest.worker("mode_from_env.py")
    for mode, extra in (("SYNC", {}), ("ASYNC", {"KOLO_MODE_SYNC_EVERY": "2", "KOLO_MODE_MAX_STALENESS": "2"}),
                        ("LOCAL_SGD", {"KOLO_MODE_SYNC_EVERY": "3"}),
                        ("DILOCO", {"KOLO_MODE_SYNC_EVERY": "3", "KOLO_MODE_COMPRESSION": "int8"})):
        env = dict(extra, KOLO_MODE=mode)
        result = kolotest.kolorun(2, script, extra_env=env, timeout=300)
        report = json.loads(result.values("MODE")[0])
        assert report["mode"] == mode and report["end_equal"], (mode, report)
        if mode == "SYNC":
            assert report["rounds"] is None and report["first_step_equal"], report
        else:  # local steps (no gradient all-reduce), then rounds
            assert not report["first_step_equal"] and report["rounds"] >= 2, report
            assert report["sync_every"] == int(extra["KOLO_MODE_SYNC_EVERY"]), report
        if mode == "DILOCO":
            assert report["compression"] == "int8", report
        # Horovod's lr x ranks where a step averages the ranks' gradients; a local step is one rank's
        assert report["lr_scale"] == (2 if mode == "SYNC" else 1), report


def test_a_malformed_mode_in_the_environment_is_a_clear_error():
    script = kolotest.worker("mode_from_env.py")
    result = kolotest.kolorun(2, script, extra_env={"KOLO_MODE": "DILOCO", "KOLO_MODE_OUTER_MOMENTUM": "1.5"},
                              timeout=300, check=False)
    assert result.returncode != 0, result
    assert re.search(r"KOLO_MODE_OUTER_MOMENTUM|outer_momentum", result.stdout + result.stderr), result

"""Horovod's process sets in kolo.torch (kolo/process_sets.py over kolo_comm_split):
one case per behaviour, on 2 and 3 real ranks under kolorun, each checked in the
worker against a single-process reference (tests/python/workers/process_sets.py)."""
import re
import signal
import time

import pytest

import kolotest


def _run(ranks, case):
    result = kolotest.kolorun(ranks, kolotest.worker("process_sets.py"), case, timeout=180)
    assert result.values("OK") == {r: case for r in range(ranks)}, result
    return result


@pytest.mark.parametrize("ranks", [2, 3])
def test_every_collective_on_a_process_set_matches_the_single_process_reference_of_its_members(ranks):
    _run(ranks, "collectives")


@pytest.mark.parametrize("ranks", [2, 3])
def test_a_rank_outside_a_process_set_gets_a_value_error_from_its_collectives(ranks):
    _run(ranks, "non_member")


@pytest.mark.parametrize("ranks", [2, 3])
def test_a_duplicate_set_or_bad_ranks_raise_value_error_and_change_nothing(ranks):
    result = _run(ranks, "duplicate_and_bad_ranks")
    assert "duplicate process set" in result.stdout, result


@pytest.mark.parametrize("ranks", [2, 3])
def test_the_global_set_is_never_removed_and_a_removed_set_runs_nothing(ranks):
    _run(ranks, "remove")


@pytest.mark.parametrize("ranks", [2, 3])
def test_static_and_dynamic_sets_answer_rank_size_and_included_like_horovod(ranks):
    _run(ranks, "queries")


@pytest.mark.parametrize("ranks", [2, 3])
def test_distributed_optimizer_and_broadcasts_on_a_set_train_like_one_process_on_its_members_batches(ranks):
    _run(ranks, "optimizer")


@pytest.mark.parametrize("ranks", [2, 3])
def test_join_on_a_set_lets_its_other_members_go_on_and_names_the_last(ranks):
    _run(ranks, "join")


@pytest.mark.parametrize("ranks", [2, 3])
def test_gradients_through_a_sets_allgather_and_broadcast_are_horovods(ranks):
    _run(ranks, "gradients")


@pytest.mark.parametrize("ranks", [2, 3])
def test_sets_are_made_again_after_a_re_form_or_the_re_form_fails_naming_a_set_that_lost_a_rank(ranks):
    _run(ranks, "reform")


def test_a_killed_member_fails_the_sets_collectives_with_its_ring_rank_within_a_second():
    ranks = kolotest.Ranks(3, kolotest.worker("process_set_peer_lost.py"))
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            line = ranks.procs[2].stdout.readline()
            if line.strip() == "READY" or not line:
                break
        assert line.strip() == "READY", ranks.wait(10)
        killed_at = time.time()
        ranks.signal(2, signal.SIGKILL)
        results = ranks.wait(60)
    finally:
        ranks.kill()
    out = results[0].stdout
    lost = re.search(r"LOST (\w+) (\S+) ([\d.]+)", out)
    assert lost and lost.group(1) == "PeerLostError" and lost.group(2) == "2", results[0]
    # measured well under 0.1 s here; the bound is a second, with the same slack
    # as test_python_errors' killed rank for a loaded CI machine
    print("detected %.3f s after the kill" % (float(lost.group(3)) - killed_at))
    assert float(lost.group(3)) - killed_at < 1.5, "detected %.3fs after the kill" % (float(lost.group(3)) - killed_at)
    assert "rank 1 of the set is rank 2 of the ring" in out, out
    assert "RING PeerLostError" in results[1].stdout, results[1]

"""Every collective of kolo.torch and kolo (numpy), every dtype, against a
single-process reference, on 1, 2 and 3 real ranks under kolorun."""
import pytest

import kolotest


@pytest.mark.parametrize("ranks", [1, 2, 3])
def test_every_op_and_dtype_matches_the_single_process_reference(ranks):
    result = kolotest.kolorun(ranks, kolotest.worker("ops_check.py"), timeout=300)
    counts = result.values("CHECKS")
    assert sorted(counts) == list(range(ranks)), result
    assert len(set(counts.values())) == 1 and int(counts[0]) > 500, counts


@pytest.mark.parametrize("ranks", [2, 3])
def test_ranks_may_submit_named_operations_in_any_order_and_skip_unused_parameters(ranks):
    result = kolotest.kolorun(ranks, kolotest.worker("any_order.py"), timeout=180)
    assert len(result.values("OK")) == ranks, result


def test_a_rank_out_of_data_joins_and_the_others_all_reduce_without_it():
    result = kolotest.kolorun(3, kolotest.worker("join.py"), timeout=180)
    assert result.values("OK") == {0: "2", 1: "2", 2: "2"}, result


def test_dataloader_workers_forked_from_a_rank_leave_its_ring_alone():
    result = kolotest.kolorun(2, kolotest.worker("dataloader_fork.py"), timeout=180)
    # 2 epochs x 4 batches; every index 0..15 twice on each of the 2 ranks, summed over the ring
    assert result.values("OK") == {0: "8 480", 1: "8 480"}, result


@pytest.mark.parametrize("ranks", [2, 3])
def test_every_differentiable_collective_has_horovods_gradient_and_the_single_process_one(ranks):
    result = kolotest.kolorun(ranks, kolotest.worker("grads_check.py"), timeout=180)
    counts = result.values("GRADS")
    assert sorted(counts) == list(range(ranks)), result
    assert len(set(counts.values())) == 1 and int(counts[0]) >= 20, counts

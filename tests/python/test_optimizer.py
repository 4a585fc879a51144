"""DistributedOptimizer on real ranks: 2 ranks x batch b end with the weights of
1 rank x 2b; fp16 compression, backward_passes_per_step and the predivide
factor; a Horovod script runs after changing only its import line."""
import re

import pytest
import torch

import kolotest


def train(tmp_path, ranks, *args):
    out = str(tmp_path / ("weights-%d-%s.pt" % (ranks, "-".join(args))))
    kolotest.kolorun(ranks, kolotest.worker("train_equivalence.py"), args[0], "16", "6", out, *args[1:], timeout=240)
    return torch.load(out)


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_two_ranks_with_batch_b_end_with_the_weights_of_one_rank_with_2b(tmp_path, optimizer):
    one = train(tmp_path, 1, optimizer)
    two = train(tmp_path, 2, optimizer)
    assert torch.allclose(one, two, atol=1e-5), (one - two).abs().max()
    assert not torch.allclose(one, torch.zeros_like(one))


def test_backward_passes_per_step_and_the_predivide_factor_keep_the_result(tmp_path):
    one = train(tmp_path, 1, "sgd")
    assert torch.allclose(one, train(tmp_path, 2, "sgd", "passes2"), atol=1e-5)
    assert torch.allclose(one, train(tmp_path, 2, "sgd", "predivide"), atol=1e-5)


def test_fp16_compression_trains_close_to_float32_but_not_identically(tmp_path):
    one = train(tmp_path, 1, "sgd")
    half = train(tmp_path, 2, "sgd", "fp16")
    difference = (one - half).abs().max().item()
    assert 0 < difference < 1e-2, difference


@pytest.mark.parametrize("ranks", [2, 3])
def test_optimizer_details_hold_on_real_ranks(ranks):
    result = kolotest.kolorun(ranks, kolotest.worker("optimizer_details.py"), timeout=120)
    assert len(result.values("OK")) == ranks, result


def test_a_horovod_script_runs_after_changing_only_its_import_line(tmp_path):
    source = open(kolotest.worker("horovod_style.py")).read()
    assert source.count("import horovod.torch as hvd") == 1
    script = tmp_path / "kolo_style.py"
    script.write_text(source.replace("import horovod.torch as hvd", "import kolo.torch as hvd"))
    changed = [a for a, b in zip(source.splitlines(), script.read_text().splitlines()) if a != b]
    assert changed == ["import horovod.torch as hvd"]
    for args in ([], ["--fp16-allreduce", "--batches-per-allreduce", "2"]):
        result = kolotest.kolorun(2, str(script), *args, timeout=240)
        digests = result.values("DIGEST")
        assert len(digests) == 2 and digests[0] == digests[1], result  # replicas stayed identical
        losses = [float(m) for m in re.findall(r"EPOCH \d+ loss (\S+) accuracy", result.stdout)]
        assert len(losses) == 2 and losses[-1] < losses[0], result  # it trains


@pytest.mark.parametrize("mode,ranks", [("sparse", 2), ("sparse", 3), ("dense", 2)])
def test_an_embedding_with_sparse_gradients_trains_as_one_process_on_the_whole_batch(mode, ranks):
    """Without sparse_as_dense the sparse gradients are all-gathered as indices and
    values (Horovod's sparse_allreduce_async); with it they are densified."""
    result = kolotest.kolorun(ranks, kolotest.worker("sparse_train.py"), mode, timeout=180)
    assert result.values("OK") == {r: "4" for r in range(ranks)}, result


@pytest.mark.parametrize("ranks", [2, 3])
def test_adasum_combines_tensors_and_optimizer_steps_pairwise_as_horovod(ranks):
    result = kolotest.kolorun(ranks, kolotest.worker("adasum_check.py"), timeout=180)
    assert len(result.values("OK")) == ranks, result

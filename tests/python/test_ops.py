"""Every collective of kolo.torch and kolo (numpy), every dtype, against a
single-process reference, on 1, 2 and 3 real ranks under kolorun."""
import os
import re
import shutil
import subprocess

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
    assert len(set(counts.values())) == 1 and int(counts[0]) >= 46, counts


@pytest.mark.parametrize("ranks", [2, 3])
def test_horovod_behaviours_a_ported_script_relies_on_hold(ranks):
    """Grouped all-gather and reduce-scatter, scaled reduce-scatter, integer
    scaling, build queries and exception classes, as Horovod has them."""
    result = kolotest.kolorun(ranks, kolotest.worker("api_parity.py"), timeout=180)
    counts = result.values("PARITY")
    assert sorted(counts) == list(range(ranks)), result
    assert len(set(counts.values())) == 1 and int(counts[0]) >= 50, counts


def _nccl_version_of_the_build():
    """NCCL_VERSION_CODE of the nccl.h the build used when libkolo links NCCL, else 0
    (read from the build, independently of libkolo's answer)."""
    build = os.environ.get("KOLO_BUILD_DIR", os.path.join(kolotest.SRC, "build"))
    library = os.environ.get("KOLO_LIBRARY", os.path.join(build, "lib", "libkolo.so"))
    needed = subprocess.run(["readelf", "-d", library], capture_output=True, text=True).stdout
    if "libnccl" not in needed:
        return 0
    cache = open(os.path.join(build, "CMakeCache.txt")).read()
    include = re.search(r"^KOLO_NCCL_INCLUDE_DIR:PATH=(.*)$", cache, re.M).group(1)
    header = open(os.path.join(include, "nccl.h")).read()
    return int(re.search(r"#define NCCL_VERSION_CODE (\d+)", header).group(1))


def test_nccl_built_is_the_nccl_version_libkolo_was_built_with_and_zero_without():
    if shutil.which("readelf") is None:
        pytest.skip("no readelf")
    result = kolotest.kolorun(1, kolotest.worker("api_parity.py"), timeout=120)
    assert result.values("NCCL_BUILT") == {0: str(_nccl_version_of_the_build())}, result


@pytest.mark.parametrize("ranks", [1, 3])
def test_init_after_shutdown_forms_the_ring_again(ranks):
    if ranks == 1:
        result = kolotest.run_python(open(kolotest.worker("reinit.py")).read())
        assert result.returncode == 0 and "OK 3" in result.stdout, result
    else:
        result = kolotest.kolorun(ranks, kolotest.worker("reinit.py"), timeout=120)
        assert result.values("OK") == {r: "3" for r in range(ranks)}, result


@pytest.mark.parametrize("ranks", [2, 3])
def test_sync_batch_norm_normalises_by_the_global_batch_as_batch_norm_on_all_of_it(ranks):
    result = kolotest.kolorun(ranks, kolotest.worker("syncbn_check.py"), timeout=120)
    assert len(result.values("OK")) == ranks, result


@pytest.mark.parametrize("ranks", [2, 3])
def test_allgather_and_alltoall_outputs_are_the_memory_python_allocated_once_the_size_is_known(ranks):
    result = kolotest.kolorun(ranks, kolotest.worker("python_output.py"), timeout=120, check=False)
    assert result.values("OK") == {r: "11" for r in range(ranks)}, result

"""Real-world-shaped Horovod scripts in examples/pytorch/ run under kolorun with
only their import line changed: a text classifier with a sparse embedding
table (sparse gradients, with and without sparse_as_dense) and a contrastive
model that back-propagates through allgather, and a classifier split into two
pipeline stages over process sets. Each trains to a target."""
import ast
import os
import re

import pytest

import kolotest

EXAMPLES = os.path.join(kolotest.SRC, "examples", "pytorch")
HOROVOD_SCRIPTS = ["embedding_sparse.py", "contrastive_allgather.py", "model_parallel_sets.py"]
IMPORT = "import kolo.torch as hvd  # was: import horovod.torch as hvd"


def example(name):
    return os.path.join(EXAMPLES, name)


@pytest.mark.parametrize("name", HOROVOD_SCRIPTS)
def test_the_script_is_horovods_but_for_its_import_line(name):
    source = open(example(name)).read()
    assert source.count(IMPORT) == 1
    docstring = ast.get_docstring(ast.parse(source), clean=False)
    code = source.replace(IMPORT, "import horovod.torch as hvd").replace(docstring, "")
    assert "kolo" not in code


@pytest.mark.parametrize("ranks,flags", [(2, []), (3, ["--sparse-as-dense"])])
def test_the_sparse_embedding_classifier_reaches_90_percent(ranks, flags):
    result = kolotest.kolorun(ranks, example("embedding_sparse.py"), *flags, timeout=180)
    accuracies = [float(a) for a in re.findall(r"accuracy ([\d.]+)%", result.stdout)]
    assert len(accuracies) == 3 and accuracies[-1] >= 90.0, result


def test_the_contrastive_model_learns_through_allgather_to_retrieve_its_pairs():
    result = kolotest.kolorun(2, example("contrastive_allgather.py"), timeout=180)
    accuracy = re.search(r"Retrieval accuracy: ([\d.]+)%", result.stdout)
    assert accuracy and float(accuracy.group(1)) >= 90.0, result


def test_a_model_split_into_pipeline_stages_over_process_sets_reaches_90_percent():
    # 4 ranks: two pipelines of two stages; activations and their gradients cross each
    # pipeline's set, gradients are averaged over each stage's set
    result = kolotest.kolorun(4, example("model_parallel_sets.py"), timeout=240)
    accuracy = re.search(r"Accuracy: ([\d.]+)%", result.stdout)
    assert accuracy and float(accuracy.group(1)) >= 90.0, result

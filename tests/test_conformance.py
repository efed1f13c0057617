"""The conformance matrix (tests/conformance.py): every read of a model
trained with HetEmbedding, on every route, equals the same model trained
with tf_keras' own Embedding, in one process and under
ParameterServerStrategy. `make test` runs a reduced matrix (one optimizer a
cell, alternating); `make conformance` (HET_TF_CONFORMANCE=full) runs all
of it."""
import functools
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest
from serving import serve_without_het_tf

from tests import conformance as c

FULL = os.environ.get("HET_TF_CONFORMANCE") == "full"
ONE_PROCESS = c.cells(reduced=not FULL)
_exports = []  # (cell, path) of every export, served together at the end


@functools.lru_cache(maxsize=None)
def oracle(calls, optimizer):
    """Keras' Embedding's reads: they depend on no route or cache."""
    cell = ("off", "holds", calls, optimizer)
    return c.reads(*c.train(cell, "keras"), "keras")


@pytest.mark.parametrize("cell", ONE_PROCESS, ids=c.cell_id)
def test_every_read_in_one_process_equals_keras_embedding(cell, tmp_path):
    pattern = c.refusal(cell)
    if pattern:
        with pytest.raises(ValueError, match=pattern):
            c.train(cell, "het")
        return
    expected = oracle(cell[2], cell[3])
    model, layer, history = c.train(cell, "het")
    got, checkpoint, export = c.reads(model, layer, history, "het", str(tmp_path))
    got["restored rows"] = c.restored_rows(cell, checkpoint)
    _exports.append((cell, export))
    assert c.mismatches(got, expected) == {}


def served_wrong(exports):
    """The cells whose export, served without het_tf, predicts other than
    Keras' Embedding: {cell id: mismatches}."""
    inputs = {name: values.tolist() for name, values in c.VALIDATION[0].items()}
    served = serve_without_het_tf([path for _, path in exports], inputs)
    wrong = {c.cell_id(cell): c.mismatches({"served": served[path]}, oracle(cell[2], cell[3]))
             for cell, path in exports}
    return {cell: m for cell, m in wrong.items() if m}


def test_every_export_serves_keras_embeddings_predictions_without_het_tf():
    assert _exports, "run with the matrix before it"
    assert served_wrong(_exports) == {}


def run_cluster(cells, folder):
    """The cells under ParameterServerStrategy: 1 PS task and 1 worker
    (with one worker every route is exact), each cell's reads from the
    chief as tests/conformance_cluster.py writes them."""
    out = os.path.join(folder, "reads.npz")
    script = os.path.join(os.path.dirname(__file__), "conformance_cluster.py")
    run = subprocess.run(
        [os.path.join(os.path.dirname(sys.executable), "het-tf"), "launch", "--ps", "1",
         "--workers", "1", "--", sys.executable, script, "--out", out, "--folder", folder,
         "--cells", json.dumps(cells)],
        capture_output=True, text=True, timeout=540, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    assert run.returncode == 0, (run.stdout[-3000:], run.stderr[-5000:])
    with np.load(out, allow_pickle=True) as held:
        return held["reads"].item(), held["exports"].item()


CLUSTER = (c.cells(c.CLUSTER_ROUTES) if FULL else
           [("refresh", "small", 2, "sgd"), ("check", "small", 2, "adagrad"),
            ("lookahead", "holds", 1, "adagrad"), ("hot-rows", "small", 1, "sgd")])


@pytest.fixture(scope="module")
def cluster_reads(tmp_path_factory):
    return run_cluster([list(cell) for cell in CLUSTER], str(tmp_path_factory.mktemp("pss")))


@pytest.mark.parametrize("cell", CLUSTER, ids=c.cell_id)
def test_every_read_under_parameter_server_strategy_equals_keras_embedding(cell, cluster_reads):
    got = cluster_reads[0][c.cell_id(cell)]
    pattern = c.refusal(cell)
    if pattern:
        assert re.search(pattern, got.get("refused", "")), got
        return
    assert "refused" not in got, got["refused"]
    assert c.mismatches(got, oracle(cell[2], cell[3])) == {}


def test_every_export_under_parameter_server_strategy_serves_without_het_tf(cluster_reads):
    exports = [(cell, cluster_reads[1][c.cell_id(cell)]) for cell in CLUSTER
               if c.cell_id(cell) in cluster_reads[1]]
    assert exports and served_wrong(exports) == {}

"""The conformance matrix (tests/conformance.py): every read of a model
trained with HetEmbedding, on every route, equals the same model trained
with tf_keras' own Embedding, in one process and under
ParameterServerStrategy; in hybrid mode (tests/conformance_hybrid.py) it
equals the same model trained on the same ranks with the cache off, and
the files it writes load in one process with each slot on its variable.
`make test` runs a reduced matrix (one optimizer a cell, alternating);
`make conformance` (HET_TF_CONFORMANCE=full) runs all of it."""
import functools
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
import tf_keras
from serving import serve_without_het_tf

from tests import conformance as c
from tests import conformance_hybrid as ch

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
    assert c.mismatches(got, expected, cell[0]) == {}


def served_wrong(exports):
    """The cells whose export, served without het_tf, predicts other than
    Keras' Embedding: {cell id: mismatches}."""
    inputs = {name: values.tolist() for name, values in c.VALIDATION[0].items()}
    served = serve_without_het_tf([path for _, path in exports], inputs)
    wrong = {c.cell_id(cell): c.mismatches({"served": served[path]}, oracle(cell[2], cell[3]),
                                           cell[0])
             for cell, path in exports}
    return {cell: m for cell, m in wrong.items() if m}


def test_every_export_serves_keras_embeddings_predictions_without_het_tf():
    assert _exports, "run with the matrix before it"
    assert served_wrong(_exports) == {}


def launch(args, timeout=540):
    """`het-tf launch ARGS` on this machine; fails with its output's tail."""
    run = subprocess.run([os.path.join(os.path.dirname(sys.executable), "het-tf"), "launch",
                          *args], capture_output=True, text=True, timeout=timeout,
                         env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    assert run.returncode == 0, (run.stdout[-3000:], run.stderr[-5000:])


def run_cluster(cells, folder):
    """The cells under ParameterServerStrategy: 1 PS task and 1 worker
    (with one worker every route is exact), each cell's reads from the
    chief as tests/conformance_cluster.py writes them."""
    out = os.path.join(folder, "reads.npz")
    script = os.path.join(os.path.dirname(__file__), "conformance_cluster.py")
    launch(["--ps", "1", "--workers", "1", "--", sys.executable, script, "--out", out,
            "--folder", folder, "--cells", json.dumps(cells)])
    with np.load(out, allow_pickle=True) as held:
        return held["reads"].item(), held["exports"].item()


CLUSTER = (c.cells(c.CLUSTER_ROUTES) if FULL else
           [("refresh", "small", 2, "sgd"), ("check", "small", 2, "adagrad"),
            ("lookahead", "holds", 1, "adagrad"), ("hot-rows", "small", 1, "sgd"),
            ("bfloat16", "small", 2, "adagrad")])


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
    assert c.mismatches(got, oracle(cell[2], cell[3]), cell[0]) == {}


def test_every_export_under_parameter_server_strategy_serves_without_het_tf(cluster_reads):
    exports = [(cell, cluster_reads[1][c.cell_id(cell)]) for cell in CLUSTER
               if c.cell_id(cell) in cluster_reads[1]]
    assert exports and served_wrong(exports) == {}


@pytest.fixture(scope="module")
def hybrid_reads(tmp_path_factory):
    """Each rank's reads of tests/conformance_hybrid.py: 1 PS task, 2 ranks."""
    folder = str(tmp_path_factory.mktemp("hybrid"))
    launch(["--hybrid", "--ps", "1", "--workers", "2", "--", sys.executable,
            os.path.join(os.path.dirname(__file__), "conformance_hybrid.py"), "--folder", folder])
    return [np.load(os.path.join(folder, f"rank{r}.npz"), allow_pickle=True)["results"].item()
            for r in range(2)]


HYBRID_READS = ("val_loss", "evaluate", "predict", "layer(ids)", "get_weights")
OFF = ch.cell_id(ch.CELLS[0])


def _slots(slots):
    return {f"{kind}{i}": value for kind in ("m", "v") for i, value in enumerate(slots[kind])}


@pytest.mark.parametrize("cell", ch.CELLS[1:], ids=ch.cell_id)
def test_every_hybrid_read_equals_the_cache_off_model_on_every_rank(cell, hybrid_reads):
    """Both ranks answer alike and as the cache-off model; on one rank the
    reads are refused right after fit, naming the collective call."""
    expected = {name: hybrid_reads[0][OFF][name] for name in HYBRID_READS}
    for rank in hybrid_reads:
        got = rank[ch.cell_id(cell)]
        assert c.differ({n: got[n] for n in HYBRID_READS}, expected, cell[0]) == {}
        assert c.differ(_slots(got["slots"]), _slots(rank[OFF]["slots"]), cell[0]) == {}
        for checked in (cell, ch.CELLS[0]):
            n, refusals = ch.CELLS.index(checked), rank[ch.cell_id(checked)]["refusals"]
            assert sorted(refusals) == ["evaluate", "export", "get_weights", "layer(ids)",
                                        "predict"]
            for read, refusal in refusals.items():
                assert refusal and f"'items{n}'" in refusal and "het_tf.hybrid." in refusal, read


@pytest.mark.parametrize("cell", ch.CELLS[1:], ids=ch.cell_id)
def test_hybrid_files_load_in_one_process_each_slot_on_its_variable(cell, hybrid_reads):
    """The .keras file and the checkpoint rank 0 wrote, in one process: the
    cache-off model's scores, and the saved Adam moments variable by variable."""
    got, oracle = hybrid_reads[0][ch.cell_id(cell)], hybrid_reads[0][OFF]
    loaded = tf_keras.models.load_model(got["keras"])
    restored, _ = ch.build(cell, f"restored{ch.CELLS.index(cell)}")
    tf.train.Checkpoint(model=restored).read(got["checkpoint"]).assert_existing_objects_matched()
    for model in (loaded, restored):
        predict = model.predict(ch.VALIDATION[0], verbose=0).ravel()
        assert c.differ({"predict": predict}, {"predict": oracle["predict"]}, cell[0]) == {}
        assert c.differ(_slots(ch.slots(model)), _slots(got["slots"]), "off") == {}


def test_hybrid_exports_serve_the_cache_off_models_scores_without_het_tf(hybrid_reads):
    exports = [hybrid_reads[0][ch.cell_id(cell)]["export"] for cell in ch.CELLS]
    served = serve_without_het_tf(exports, {k: v.tolist() for k, v in ch.VALIDATION[0].items()})
    assert {path: c.differ({"s": served[path]}, {"s": hybrid_reads[0][OFF]["predict"]}, cell[0])
            for cell, path in zip(ch.CELLS, exports)} == {path: {} for path in exports}


def test_hybrid_restores_wait_for_every_rank_fit_a_full_table_and_fail_together(hybrid_reads):
    ranks = [r["faults"] for r in hybrid_reads]
    for r in ranks:  # a table at its max_rows, restored on both ranks
        assert "restore_error" not in r, r["restore_error"]
        assert len(r["saved"][1]) == 16
        for restored in (r["restored"], r["restored_again"]):
            np.testing.assert_array_equal(restored[1], r["saved"][1])
            np.testing.assert_array_equal(restored[0], r["saved"][0])
    # Rank 1 read the table while rank 0 was in restore: as it was before.
    before, read = ranks[1]["before"], ranks[1]["read_while_rank0_restores"]
    assert not np.array_equal(before[0], ranks[1]["saved"][0])  # the read could tell
    np.testing.assert_array_equal(read[1], before[1])
    np.testing.assert_array_equal(read[0], before[0])
    # A restore that failed on rank 1 failed on both, rank 0 saying why.
    assert "missing-1" in ranks[1]["failed_restore"]
    assert "rank 1" in ranks[0]["failed_restore"] and "missing-1" in ranks[0]["failed_restore"]
    # Validation on rank 0 alone is refused on both ranks, before training.
    for r in ranks:
        assert "every rank must validate alike" in r["validation_differs"]

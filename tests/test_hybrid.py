"""Hybrid mode with real processes: horovodrun --gloo ranks sharing the
tables of 1 or 2 PS tasks on 127.0.0.1. Every run also checks that no PS
task died while the ranks ran."""
import json
import os
import subprocess
import sys

import pytest

from het_tf.apps.launch import LocalCluster
from tests.serving import assert_versions_serve_their_cuts
from tests.test_cluster import Log, assert_all_gone, assert_served_without_het_tf

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "examples", "hybrid_train.py")
CONNECT_PROBE = os.path.join(ROOT, "tests", "hybrid_connect_probe.py")
TIMEOUT = 300
# What each rank trains on in examples/hybrid_train.py.
SAMPLES, BATCH_SIZE, EPOCHS = 2048, 32, 3


def run_ranks(log_dir, ps, ranks, command, fails=False):
    """Runs command as `ranks` Horovod ranks next to `ps` fresh PS tasks;
    fails with the PS tasks' exit codes and the errors if it fails (with
    `fails`, if it does not fail in time); returns the log's text."""
    log_dir.mkdir(parents=True, exist_ok=True)
    log = Log()
    cluster = LocalCluster(ps, ranks, out=log, hybrid=True)
    try:
        cluster.start()
        horovod = cluster.start_chief(command)
        try:
            code = horovod.wait(timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            code = 124
        ps_codes = {name: p.poll() for name, p in cluster.tasks.items() if name.startswith("ps")}
    finally:
        cluster.close()
    assert_all_gone(cluster)
    (log_dir / "cluster.log").write_text(log.text())
    errors = [line for line in log.text().splitlines() if "Error" in line or "error" in line]
    ps_lines = [line for line in log.text().splitlines() if line.startswith("[ps:")]
    if fails:
        assert code not in (0, 124), f"the ranks exited with {code}"
    else:
        assert code == 0, (f"PS exit codes while the ranks ran: {ps_codes}\n" + "\n".join(
            errors[-40:]) + "\n" + "\n".join(ps_lines[-30:]))
    assert all(c is None for c in ps_codes.values()), f"a PS task died: {ps_codes}"
    return log.text()


def run_hybrid(result_dir, ps, extra=(), ranks=2, fails=False):
    """Each rank's results of examples/hybrid_train.py (with `fails`, the
    log of a run that must fail)."""
    log = run_ranks(result_dir, ps, ranks,
                    [sys.executable, SCRIPT, "--result-dir", str(result_dir), "--samples",
                     str(SAMPLES), "--batch-size", str(BATCH_SIZE), "--epochs", str(EPOCHS),
                     *extra], fails=fails)
    if fails:
        return log
    return [json.loads((result_dir / f"rank{r}.json").read_text()) for r in range(ranks)]


def test_ranks_connect_to_the_ps_tasks_one_at_a_time(tmp_path):
    """Ranks connecting at once made a PS task free the collective executor
    manager an earlier connection's context still used (SIGSEGV on that
    task). Three ranks, each then running new functions on both PS tasks."""
    result, steps = tmp_path / "connect.json", 20
    run_ranks(tmp_path, 2, 3, [sys.executable, CONNECT_PROBE, str(result), str(steps)])
    records = sorted(json.loads(result.read_text()), key=lambda r: r["start"])
    assert sorted(r["rank"] for r in records) == [0, 1, 2]
    for earlier, later in zip(records, records[1:]):
        assert earlier["end"] <= later["start"], f"connections overlapped: {records}"
    # Every rank's 2 updates a step reached the shared table.
    assert {r["clock_sum"] for r in records} == {3 * 2 * steps}


# On 1 PS task the Herald and sequence tests run the same checks.
@pytest.mark.parametrize("ps", [2])
def test_ranks_share_tables_and_keep_dense_weights_identical(tmp_path, ps):
    ranks = run_hybrid(tmp_path / "results", ps, ["--export-dir", str(tmp_path / "export"),
                                                  "--export-every", "80",
                                                  "--checkpoint-dir", str(tmp_path / "ckpt")])
    for r in ranks:
        assert r["size"] == 2 and r["num_ps"] == ps
        assert r["losses"][-1] < r["losses"][0] - 0.02
        assert r["hit_rate"] > 0.2
    assert ranks[0]["dense_digest"] == ranks[1]["dense_digest"]  # to the bit
    # ... after every step, and the steps do change them.
    steps = ranks[0]["step_digests"]
    assert len(steps) == EPOCHS * SAMPLES // BATCH_SIZE and steps == ranks[1]["step_digests"]
    assert len(set(steps)) == len(steps)
    # One table for both ranks: its clocks count both ranks' pushed updates.
    pushed = ranks[0]["cache_updates_pushed"] + ranks[1]["cache_updates_pushed"]
    assert pushed == ranks[0]["table_updates_applied"] == ranks[0]["clock_sum"] > 0
    assert ranks[0]["clock_sum"] == ranks[1]["clock_sum"]
    # Each shard keeps one record of copies for each rank's cache.
    assert ranks[0]["record_workers"] == 2 * ps
    # A version every 80 of the 192 steps, and the last, each what the
    # model gave at its cut, with every rank's steps until then pushed.
    assert_versions_serve_their_cuts(tmp_path / "export", ranks[0], [80, 160, 192])

    if ps == 2:  # and a relaunch resumes from the checkpoint
        resumed = run_hybrid(tmp_path / "resumed", ps, ["--epochs", "1",
                                                        "--checkpoint-dir", str(tmp_path / "ckpt")])
        for r in resumed:
            assert r["resumed_from"].startswith(str(tmp_path / "ckpt"))
            assert r["restored_rows"] == ranks[0]["table_rows"]
        assert resumed[0]["dense_digest"] == resumed[1]["dense_digest"]


# The conformance matrix's hybrid hot-rows cell checks every read on both
# ranks against the cache-off model in `make test`; this longer run with
# Adam, a flush and a resume is in `make soak`.
@pytest.mark.long
def test_hot_rows_stay_identical_on_every_rank_and_off_the_shards(tmp_path):
    """FAE's hot block with Adam (its moments and step counts are state
    too): both ranks hold the same hot rows to the bit after every step, no
    hot update reaches the shards while training, the flush writes the
    block back, and checkpoints, a resumed run and the export see one
    table."""
    hot = ["--hot-rows", "40", "--optimizer", "adam"]
    ranks = run_hybrid(tmp_path / "results", 2, [*hot, "--export-dir", str(tmp_path / "export"),
                                                 "--checkpoint-dir", str(tmp_path / "ckpt")])
    for r in ranks:
        assert r["losses"][-1] < r["losses"][0] - 0.02
        assert r["hot_bytes_exchanged"] > 0
    assert len(ranks[0]["hot_keys"]) == 40 and ranks[0]["hot_keys"] == ranks[1]["hot_keys"]
    steps = ranks[0]["hot_digests"]
    assert len(steps) == EPOCHS * SAMPLES // BATCH_SIZE and steps == ranks[1]["hot_digests"]
    assert len(set(steps)) == len(steps)  # every step moved them
    assert ranks[0]["hot_digest"] == ranks[1]["hot_digest"] == ranks[0]["hot_on_shards_digest"]
    # The shards applied the caches' pushes and nothing else: the hot rows'
    # updates reached them only as the block's state, written back.
    pushed = ranks[0]["cache_updates_pushed"] + ranks[1]["cache_updates_pushed"]
    assert pushed == ranks[0]["table_updates_applied"] > 0
    assert ranks[0]["clock_sum"] == pushed + ranks[0]["hot_clocks"] - ranks[0]["hot_clocks_loaded"]
    assert ranks[0]["hot_clocks"] > ranks[0]["hot_clocks_loaded"]
    assert_served_without_het_tf(tmp_path / "export", ranks[0])

    # Resumed on 1 PS task: one table, whatever the number of tasks.
    resumed = run_hybrid(tmp_path / "resumed", 1, [*hot, "--epochs", "1",
                                                   "--checkpoint-dir", str(tmp_path / "ckpt")])
    for r in resumed:
        assert r["restored_rows"] == ranks[0]["table_rows"]
        assert r["hot_clocks_loaded"] == ranks[0]["hot_clocks"]  # the block starts as saved
    assert len({r["hot_digest"] for r in resumed}) == 1


# The masked sequence model trains in a cluster (test_cluster.py) and in one
# process; in hybrid mode the ragged one runs here, the masked one in
# `make soak`.
@pytest.mark.parametrize("model", [pytest.param("--sequence", marks=pytest.mark.long),
                                   "--ragged"])
def test_sequence_models_train_in_hybrid_mode(tmp_path, model):
    """A masked sequence model (the padding row, looked up by both ranks, is
    never pushed), and a ragged one with a MaxNorm(axis=1) constraint (every
    row an update reached holds the norm; its export takes the ragged ids
    as values and row splits)."""
    ranks = run_hybrid(tmp_path / "results", 1, [model, "--export-dir", str(tmp_path / "export")])
    for r in ranks:
        assert r["losses"][-1] < r["losses"][0] - 0.02
        if model == "--sequence":
            assert r["padding_clock"] == 0
        else:
            assert 0 < r["updated_rows_max_norm"] <= 0.5 + 1e-6
    assert ranks[0]["dense_digest"] == ranks[1]["dense_digest"]
    pushed = ranks[0]["cache_updates_pushed"] + ranks[1]["cache_updates_pushed"]
    assert pushed == ranks[0]["table_updates_applied"] == ranks[0]["clock_sum"] > 0
    assert_served_without_het_tf(tmp_path / "export", ranks[0])


def test_distribute_needs_init_first():
    import tf_keras

    from het_tf import hybrid
    from het_tf.keras_layers import HetEmbedding

    inputs = tf_keras.Input(shape=(2,), dtype="int64")
    model = tf_keras.Model(inputs, HetEmbedding(10, 2)(inputs))
    with pytest.raises(ValueError, match=r"call het_tf.hybrid.init\(\) first"):
        hybrid.distribute(model)


def test_hybrid_needs_ps_addresses(monkeypatch):
    from het_tf import hybrid

    monkeypatch.delenv("HET_TF_PS", raising=False)
    monkeypatch.delenv("TF_CONFIG", raising=False)
    with pytest.raises(ValueError, match="set HET_TF_PS=host:port"):
        hybrid.ps_addresses()
    monkeypatch.setenv("HET_TF_PS", "a:1, b:2")
    assert hybrid.ps_addresses() == ["a:1", "b:2"]

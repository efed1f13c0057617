"""Herald in hybrid mode (docs/herald.md): location-aware allocation and the
exact communication plan, on real Horovod ranks sharing PS tasks."""
import collections
import re

import numpy as np
import pytest
import tf_keras

from het_tf.keras_layers import HetEmbedding
from het_tf.pipeline.allocation import Allocation
from tests.test_cluster import assert_served_without_het_tf
from tests.test_hybrid import BATCH_SIZE, EPOCHS, SAMPLES, run_hybrid

STEPS = SAMPLES // BATCH_SIZE * EPOCHS
LOST_PEER = re.compile(r"error|Traceback|connection closed by peer", re.IGNORECASE)


HERALD = ["--scheduler", "herald", "--allocate-every", "4", "--summary-rows", "200",
          "--cache-capacity", "300"]


def run_and_check_allocation(tmp_path):
    """2 ranks, scheduler="herald" with allocation every 4 steps: every rank
    computes the same assignment each step, each keeps its batch size, and
    the samples trained in a step are exactly the samples read in it; the
    export serves without het_tf. Returns both ranks' results."""
    results = run_hybrid(tmp_path / "run", 1, [*HERALD, "--export-dir", str(tmp_path / "export"),
                                                "--checkpoint-dir", str(tmp_path / "ckpt")])
    first, second = results
    assert len(first["assignments"]) == STEPS
    assert first["assignments"] == second["assignments"]
    moved = 0
    for step, workers in enumerate(first["assignments"]):
        assert collections.Counter(workers) == {0: BATCH_SIZE, 1: BATCH_SIZE}
        moved += sum(w != 0 for w in workers[:BATCH_SIZE])
        batch = step % (SAMPLES // BATCH_SIZE)
        read = [tuple(s) for r in results
                for s in r["read"][batch * BATCH_SIZE:(batch + 1) * BATCH_SIZE]]
        trained = [tuple(s) for r in results for s in r["trained_on"][step]]
        assert all(len(r["trained_on"][step]) == BATCH_SIZE for r in results)
        assert collections.Counter(trained) == collections.Counter(read)
    # The caches differ enough that some samples move, and the moves count.
    assert moved > 0 and first["allocation_moved"] > 0
    assert first["allocation_bytes"] > 0
    # The plan: every update reached the shards by the final flush, through
    # the caches or, for the rows both ranks read in a step, directly.
    for r in results:
        assert r["table_updates_applied"] == r["clock_sum"] == sum(
            x["cache_updates_pushed"] + x["plan_direct_keys"] for x in results)
        assert r["plan_bytes"] > 0 and r["plan_direct_keys"] > 0
    assert first["dense_digest"] == second["dense_digest"]
    assert first["losses"][-1] < first["losses"][0] - 0.02
    assert_served_without_het_tf(tmp_path / "export", first)
    return results


def test_allocation_and_plan_agree_on_every_rank_and_lose_no_sample(tmp_path):
    run_and_check_allocation(tmp_path)


@pytest.mark.long  # 3 hybrid runs; the lost-rank test below plans over a window and resumes
def test_a_window_plans_ahead_and_a_stay_bonus_keeps_samples_home(tmp_path):
    """Beside the allocation's run: a window of 4, and a stay bonus, resumed
    from its checkpoint."""
    results = run_and_check_allocation(tmp_path)
    first = results[0]

    # A window of 4: the rows a rank reads again within it go through its
    # cache from their first read, so fewer go directly; exact all the same.
    windowed = run_hybrid(tmp_path / "windowed", 1, [*HERALD, "--window", "4"])
    assert windowed[0]["assignments"] == windowed[1]["assignments"]
    for r in windowed:
        assert r["table_updates_applied"] == r["clock_sum"] == sum(
            x["cache_updates_pushed"] + x["plan_direct_keys"] for x in windowed)
        assert r["plan_ahead_keys"] > 0
    assert (sum(r["plan_direct_keys"] for r in windowed)
            < sum(r["plan_direct_keys"] for r in results))
    assert windowed[0]["dense_digest"] == windowed[1]["dense_digest"]

    # A stay bonus above any sample's rows keeps every sample home.
    resumed = run_hybrid(tmp_path / "resumed", 1, [*HERALD, "--epochs", "1", "--stay-bonus",
                                                    "1000", "--checkpoint-dir",
                                                    str(tmp_path / "ckpt")])
    assert all(workers == [0] * BATCH_SIZE + [1] * BATCH_SIZE
               for workers in resumed[0]["assignments"])
    for r in resumed:
        assert r["resumed_from"].startswith(str(tmp_path / "ckpt"))
        assert r["restored_rows"] == first["table_rows"]
        assert r["assignments"] == resumed[0]["assignments"]
    assert resumed[0]["dense_digest"] == resumed[1]["dense_digest"]


def test_a_rank_lost_mid_step_fails_the_job_and_it_resumes(tmp_path):
    """Rank 1 dies as it begins a step of the third epoch, while rank 0 is in
    the step's plan: the job fails (it does not hang) with the PS tasks
    alive, and a relaunch resumes from the second epoch's checkpoint, the
    ranks agreeing again."""
    ckpt = str(tmp_path / "ckpt")
    lost_at = 2 * SAMPLES // BATCH_SIZE + 5
    log = run_hybrid(tmp_path / "lost", 1, [*HERALD, "--window", "2", "--checkpoint-dir", ckpt,
                                            "--lose-rank-at", "1", str(lost_at)], fails=True)
    # The survivor stopped on the lost connection, not on a timeout. Gloo words
    # it by where the loss met rank 0: a read error in an op, or "Connection
    # closed by peer" in Horovod's background loop.
    survivor = [line for line in log.splitlines() if line.startswith("[rank:0]")]
    assert any(LOST_PEER.search(line) for line in survivor), log[-3000:]
    resumed = run_hybrid(tmp_path / "resumed", 1, [*HERALD, "--window", "2", "--epochs", "1",
                                                    "--checkpoint-dir", ckpt])
    for r in resumed:
        assert r["resumed_from"] == ckpt + "/ckpt-2"
        assert r["plan_ahead_keys"] > 0  # the window's next batch, through the caches
        assert r["table_updates_applied"] == sum(
            x["cache_updates_pushed"] + x["plan_direct_keys"] for x in resumed)
    assert resumed[0]["assignments"] == resumed[1]["assignments"]
    assert resumed[0]["dense_digest"] == resumed[1]["dense_digest"]


def _model(**layer):
    inputs = tf_keras.Input(shape=(3,), dtype="int64")
    embedding = HetEmbedding(100, 4, name="items", **layer)
    model = tf_keras.Model(inputs, tf_keras.layers.Flatten()(embedding(inputs)))
    return model, embedding


def test_bad_herald_settings_name_the_layer():
    with pytest.raises(ValueError, match="'items'.*herald.*no staleness"):
        _model(scheduler="herald", staleness=10)
    with pytest.raises(ValueError, match="'items'.*herald.*no staleness"):
        _model(scheduler="herald", read_staleness=0)
    with pytest.raises(ValueError, match="'items'.*herald.*needs the cache on"):
        _model(scheduler="herald", cache_capacity=0)
    with pytest.raises(ValueError, match="'items'.*hot_rows with scheduler='herald'"):
        _model(scheduler="herald", hot_rows=5)
    for window in (0, 33, 2.0):
        with pytest.raises(ValueError, match="'items'.*window must be a number of batches "
                           f"from 1 .* to 32, got {window}"):
            _model(scheduler="herald", window=window)
    with pytest.raises(ValueError, match="'items'.*window=2 with scheduler=None: the window is the "
                       "lookahead of Herald's plan"):
        _model(window=2)


def test_bad_allocation_settings_are_refused():
    model, _ = _model(scheduler="herald")
    args = dict(ranks=2, rank=0, allgather=None, alltoall=None)
    with pytest.raises(ValueError, match="summary_rows .* must be a positive int, got 0"):
        Allocation(model, 4, 0, **args)
    with pytest.raises(ValueError, match="every .* must be a positive int, got -1"):
        Allocation(model, -1, 10, **args)
    for bonus in (-1, 1.5, "many"):
        with pytest.raises(ValueError, match="allocation: stay_bonus must be 'auto' or a "
                           f"number of rows >= 0, got {bonus!r}"):
            Allocation(model, 4, 10, **args, stay_bonus=bonus)
    with pytest.raises(ValueError, match=r"'items'.*the allocation with 1 Horovod rank\(s\)"):
        Allocation(model, 4, 10, **{**args, "ranks": 1})
    uncached, _ = _model(cache_capacity=0)
    with pytest.raises(ValueError, match="no HetEmbedding layer with a cache"):
        Allocation(uncached, 4, 10, **args)
    checked, _ = _model(sync="check")
    with pytest.raises(ValueError, match="'items'.*the allocation with sync='check'"):
        Allocation(checked, 4, 10, **args)


def test_herald_alone_pushes_only_at_evictions_and_the_flush():
    """One process has no other rank to push for: its updates stay pending
    until a row is evicted or the flush, which delivers every one."""
    model, layer = _model(scheduler="herald", cache_capacity=20)
    model.compile("sgd", "mse")
    ids = (np.arange(600).reshape(200, 3) * 7) % 30
    model.fit(ids, np.zeros((200, 12)), batch_size=5, epochs=2, shuffle=False, verbose=0)
    before = layer.het_stats()
    assert before["cache_passed_through"] == 0
    # Only evicted rows went (the last step's wait in the outbox).
    assert 0 < before["cache_rows_pushed"] <= before["cache_dirty_evictions"]
    layer.flush()
    after = layer.het_stats()
    made = 2 * sum(len(set(ids[i:i + 5].ravel())) for i in range(0, 200, 5))
    assert after["table_updates_applied"] == after["cache_updates_pushed"] == made

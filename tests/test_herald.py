"""Herald in hybrid mode (docs/herald.md): location-aware allocation and the
exact communication plan, on real Horovod ranks sharing PS tasks."""
import collections

from tests.test_hybrid import BATCH_SIZE, EPOCHS, SAMPLES, run_hybrid

STEPS = SAMPLES // BATCH_SIZE * EPOCHS


def test_allocation_and_plan_agree_on_every_rank_and_lose_no_sample(tmp_path):
    """2 ranks, sync="herald" with allocation every 4 steps: every rank
    computes the same assignment each step, each keeps its batch size, and
    the samples trained in a step are exactly the samples read in it."""
    results = run_hybrid(tmp_path / "run", 1, ["--sync", "herald", "--allocate-every", "4",
                                                "--summary-rows", "200",
                                                "--cache-capacity", "300"])
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
    # The plan: every update reached the shards by the final flush, and
    # rows went out before it only for the other rank.
    for r in results:
        assert r["table_updates_applied"] == sum(x["cache_updates_pushed"] for x in results)
        assert r["plan_bytes"] > 0

"""The ops against the NumPy model of the table, cache and clock rules, on
randomized key streams, one or two workers, one to three shards."""
import os

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import het_tf
from tests.reference import RefCache, RefTable, Refused, StaleRound, initial_row, shard_of

LR = 0.05


# Row constraints as (kind, min_value, max_value, rate); the norms bind on
# rows initialized in U(-0.05, 0.05) with dim 3.
CONSTRAINTS = [None, ("non_neg", 0.0, 0.0, 1.0), ("max_norm", 0.0, 0.04, 1.0),
               ("unit_norm", 0.0, 0.0, 1.0), ("min_max_norm", 0.03, 0.05, 0.5)]


def constrained(optimizer, constraint):
    if constraint is None:
        return het_tf.OptimizerConfig(optimizer)
    kind, low, high, rate = constraint
    return het_tf.OptimizerConfig(optimizer, constraint=kind, constraint_min_value=low,
                                  constraint_max_value=high, constraint_rate=rate)


def grads_for(rows, step):
    """A fake but deterministic gradient, as a model's would be."""
    return (np.sin(rows * 7.0 + step) * 0.5).astype(np.float32)


def export_all(table):
    out = {}
    for s in range(table.num_shards):
        keys, values, _slots, clocks, _steps = table.export_shard(s, 0, 1 << 30)
        for k, v, c in zip(keys.numpy(), values.numpy(), clocks.numpy()):
            out[int(k)] = (v, int(c))
    return out


def ops_and_reference(name, optimizer, capacity, policy, read_staleness, write_staleness, sync,
                      shards, workers, constraint=None, wire="float32"):
    """The ops' table and workers' caches, and the NumPy model's, set alike
    (dim 3, seed 5, pin threshold 3; rows on a `wire` of that type):
    (table, caches, ref_table, ref_caches)."""
    config = het_tf.TableConfig(name, 3, seed=5, optimizer=constrained(optimizer, constraint))
    table = het_tf.ShardedTable(config, [None] * shards)
    cache_config = het_tf.CacheConfig(capacity, policy, read_staleness, write_staleness,
                                      pin_threshold=3, sync=sync, wire_dtype=wire)
    caches = [het_tf.WorkerCache(table, cache_config) for _ in range(workers)]
    ref_table = RefTable(3, optimizer, seed=5, constraint=constraint, shards=shards)
    ref_caches = [RefCache(ref_table, capacity, policy, read_staleness, write_staleness, 3, sync,
                           wire) for _ in range(workers)]
    return table, caches, ref_table, ref_caches


def assert_table_is_reference(table, ref_table):
    """Every shard's rows are the NumPy table's, keys, values and clocks;
    returns them, {key: (values, clock)}."""
    contents = export_all(table)
    assert sorted(contents) == sorted(ref_table.rows)
    for key, (values, clock) in contents.items():
        np.testing.assert_array_equal(values, ref_table.rows[key]["w"])
        assert clock == ref_table.rows[key]["clock"]
    return contents


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    batches=st.lists(st.lists(st.integers(-6, 40), min_size=1, max_size=12), min_size=1, max_size=10),
    capacity=st.integers(12, 30),
    policy=st.sampled_from(["lru", "lfu", "lfu_opt"]),
    read_staleness=st.sampled_from([0, 1, 3, -1]),
    write_staleness=st.sampled_from([0, 2, 5, -1]),
    shards=st.integers(1, 3),
    workers=st.integers(1, 2),
    optimizer=st.sampled_from(["sgd", "adagrad", "adam", "ftrl"]),
    evaluate_every=st.sampled_from([0, 3]),
    sync=st.sampled_from(["refresh", "check"]),
    restart_every=st.sampled_from([0, 4]),
    constraint=st.sampled_from(CONSTRAINTS),
)
# Evaluation reads at bound 0: worker 0's copy, one update behind after
# worker 1's step, is read again from the shard though the bound is 1.
@example(batches=[[0], [0], [0]], capacity=12, policy="lru", read_staleness=1, write_staleness=0,
         shards=1, workers=2, optimizer="sgd", evaluate_every=3, sync="check", restart_every=0,
         constraint=None)
def test_cached_training_matches_reference(unique_name, batches, capacity, policy, read_staleness,
                                           write_staleness, shards, workers, optimizer,
                                           evaluate_every, sync, restart_every, constraint):
    """Rows, counters and the final table match the NumPy model, which
    also asserts at every training read that no copy is staler than the
    read bound allows. A restart flushes a worker's cache and clears it: a
    new generation, whose old record the shards drop. A row constraint
    projects every update and merge, in the caches and on the shards."""
    table, caches, ref_table, ref_caches = ops_and_reference(
        unique_name(), optimizer, capacity, policy, read_staleness, write_staleness, sync, shards,
        workers, constraint)

    for step, batch in enumerate(batches):
        w = step % workers
        if restart_every and step % restart_every == restart_every - 1:
            caches[w].flush(LR)
            caches[w].clear()
            ref_caches[w].flush(LR)
            ref_caches[w].clear()
        training = not (evaluate_every and step % evaluate_every == evaluate_every - 1)
        rows, unique, inverse = caches[w].lookup(tf.constant(batch, tf.int64), training)
        ref_unique, ref_rows = ref_caches[w].lookup(batch, training)
        assert unique.numpy().tolist() == ref_unique
        np.testing.assert_array_equal(rows.numpy(), np.stack(ref_rows))
        assert [ref_unique[i] for i in inverse.numpy()] == batch
        if training:
            grads = grads_for(rows.numpy(), step)
            caches[w].apply_gradients(unique, tf.constant(grads), LR)
            ref_caches[w].apply_gradients(ref_unique, grads, LR)

    for cache, ref in zip(caches, ref_caches):
        stats = cache.stats()
        for name, value in ref.counters.items():
            assert stats[name] == value, name
        cache.flush(LR)
        ref.flush(LR)

    contents = assert_table_is_reference(table, ref_table)
    table_stats = table.stats()
    assert table_stats["updates_applied"] == ref_table.updates_applied
    # One record per syncing worker and shard at most, none larger than
    # the cache and its unreported evictions.
    if sync == "refresh":
        assert table_stats["record_workers"] <= workers * shards
        assert table_stats["record_copies"] <= workers * (capacity + 12)
    assert table_stats["updates_applied"] == sum(c for _, c in contents.values())
    assert table_stats["rows"] == len(ref_table.rows)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    batches=st.lists(st.lists(st.integers(0, 14), min_size=1, max_size=8), min_size=4, max_size=16),
    lost=st.lists(st.booleans(), min_size=16, max_size=16),
    capacity=st.integers(8, 16),
    read_staleness=st.sampled_from([0, 1]),
    write_staleness=st.sampled_from([0, 2]),
    shards=st.integers(1, 2),
    workers=st.sampled_from([2, 2, 1]),
    optimizer=st.sampled_from(["sgd", "adagrad", "adam"]),
)
def test_answers_lost_after_the_merge_leave_every_read_as_the_reference(
        unique_name, batches, lost, capacity, read_staleness, write_staleness, shards, workers,
        optimizer):
    """The same run as above by refresh, with faults the NumPy model does
    not know: before a training step, that worker's exchange goes to the
    shards, which merge its round and serve its misses, and the answers
    are lost (once or twice in a row). The step sends the round again. A
    shard that merged answers it as a repeat, sends the lost refreshes
    again and forgets the copies it handed out that the cache never took,
    so every row read, each step, and the final table are the model's, to
    the bit."""
    table, caches, ref_table, ref_caches = ops_and_reference(
        unique_name(), optimizer, capacity, "lru", read_staleness, write_staleness, "refresh",
        shards, workers)
    ops, injected = caches[0]._ops, 0
    for step, batch in enumerate(batches):
        w = step % workers
        ids = tf.constant(batch, tf.int64)
        for _ in range(1 + (step % 3 == 2)) if lost[step % len(lost)] else ():
            _u, _i, requests = ops.het_cache_begin_exchange(caches[w].handle(), ids,
                                                            num_shards=shards)
            table.exchange(requests)  # merged and served; the answers never arrive
            injected += 1
        rows, unique, _ = caches[w].lookup(ids, training=True)
        ref_unique, ref_rows = ref_caches[w].lookup(batch, True)
        assert unique.numpy().tolist() == ref_unique
        np.testing.assert_array_equal(rows.numpy(), np.stack(ref_rows))
        grads = grads_for(rows.numpy(), step)
        caches[w].apply_gradients(unique, tf.constant(grads), LR)
        ref_caches[w].apply_gradients(ref_unique, grads, LR)
    # Each lost answer's round was sent again, once.
    assert sum(c.stats()["rounds_resent"] for c in caches) == injected
    for cache, ref in zip(caches, ref_caches):
        cache.flush(LR)
        ref.flush(LR)
    assert_table_is_reference(table, ref_table)
    # No copy recorded that a cache never took: at most what each holds
    # and its unreported evictions.
    assert table.stats()["record_copies"] <= workers * (capacity + 10)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    batches=st.lists(st.lists(st.integers(-6, 40), min_size=1, max_size=12), min_size=1,
                     max_size=12),
    capacity=st.integers(6, 30),  # below 12, a batch may not fit: rows pass through
    policy=st.sampled_from(["lru", "lfu", "lfu_opt"]),
    read_staleness=st.sampled_from([0, 1, 3, -1]),
    write_staleness=st.sampled_from([0, 2, 5, -1]),
    shards=st.integers(1, 3),
    workers=st.integers(1, 2),
    optimizer=st.sampled_from(["sgd", "adagrad", "adam", "ftrl"]),
    unstaged=st.sets(st.integers(0, 11), max_size=3),
    wire=st.sampled_from(["float32", "float32", "bfloat16", "float16"]),
    ahead=st.integers(1, 4),
)
def test_the_lookahead_matches_reference(unique_name, batches, capacity, policy, read_staleness,
                                         write_staleness, shards, workers, optimizer, unstaged,
                                         wire, ahead):
    """With the lookahead each step's own exchange asks only for what the
    last prefetch did not bring, and its prefetch carries the pushes: rows,
    counters and the final table still match the NumPy model, which asserts
    the read bound at every training read. Some batches are never staged
    (their step fetches its misses itself). Each worker's pipeline runs
    `ahead` batches ahead of its steps: a row a staged batch reads is
    evicted only when no other can be, the furthest read first (the model
    asserts it at every eviction). On a 16-bit wire the model rounds the
    answers and each push, keeping the residual for the next."""
    table, caches, ref_table, ref_caches = ops_and_reference(
        unique_name(), optimizer, capacity, policy, read_staleness, write_staleness, "refresh",
        shards, workers, wire=wire)
    staged = [step not in unstaged for step in range(len(batches))]

    def stage(step):
        if step < len(batches) and staged[step]:
            caches[step % workers].stage(tf.constant(batches[step], tf.int64))
            ref_caches[step % workers].stage(batches[step])

    for step in range(workers * ahead):
        stage(step)
    for step, batch in enumerate(batches):
        w = step % workers
        stage(step + workers * ahead)  # each pipeline runs `ahead` batches ahead of its steps
        ids = tf.constant(batch, tf.int64)
        rows, unique, _ = caches[w].lookup(ids, True, lookahead=True)
        caches[w].prefetch(ids, rows)
        ref_unique, ref_rows = ref_caches[w].lookup(batch, True, lookahead=True)
        ref_caches[w].prefetch(batch)
        np.testing.assert_array_equal(rows.numpy(), np.stack(ref_rows))
        grads = grads_for(rows.numpy(), step)
        caches[w].apply_gradients(unique, tf.constant(grads), LR)
        ref_caches[w].apply_gradients(ref_unique, grads, LR)

    for cache, ref in zip(caches, ref_caches):
        stats = cache.stats()
        for name, value in ref.counters.items():
            assert stats[name] == value, name
        cache.flush(LR)
        ref.flush(LR)
    assert_table_is_reference(table, ref_table)
    assert table.stats()["updates_applied"] == ref_table.updates_applied


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    batches=st.lists(st.lists(st.integers(0, 9), min_size=1, max_size=5), min_size=8,
                     max_size=24),
    capacity=st.integers(2, 9),  # below 5, batches may not fit: rows pass through
    read_staleness=st.integers(0, 2),
    write_staleness=st.integers(1, 3),
    shards=st.integers(1, 2),
    optimizer=st.sampled_from(["sgd", "adam"]),
    sync=st.sampled_from(["refresh", "check"]),
)
def test_two_workers_on_few_rows_stay_within_the_read_bound(
        unique_name, batches, capacity, read_staleness, write_staleness, shards, optimizer, sync):
    """Two workers sharing a few hot rows, with evictions, batched pushes and
    batches larger than the cache: the shards must refresh copies as other
    writers move them.
    The NumPy model asserts the bound at every read; the ops must read its
    rows, and the table end with its rows and clocks."""
    dim = 2
    config = het_tf.TableConfig(unique_name(), dim, seed=3,
                                optimizer=het_tf.OptimizerConfig(optimizer))
    table = het_tf.ShardedTable(config, [None] * shards)
    cache_config = het_tf.CacheConfig(capacity, "lru", read_staleness, write_staleness,
                                      sync=sync)
    caches = [het_tf.WorkerCache(table, cache_config) for _ in range(2)]
    ref_table = RefTable(dim, optimizer, seed=3)
    ref_caches = [RefCache(ref_table, capacity, "lru", read_staleness, write_staleness, 100,
                           sync) for _ in range(2)]
    for step, batch in enumerate(batches):
        w = step % 2
        rows, unique, _ = caches[w].lookup(tf.constant(batch, tf.int64), True)
        ref_unique, ref_rows = ref_caches[w].lookup(batch, True)
        np.testing.assert_array_equal(rows.numpy(), np.stack(ref_rows))
        grads = grads_for(rows.numpy(), step)
        caches[w].apply_gradients(unique, tf.constant(grads), LR)
        ref_caches[w].apply_gradients(ref_unique, grads, LR)
    for cache, ref in zip(caches, ref_caches):
        stats = cache.stats()
        for name in ("stale_refreshes", "passed_through", "evictions", "rows_pushed"):
            assert stats[name] == ref.counters[name], name
        cache.flush(LR)
        ref.flush(LR)
    for key, (values, clock) in export_all(table).items():
        np.testing.assert_array_equal(values, ref_table.rows[key]["w"])
        assert clock == ref_table.rows[key]["clock"]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    steps=st.lists(st.lists(st.lists(st.integers(0, 14), min_size=1, max_size=6), min_size=3,
                            max_size=3), min_size=1, max_size=10),
    workers=st.integers(2, 3),
    capacity=st.integers(3, 20),  # below 6 a batch may not fit: rows pass through
    policy=st.sampled_from(["lru", "lfu"]),
    shards=st.integers(1, 2),
    optimizer=st.sampled_from(["sgd", "adagrad", "adam", "ftrl"]),
    window=st.integers(1, 4),
)
def test_the_herald_plan_is_exact_and_matches_reference(unique_name, steps, workers, capacity,
                                                        policy, shards, optimizer, window):
    """scheduler="herald" on random streams of 2 or 3 workers stepping together.
    Before each step every worker pushes its last step's gradients of its
    direct rows: those several workers read, and those it reads alone but
    neither read last step nor reads again within its window (the staged
    batches after its own, from the cache's op). It drops its copies of the
    rows the others read now and of its direct rows, pushing their pending
    updates; then each reads its direct rows from the shards and its others
    from its cache. The caches follow the NumPy model row for row; every
    cached read has seen every update of the steps before it (its clock,
    its pending updates included, counts them all, so no other worker holds
    one unpushed); and with SGD every row read equals the synchronous
    table's, all workers' gradients applied after each step."""
    dim = 3
    config = het_tf.TableConfig(unique_name(), dim, seed=5,
                                optimizer=het_tf.OptimizerConfig(optimizer))
    table = het_tf.ShardedTable(config, [None] * shards)
    cache_config = het_tf.CacheConfig(capacity, policy, 0, -1, scheduler="herald", window=window)
    caches = [het_tf.WorkerCache(table, cache_config) for _ in range(workers)]
    streams = [[list(dict.fromkeys(b[w])) for b in steps] for w in range(workers)]
    last = [set() for _ in range(workers)]  # each worker's last step's keys
    ref_table = RefTable(dim, optimizer, seed=5)
    ref_caches = [RefCache(ref_table, capacity, policy, 0, -1, 100, "refresh")
                  for _ in range(workers)]
    for cache, ref_cache, stream in zip(caches, ref_caches, streams):
        for batch in stream:  # as the input pipeline stages them, in order
            cache.stage(tf.constant(batch, tf.int64))
            ref_cache.stage(batch)  # their rows are evicted last
    sync_table = RefTable(dim, optimizer, seed=5)  # one synchronous table, no cache
    made = {}  # key -> updates made so far, by every worker
    kept = [([], None)] * workers  # each worker's last gradients of shared rows

    def push_kept(w):
        keys, grads = kept[w]
        if keys:
            table.push(tf.constant(keys, tf.int64), tf.constant(grads),
                       tf.ones([len(keys)], tf.int64), LR, return_rows=False)
            for k, g in zip(keys, grads):
                ref_table.push(k, g, 1, LR)

    for step, batches in enumerate(steps):
        batches = [list(dict.fromkeys(b)) for b in batches[:workers]]
        others = [sorted({k for o in range(workers) if o != w for k in batches[o]})
                  for w in range(workers)]
        direct = []
        for w in range(workers):
            ahead = caches[w].staged(tf.constant(batches[w], tf.int64), window - 1)
            ref_caches[w].take_staged(batches[w])
            expected = sorted({k for b in streams[w][step + 1:step + window] for k in b})
            assert ahead.numpy().tolist() == expected
            direct.append({k for k in batches[w]
                           if k in others[w] or (k not in last[w] and k not in expected)})
            last[w] = set(batches[w])
        for w in range(workers):
            push_kept(w)
            dropped = sorted(set(others[w]) | direct[w])
            outbox = caches[w].drop(tf.constant(dropped, tf.int64))
            assert int(outbox) == ref_caches[w].drop(dropped)
            if int(outbox):
                caches[w].push_due()
                ref_caches[w].lookup([], True)
        sync_rows = {k: sync_table.row(k)["w"].copy() for b in batches for k in b}
        updates = []
        for w, batch in enumerate(batches):
            shared = [k for k in batch if k in direct[w]]
            own = [k for k in batch if k not in direct[w]]
            read = {}
            if shared:
                rows = table.gather(tf.constant(shared, tf.int64)).numpy()
                np.testing.assert_array_equal(rows, [ref_table.row(k)["w"] for k in shared])
                read.update(zip(shared, rows))
            if own:
                rows, unique, _ = caches[w].lookup(tf.constant(own, tf.int64), True)
                ref_unique, ref_rows = ref_caches[w].lookup(own, True)
                np.testing.assert_array_equal(rows.numpy(), np.stack(ref_rows))
                read.update(zip(ref_unique, rows.numpy()))
                for k in ref_unique:
                    entry = ref_caches[w].entries.get(k)
                    if entry is not None:  # cached (a row passing through is read fresh)
                        assert entry["cc"] == made.get(k, 0), (step, w, k)
            for k in batch:
                if optimizer == "sgd":
                    np.testing.assert_allclose(read[k], sync_rows[k], atol=1e-6)
            grad = dict(zip(batch, grads_for(np.stack([read[k] for k in batch]), step)))
            if own:
                own_grads = np.stack([grad[k] for k in own])
                caches[w].apply_gradients(tf.constant(own, tf.int64), tf.constant(own_grads), LR)
                ref_caches[w].apply_gradients(own, own_grads, LR)
            kept[w] = (shared, np.stack([grad[k] for k in shared]) if shared else None)
            updates += list(grad.items())
        for k, g in updates:
            sync_table.push(k, g, 1, LR)
            made[k] = made.get(k, 0) + 1
    for w, (cache, ref) in enumerate(zip(caches, ref_caches)):
        stats = cache.stats()
        for name in ("stale_refreshes", "passed_through", "evictions", "rows_pushed"):
            assert stats[name] == ref.counters[name], name
        push_kept(w)
        cache.flush(LR)
        ref.flush(LR)
    for key, (values, clock) in export_all(table).items():
        np.testing.assert_array_equal(values, ref_table.rows[key]["w"])
        assert clock == ref_table.rows[key]["clock"] == made[key]


def test_rows_and_shards_follow_the_documented_hashes(unique_name):
    keys = [0, 1, -1, 2**40 + 3, -(2**63), 2**63 - 1]
    config = het_tf.TableConfig(unique_name(), 4, seed=9)
    table = het_tf.ShardedTable(config, [None] * 3)
    rows = table.gather(tf.constant(keys, tf.int64)).numpy()
    for key, row in zip(keys, rows):
        np.testing.assert_array_equal(row, initial_row(key, 4, 9))
    shards = het_tf.ops.het_shard_index(tf.constant(keys, tf.int64), num_shards=3).numpy()
    assert shards.tolist() == [shard_of(k, 3) for k in keys]
    for s in range(3):  # each row was created on the shard that owns it, and only there
        got, *_ = table.export_shard(s, 0, 100)
        assert sorted(got.numpy().tolist()) == sorted(k for k in keys if shard_of(k, 3) == s)


@pytest.mark.parametrize("sync", ["refresh", "check"])
@pytest.mark.parametrize("optimizer", ["sgd", "adagrad", "adam", "ftrl"])
def test_staleness_zero_equals_the_no_cache_path(unique_name, optimizer, sync):
    dim = 4
    rng = np.random.default_rng(0)
    cached = het_tf.ShardedTable(
        het_tf.TableConfig(unique_name(), dim, optimizer=het_tf.OptimizerConfig(optimizer)),
        [None, None])
    direct = het_tf.ShardedTable(
        het_tf.TableConfig(unique_name(), dim, optimizer=het_tf.OptimizerConfig(optimizer)),
        [None, None])
    cache = het_tf.WorkerCache(cached, het_tf.CacheConfig(40, "lfu", 0, 0, sync=sync))
    for step in range(25):
        ids = tf.constant((rng.zipf(1.3, size=(8, 3)) % 200).astype(np.int64))
        rows_c, unique_c, inverse_c = cache.lookup(ids, True)
        rows_d, unique_d, inverse_d = het_tf.lookup_without_cache(direct, ids)
        np.testing.assert_array_equal(tf.gather(rows_c, inverse_c).numpy(),
                                      tf.gather(rows_d, inverse_d).numpy())
        grads = grads_for(rows_d.numpy(), step)
        order = [unique_d.numpy().tolist().index(k) for k in unique_c.numpy()]
        cache.apply_gradients(unique_c, tf.constant(grads[order]), LR)
        het_tf.push_without_cache(direct, unique_d, tf.constant(grads), LR)
    cache.flush(LR)  # by refresh the last step's pushes wait for an exchange
    a, b = export_all(cached), export_all(direct)
    assert a.keys() == b.keys()
    for k in a:
        np.testing.assert_array_equal(a[k][0], b[k][0])
        assert a[k][1] == b[k][1]
    assert cache.stats()["evictions"] > 0


# The faults the NumPy model knows (tests/reference.py), one drawn a step:
# the step's exchange (by refresh) merged by every shard, by shard 0 alone
# or by none, or its push (by check) merged, with the answer lost, so the
# next exchange or push sends the round again; a restart (a flush, then a
# new incarnation) with a late copy of the lost round arriving after it; the
# layer called twice in a step; a gradient so large that the shards refuse
# to merge it (or the cache refuses the step, or a refresh drops it).
FAULTS = ["none", "none", "lost", "lost_part", "restart", "twice", "spike"]
# A spike: an Adagrad accumulator's 2.25e38, or an SGD step of 2e38 at LR_FAULTS,
# finite in one copy and past float32 in two: the second push is refused.
SPIKES = {"sgd": 2e38, "adagrad": 1.5e19, "adam": 1.5e19}
LR_FAULTS = 1.0


# `make fuzz` runs it with HET_TF_FUZZ_EXAMPLES (1,000) times 1.5.
@settings(max_examples=int(os.environ.get("HET_TF_FUZZ_EXAMPLES", "40")) * 3 // 2, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    steps=st.lists(st.tuples(st.lists(st.integers(0, 14), min_size=1, max_size=8),
                             st.sampled_from(FAULTS)), min_size=3, max_size=14),
    capacity=st.integers(5, 16),  # below 8, a batch may not fit: rows pass through
    policy=st.sampled_from(["lru", "lfu", "lfu_opt"]),
    read_staleness=st.sampled_from([0, 1, -1]),
    write_staleness=st.sampled_from([0, 2, -1]),
    shards=st.integers(1, 2),
    workers=st.integers(1, 2),
    optimizer=st.sampled_from(["sgd", "adagrad", "adam"]),
    sync=st.sampled_from(["refresh", "refresh", "check"]),
    wire=st.sampled_from(["float32", "float32", "bfloat16", "float16"]),
)
# Two copies of a row each take a spike; the first push merges, and the
# second copy's refresh cannot merge its own pending spike into the row
# (past float32): it drops it, named once, and trains on.
@example(steps=[([0], "none")] * 5 + [([0], "spike")] * 2 + [([0], "none")] * 2, capacity=5,
         policy="lru", read_staleness=0, write_staleness=2, shards=1, workers=2, optimizer="sgd",
         sync="refresh", wire="float32")
# Two workers' spikes on one row, rows in bfloat16: the shard refuses the
# second push, and the copy drops that push's rounding with it.
@example(steps=[([0], "none")] * 2 + [([0], "spike")] * 2 + [([0], "none")] * 3, capacity=5,
         policy="lru", read_staleness=-1, write_staleness=0, shards=1, workers=2,
         optimizer="adagrad", sync="refresh", wire="bfloat16")
def test_faults_leave_the_ops_as_the_reference_that_models_them(
        unique_name, steps, capacity, policy, read_staleness, write_staleness, shards, workers,
        optimizer, sync, wire):
    """The ops against the NumPy model with the faults modelled in it:
    every step's rows or its error (the ids a refused round names, or the
    step the cache refuses), a late round refused or answered as a repeat
    alike, the counters, the shards' records of copies (exactly: none of a
    copy never taken), the refused updates and the final table, to the bit.
    By refresh, rows may travel in 16 bits (the model rounds them and keeps
    each push's residual for the next)."""
    dim = 3
    table, caches, ref_table, ref_caches = ops_and_reference(
        unique_name(), optimizer, capacity, policy, read_staleness, write_staleness, sync, shards,
        workers, wire=wire if sync == "refresh" else "float32")
    ops = caches[0]._ops

    def both(real, model):
        """Runs a step's part on the ops and on the model: both succeed, or
        both fail naming the same ids."""
        try:
            expected = model()
        except Refused as refused:
            with pytest.raises(tf.errors.InvalidArgumentError) as error:
                real()
            message = str(error.value)
            assert ("nothing was applied" in message) == refused.local, message
            for k in refused.keys:
                assert str(k) in message, (refused.keys, message)
            return None
        return real(), expected

    def lose_exchange(w, batch, reach):
        _u, _i, requests = ops.het_cache_begin_exchange(
            caches[w].handle(), tf.constant(batch, tf.int64), num_shards=shards)
        for s in range(shards) if reach is None else reach:
            ops.het_table_exchange(table.handle(s), requests[s], dim=dim).numpy()
        late = ref_caches[w].lose_answer(batch, reach)
        return (lambda: [ops.het_table_exchange(table.handle(s), requests[s], dim=dim).numpy()
                         for s in range(shards)],
                lambda: ref_table.exchange(*late[:2], late[2], late[3], read_staleness,
                                           LR_FAULTS))

    def push_lost(w, keys, grads):
        """A checking cache's step whose round the shards merge, its answer
        lost; returns how to send that round again."""
        keys = tf.constant(keys, tf.int64)
        *pushes, uncached = ops.het_cache_accumulate(caches[w].handle(), keys,
                                                     tf.constant(grads), LR_FAULTS, dim=dim)
        if tf.size(uncached) > 0:
            het_tf.push_without_cache(table, tf.gather(keys, uncached),
                                      tf.gather(grads, uncached), LR_FAULTS)
        keys, deltas, counts, bases, evicted, senders = pushes

        def send():
            return [t.numpy() for t in table.push_deltas(keys, deltas, counts, bases, LR_FAULTS,
                                                         senders=senders, unanswered=evicted)]
        send()
        return send

    def train(w, step, reads, lost):
        """The step's lookups then its update; returns how to send again a
        round lost at the update, if one was."""
        union = sorted({k for batch in reads for k in batch})
        grads = grads_for(np.array(union, np.float32)[:, None] * np.ones(dim), step)
        if fault == "spike":  # on key 0, which the batch reads
            grads[0] = SPIKES[optimizer]
        for batch in reads:
            done = both(lambda b=batch: caches[w].lookup(tf.constant(b, tf.int64), True),
                        lambda b=batch: ref_caches[w].lookup(b, True))
            if done is None:
                return None
            (rows, unique, _), (ref_unique, ref_rows) = done
            assert unique.numpy().tolist() == ref_unique
            np.testing.assert_array_equal(rows.numpy(), np.stack(ref_rows))
        if lost:
            ref_caches[w].lost_round = None
            try:
                ref_caches[w].apply_gradients(union, grads, LR_FAULTS, lost=True)
            except Refused as refused:
                assert refused.local
                with pytest.raises(tf.errors.InvalidArgumentError, match="nothing was applied"):
                    push_lost(w, union, grads)
                return None
            send = push_lost(w, union, grads)
            late = ref_caches[w].lost_round
            return None if late is None else (send, lambda: ref_table.push_round(*late,
                                                                                 LR_FAULTS))
        both(lambda: caches[w].apply_gradients(tf.constant(union, tf.int64), tf.constant(grads),
                                               LR_FAULTS),
             lambda: ref_caches[w].apply_gradients(union, grads, LR_FAULTS))
        return None

    def restart(w):
        both(lambda: caches[w].flush(LR_FAULTS), lambda: ref_caches[w].flush(LR_FAULTS))
        caches[w].clear()
        ref_caches[w].clear()

    for step, (batch, fault) in enumerate(steps):
        w = step % workers
        late = None
        if sync == "refresh" and fault in ("lost", "restart", "lost_part"):
            reach = [0] if shards > 1 else []
            late = lose_exchange(w, batch, reach if fault == "lost_part" else None)
            if fault == "restart":
                restart(w)
        more = [k + 7 for k in batch[:3]] if fault == "twice" else None
        batch = [0] + batch if fault == "spike" else batch
        lost = sync == "check" and fault in ("lost", "restart", "lost_part")
        pushed_late = train(w, step, [batch] + ([more] if more else []), lost)
        if sync == "check" and fault == "restart":
            late = pushed_late
            restart(w)
        if fault == "restart" and late is not None:
            # The old incarnation's round, late: refused (an older generation,
            # or a round before the last), or answered as a repeat if the
            # shards have seen nothing newer; nothing changes.
            real, model = late
            try:
                model()
            except StaleRound:
                with pytest.raises(tf.errors.FailedPreconditionError):
                    real()
            else:
                real()

    for cache, ref in zip(caches, ref_caches):
        stats = cache.stats()
        for name, value in ref.counters.items():
            assert stats[name] == value, name
    table_stats = table.stats()
    assert table_stats["record_copies"] == ref_table.record_copies()
    for cache, ref in zip(caches, ref_caches):
        for _ in range(3):  # a flush a refused round stops is taken again
            if both(lambda c=cache: c.flush(LR_FAULTS),
                    lambda r=ref: r.flush(LR_FAULTS)) is not None:
                break
    assert_table_is_reference(table, ref_table)
    table_stats = table.stats()
    assert table_stats["updates_applied"] == ref_table.updates_applied
    assert table_stats["updates_refused_non_finite"] == ref_table.updates_refused

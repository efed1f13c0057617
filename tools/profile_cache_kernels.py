"""Times a cached embedding step against the no-cache step in one process,
and each kernel of the cached path on its own.

    .venv/bin/python tools/profile_cache_kernels.py

One table of dim 16 (the benchmark's 338,103 ids) and a 10% LFU cache at
staleness 100, syncing by refresh and by check; batches of 1024 x 26
Zipf(1.1) ids, as WDL's big table sees.
No network: the figures are the kernels' own cost.
"""
import argparse
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import het_tf  # noqa: E402
from het_tf.runtime.cache import lookup_without_cache, push_without_cache  # noqa: E402


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--vocabulary", type=int, default=338_103)
    p.add_argument("--dim", type=int, default=16)
    p.add_argument("--batch-ids", type=int, default=1024 * 26)
    p.add_argument("--batches", type=int, default=40)
    p.add_argument("--repeats", type=int, default=3)
    return p.parse_args()


def cached_step(cache, learning_rate=0.1):
    """One training step of `cache` on a batch of ids, with a fixed gradient."""
    @tf.function
    def step(ids):
        rows, unique, _ = cache.lookup(ids, True)
        cache.apply_gradients(unique, tf.ones_like(rows) * 0.01, learning_rate)
    return step


def per_call_ms(fn, calls):
    fn()
    started = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - started) / calls * 1000


def main():
    args = parse_args()
    rng = np.random.default_rng(0)
    table = het_tf.ShardedTable(het_tf.TableConfig("profiled", args.dim, seed=1), [None])
    caches = {sync: het_tf.WorkerCache(table, het_tf.CacheConfig(args.vocabulary // 10, "lfu",
                                                                 100, 100, 100, sync=sync))
              for sync in ("refresh", "check")}
    batches = [tf.constant(rng.zipf(1.1, size=args.batch_ids) % args.vocabulary, tf.int64)
               for _ in range(args.batches)]

    @tf.function
    def uncached_step(ids):
        rows, unique, _ = lookup_without_cache(table, ids)
        push_without_cache(table, unique, tf.ones_like(rows) * 0.01, 0.1)

    steps = {f"cached step, sync={sync}": cached_step(cache) for sync, cache in caches.items()}
    steps["no-cache step"] = uncached_step
    for name, step in steps.items():
        for ids in batches[:5]:
            step(ids)
        started = time.perf_counter()
        for _ in range(args.repeats):
            for ids in batches:
                step(ids)
        ms = (time.perf_counter() - started) / (args.repeats * len(batches)) * 1000
        print(f"{name}: {ms:.2f} ms a step")

    ops, ids = het_tf.ops, batches[0]
    handle = caches["check"].handle()
    refresh = caches["refresh"].handle()
    sync = ops.het_cache_begin_sync(refresh, ids)
    unique, _, clocks, _ = ops.het_cache_prepare(handle, ids)
    positions, values, row_clocks = table.pull(unique, clocks, 100, with_slots=True)
    grads = tf.ones([tf.size(unique), args.dim]) * 0.01
    kernels = {
        "unique (tf.unique, for scale)": lambda: tf.unique(ids),
        "HetCachePrepare": lambda: ops.het_cache_prepare(handle, ids),
        "HetTablePull": lambda: table.pull(unique, clocks, 100, with_slots=True),
        "HetCacheComplete": lambda: ops.het_cache_complete(handle, unique, positions, values,
                                                            row_clocks, dim=args.dim,
                                                            training=True),
        "HetCacheAccumulate": lambda: ops.het_cache_accumulate(handle, unique, grads, 0.1,
                                                                dim=args.dim),
        "HetTableGather (no-cache read)": lambda: table.gather(unique),
        "HetCacheBeginSync": lambda: ops.het_cache_begin_sync(refresh, ids),
        "HetTableSync": lambda: table.sync(*sync[4:6], sync[2], sync[3], sync[6]),
    }
    print(f"one batch: {int(tf.size(ids))} ids, {int(tf.size(unique))} unique, "
          f"{int(tf.size(positions))} pulled")
    for name, fn in kernels.items():
        print(f"{name}: {per_call_ms(fn, 50):.2f} ms a call (eager)")


if __name__ == "__main__":
    main()

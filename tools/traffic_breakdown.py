"""Where a cached table's bytes go: per training sample, the unique ids, the
misses (and how many of them are first touches, which move only a clock
under sync="refresh"), the evictions, the pushes and the bytes each way,
for both syncs, beside the Belady floor of the same ids (the bench's
reference: het_tf/apps/bench/floor.py).

    .venv/bin/python tools/traffic_breakdown.py [--steps 290] [--dim 16] [--staleness 100]

Two workers' caches (10% LFU, staleness --staleness) on one in-process table of the
synthetic data's 338,103 ids (scale 0.01, Zipf 1.1), fed alternately with
batches of 1024 samples x 26 fields, as `het-tf bench` feeds WDL's table.
No network: the figures are the counters that the ops keep.
"""
import argparse
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from profile_cache_kernels import cached_step  # noqa: E402  (this folder)

import het_tf  # noqa: E402
from het_tf.apps.bench.floor import first_touches  # noqa: E402
from het_tf.data import SyntheticCriteo  # noqa: E402
from het_tf.runtime.belady_floor import belady_floor  # noqa: E402


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=290, help="steps per worker")
    p.add_argument("--dim", type=int, default=16)
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--staleness", type=int, default=100,
                   help="both bounds; a copy a sync refreshes is one that went past it")
    return p.parse_args()


def measure(sync, args, data):
    table = het_tf.ShardedTable(het_tf.TableConfig(f"traffic_{sync}", args.dim), [None])
    config = het_tf.CacheConfig(int(0.1 * data.vocabulary_size), "lfu", args.staleness,
                                args.staleness, sync=sync)
    caches = [het_tf.WorkerCache(table, config) for _ in range(2)]

    steps = [cached_step(cache, 0.05) for cache in caches]
    traces = [[], []]
    for s in range(args.steps):
        for w, step in enumerate(steps):
            features, _ = data.rows(w, s * args.batch_size, args.batch_size)
            ids = tf.reshape(features["categorical"], [-1])
            traces[w].append(np.unique(ids.numpy()))
            step(ids)
    for cache in caches:
        cache.flush(0.05)
    total = {}
    for cache in caches:
        for name, value in cache.stats().items():
            total[name] = total.get(name, 0) + value
    samples = 2 * args.steps * args.batch_size
    per = {name: total[name] / samples for name in (
        "unique_keys", "misses", "rows_rebuilt", "stale_refreshes", "evictions",
        "passed_through", "rows_pushed", "rows_pushed_lean", "bytes_sent", "bytes_received")}
    per["first_touches"] = table.stats()["rows"] / samples
    per["bytes"] = per["bytes_sent"] + per["bytes_received"]
    made = first_touches(traces)
    floor = [belady_floor(traces[w], f"traffic_{sync}", config.capacity,
                          caches[w].worker_stats()[0]["width"], args.staleness, sync,
                          refreshes=caches[w].stats()["stale_refreshes"], made_keys=made[w])
             for w in range(2)]
    per["floor_misses"] = sum(f["misses"] for f in floor) / samples
    per["floor_bytes"] = sum(f["bytes_sent"] + f["bytes_received"] for f in floor) / samples
    return per


def main():
    args = parse_args()
    data = SyntheticCriteo(0, 0.01, 1.1)
    for sync in ("refresh", "check"):
        per = measure(sync, args, data)
        print(f"sync={sync}, per sample: " + ", ".join(f"{k} {v:.2f}" for k, v in per.items()))


if __name__ == "__main__":
    main()

"""The benchmark's measurements that need no cluster: the unique-id traffic
of the paths without a cache, and cache miss rates against cache size."""
import os

import numpy as np

from het_tf.apps.bench.plan import CACHE_FRACTIONS
from het_tf.data import SyntheticCriteo
from het_tf.runtime.cache import WorkerCache, hit_rate
from het_tf.runtime.config import UNBOUNDED, CacheConfig, TableConfig
from het_tf.runtime.table import ShardedTable


def unique_id_traffic(args, section, batches=20):
    """Embedding bytes per sample of TensorFlow's PS path (and TFRA's), which
    keep no cache: every step each worker reads the rows of its batch's
    unique ids (8-byte id out, 4*dim bytes back) and sends their gradients
    (8-byte id and 4*dim bytes), for each table of the model."""
    data = SyntheticCriteo(0, args.scale, args.zipf)
    unique = []
    for b in range(batches):
        features, _ = data.rows(0, b * args.batch_size, args.batch_size)
        unique.append(len(np.unique(features["categorical"].numpy())))
    per_batch = float(np.mean(unique))
    dims = [section.dim] + ([1] if section.model in ("wdl", "deepfm") else [])
    per_sample = sum(per_batch * (2 * 8 + 2 * 4 * dim) for dim in dims) / args.batch_size
    return {"unique_ids_per_batch": per_batch, "bytes_per_sample": per_sample}


def miss_rates(args, batches=1200, warmup=400, batch_size=128):
    """Cache miss rate (misses over unique keys looked up) against cache size,
    for LRU and LFU, on the synthetic data's key stream, with the table's
    real cache and unbounded staleness (so only capacity and first-touch
    misses count). Batches of 128 samples, so that a batch's unique keys fit
    the smallest cache."""
    data = SyntheticCriteo(0, args.scale, args.zipf)
    keys = [data.rows(0, b * batch_size, batch_size)[0]["categorical"] for b in range(batches)]
    results = {}
    for policy in ("lru", "lfu"):
        for fraction in CACHE_FRACTIONS:
            rows = max(1, int(fraction * data.vocabulary_size))
            name = f"bench_{policy}_{int(fraction * 1000)}"
            table = ShardedTable(TableConfig(name, 16), [None], instance=f"bench{os.getpid()}")
            cache = WorkerCache(table, CacheConfig(rows, policy, UNBOUNDED, UNBOUNDED),
                                shared_name=f"bench_cache_{name}_{os.getpid()}")
            before = None
            for b, batch in enumerate(keys):
                if b == warmup:
                    before = cache.stats()
                cache.lookup(batch, training=True)
            after = cache.stats()
            measured = {k: after[k] - before[k] for k in ("hits", "unique_keys")}
            results.setdefault(policy, []).append(
                {"fraction": fraction, "rows": rows, "miss_rate": 1 - hit_rate(measured)})
            cache.clear()
            table.clear()
    return results

"""A reference floor for each cached run's embedding traffic: the ids each
worker trained, regenerated from the synthetic data and replayed step by
step through a cache of the same capacity that evicts by Belady's rule
(het_tf.runtime.belady_floor), with each message's bytes as the measured
protocol encodes them, plus the refreshes the real run made.

It is a reference, not a proof of optimality. It leaves out what no
replay of one worker sees (other workers' pushes: their refreshes are taken
as the run counted them), the lookahead's second exchange a step, and the
evaluations (the run's figure it is compared with leaves them out too). A
run whose samples move between ranks (Herald's allocation), whose batches
are reordered (FAE's hot and cold batches) or whose rows split between
routes (hot rows, Herald's plan) is not replayed: its floor would be of
different ids.
"""
import numpy as np

from het_tf.data import SyntheticCriteo
from het_tf.runtime.belady_floor import belady_floor


def not_replayed(run):
    """Why a run's caches are not replayed, or None."""
    config = run.get("config", {})
    if run.get("failed") or not run.get("cached_tables"):
        return "no cache"
    if config.get("data") != "synthetic":
        return "not synthetic data: its ids are not regenerated"
    if config.get("allocate_every"):
        return "Herald's allocation moves samples between ranks"
    if config.get("hot_rows") or config.get("hot_bytes"):
        return "FAE's hot rows reorder batches and bypass the cache"
    routes = {t["route"] for t in run["cached_tables"]}
    if routes != {"CachedRoute"}:
        return f"rows split between routes ({', '.join(sorted(routes))})"
    return None


def _steps(data, stream, steps, batch_size):
    """The unique ids of one stream's first `steps` batches, one array a
    step (what a step looks up; the replay dedups too, this keeps the trace
    small)."""
    out = []
    for b in range(steps):
        features, _ = data.rows(stream, b * batch_size, batch_size)
        out.append(np.unique(features["categorical"].numpy()))
    return out


def first_touches(traces):
    """Per worker, the keys it touches before any other (at an earlier
    step, or the same step and a lower index): the rows the shards make for
    it. Workers are taken to step together, which is a model: under
    ParameterServerStrategy their pace differs."""
    keys, steps, workers = [], [], []
    for w, trace in enumerate(traces):
        if not trace:
            continue
        flat = np.concatenate(trace)
        at = np.repeat(np.arange(len(trace)), [len(t) for t in trace])
        unique, first = np.unique(flat, return_index=True)
        keys.append(unique)
        steps.append(at[first])
        workers.append(np.full(len(unique), w))
    if not keys:
        return [np.zeros([0], np.int64) for _ in traces]
    keys, steps, workers = (np.concatenate(a) for a in (keys, steps, workers))
    order = np.lexsort((workers, steps, keys))
    keys, workers = keys[order], workers[order]
    first = np.concatenate([[True], keys[1:] != keys[:-1]])  # each key's earliest touch
    return [keys[first & (workers == w)] for w in range(len(traces))]


def floor(run):
    """{"floor_bytes_per_sample", "training_bytes_per_sample", "ratio",
    "unique_keys" (the replay's) and "trained_unique_keys" (the caches'),
    "floor_misses_per_sample", per-table "tables"}, or {"not_replayed": why}."""
    why = not_replayed(run)
    if why:
        return {"not_replayed": why}
    config = run["config"]
    data = SyntheticCriteo(config["seed"], config["scale"], config["zipf"],
                           config.get("drift") or 0.0)
    batch = config["batch_size"]
    total = {"bytes": 0, "misses": 0, "real_bytes": 0, "unique_keys": 0, "real_unique_keys": 0}
    samples = 0
    tables = []
    for table in run["cached_tables"]:
        counts = {}
        # Worker i (ParameterServerStrategy) trains stream i from its first
        # batch. A hybrid run's figures are rank 0's; every rank takes as
        # many steps, and all make rows.
        worker_steps = table["worker_steps"]
        if config["mode"] == "hybrid":
            worker_steps = worker_steps * config["workers"]
        traces = [_steps(data, stream, steps, batch)
                  for stream, steps in enumerate(worker_steps)]
        made = first_touches(traces)
        for stream, trace in enumerate(traces[:len(table["worker_steps"])]):
            one = belady_floor(trace, table["table"], table["capacity"], table["width"],
                               table["write_staleness"], table["sync"], table["num_shards"],
                               refreshes=0 if stream else table["stale_refreshes"],
                               made_keys=made[stream],
                               wire_dtype=table.get("wire_dtype", "float32"))
            for name, value in one.items():
                counts[name] = counts.get(name, 0) + value
        counts["bytes"] = counts["bytes_sent"] + counts["bytes_received"]
        tables.append({"table": table["table"], **counts})
        total["bytes"] += counts["bytes"]
        total["misses"] += counts["misses"]
        total["real_bytes"] += table["training_bytes"]
        total["unique_keys"] += counts["unique_keys"]
        total["real_unique_keys"] += table["training_unique_keys"]
        samples = max(samples, sum(table["worker_steps"]) * batch)
    if not samples:
        return {"not_replayed": "no training steps"}
    return {"floor_bytes_per_sample": total["bytes"] / samples,
            "training_bytes_per_sample": total["real_bytes"] / samples,
            "ratio": total["real_bytes"] / max(total["bytes"], 1),
            # The replay's ids against those the caches trained on: equal
            # when the data regenerated is the data trained.
            "unique_keys": total["unique_keys"], "trained_unique_keys": total["real_unique_keys"],
            "floor_misses_per_sample": total["misses"] / samples,
            "tables": tables}


__all__ = ["floor", "not_replayed"]

"""How close an online eviction rule could come to the Belady floor: the
misses a sample of the ids two workers train (as tools/traffic_breakdown.py
feeds them: 1024 samples x 26 fields a step, a 10% cache of the synthetic
data's 338,103 ids, scale 0.01, Zipf 1.1) under

- lfu: the cache as built (touches since the row came in, ties to the least
  recently touched; the step's own rows stay);
- lfu, next K kept: also never evicting a row of the next K batches, as a
  lookahead that staged K batches could (a miss with no row to give up
  passes through, as in the cache);
- lfu, counts kept: touch counts that survive eviction (an exact count per
  id ever seen, memory the cache does not keep);
- belady: the floor's replay (het_tf.runtime.belady_floor), which knows
  every future step.

A worker's first sight of an id is a miss under every rule; the rest are
capacity misses.
Pure Python over one trace; no table, no network.

    .venv/bin/python tools/eviction_policies.py [--steps 290] [--keep 1 4 16]
"""
import argparse
import heapq
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from het_tf.apps.bench.floor import first_touches  # noqa: E402
from het_tf.data import SyntheticCriteo  # noqa: E402
from het_tf.runtime.belady_floor import belady_floor  # noqa: E402

BATCH = 1024


def traces(steps):
    data = SyntheticCriteo(0, 0.01, 1.1)
    out = [[], []]
    for s in range(steps):
        for w in range(2):
            features, _ = data.rows(w, s * BATCH, BATCH)
            out[w].append(np.unique(tf.reshape(features["categorical"], [-1]).numpy()))
    return out, int(0.1 * data.vocabulary_size)


def lfu_misses(steps, capacity, keep=0, counts_kept=False):
    """Misses of a bucketed LFU (a heap of (touches, last touch, key) with
    stale entries skipped) over one worker's unique ids a step."""
    cached = {}  # key -> (touches, last touch)
    heap = []
    seen = {}
    clock = misses = 0
    for t, batch in enumerate(steps):
        kept = set(batch.tolist())
        for ahead in steps[t + 1:t + 1 + keep]:
            kept.update(ahead.tolist())
        missed = []
        for key in batch.tolist():
            clock += 1
            seen[key] = seen.get(key, 0) + 1
            if key in cached:
                cached[key] = (cached[key][0] + 1, clock)
                heapq.heappush(heap, (*cached[key], key))
            else:
                missed.append(key)
        misses += len(missed)
        for key in missed:
            clock += 1
            if len(cached) >= capacity and not evict(cached, heap, kept):
                continue  # no row may leave: this one passes through, as in the cache
            cached[key] = (seen[key] if counts_kept else 1, clock)
            heapq.heappush(heap, (*cached[key], key))
        assert len(cached) <= capacity
    return misses


def evict(cached, heap, kept):
    """Drops the least touched row, the least recently touched of them,
    outside `kept`; False if every row is kept."""
    aside = []
    gone = False
    while heap:
        touches, last, victim = heapq.heappop(heap)
        if cached.get(victim) != (touches, last):
            continue  # an entry a later touch replaced
        if victim in kept:
            aside.append((touches, last, victim))
            continue
        del cached[victim]
        gone = True
        break
    for entry in aside:
        heapq.heappush(heap, entry)
    return gone


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=290, help="steps per worker")
    p.add_argument("--keep", type=int, nargs="+", default=[1, 4, 16],
                   help="batches ahead whose rows stay (one rule each)")
    args = p.parse_args()
    steps, capacity = traces(args.steps)
    samples = 2 * args.steps * BATCH
    made = first_touches(steps)
    first = sum(len(np.unique(np.concatenate(trace))) for trace in steps) / samples
    rules = [("lfu", {})] + [(f"lfu, next {k} kept", {"keep": k}) for k in args.keep]
    rules.append(("lfu, counts kept", {"counts_kept": True}))
    for name, kw in rules:
        misses = sum(lfu_misses(steps[w], capacity, **kw) for w in range(2)) / samples
        print(f"{name}: misses {misses:.3f} a sample, capacity misses {misses - first:.3f}",
              flush=True)
    floor = sum(belady_floor(steps[w], "eviction_policies", capacity, 2 * 16, 100,
                             made_keys=made[w])["misses"] for w in range(2)) / samples
    print(f"belady: misses {floor:.3f} a sample, capacity misses {floor - first:.3f}")


if __name__ == "__main__":
    main()

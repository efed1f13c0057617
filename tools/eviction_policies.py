"""How close an online eviction rule could come to the Belady floor: the
misses a sample of the ids two workers train (as tools/traffic_breakdown.py
feeds them: 1024 samples x 26 fields a step, a 10% cache of the synthetic
data's 338,103 ids, scale 0.01, Zipf 1.1) under

- lfu: the cache as built (touches since the row came in, ties to the least
  recently touched; the step's own rows stay);
- lfu, next K seen: as the lookahead with K staged batches would: a row
  that one of the next K batches reads is not evicted while another can go,
  and among such rows the one read furthest ahead goes first (a miss with
  only the step's own rows left passes through, as in the cache);
- lfu, counts kept: touch counts that survive eviction (an exact count per
  id ever seen, memory the cache does not keep);
- belady: the floor's replay (het_tf.runtime.belady_floor), which knows
  every future step.

A worker's first sight of an id is a miss under every rule; the rest are
capacity misses.
Pure Python over one trace; no table, no network.

    .venv/bin/python tools/eviction_policies.py [--steps 290] [--ahead 1 4 16 32 64]
"""
import argparse
import collections
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


def lfu_misses(steps, capacity, ahead=0, counts_kept=False):
    """Misses of a bucketed LFU over one worker's unique ids a step, the
    rows of the next `ahead` batches kept while another row can go (those
    read furthest ahead going first). Both orders are heaps whose stale
    entries are skipped: (touches, last touch, key) for the rows no batch
    ahead reads, (-next read, key) for the others."""
    cached = {}  # key -> (touches, last touch)
    reads = {}  # key -> the steps ahead (and this one) that read it, in order
    lfu, furthest = [], []
    seen = {}
    clock = misses = 0

    def order(key):
        """Files a cached key in the heap its next read puts it in."""
        if reads.get(key):
            heapq.heappush(furthest, (-reads[key][0], key))
        else:
            heapq.heappush(lfu, (*cached[key], key))

    for step in range(min(ahead, len(steps))):
        for key in steps[step].tolist():
            reads.setdefault(key, collections.deque()).append(step)
    for t, batch in enumerate(steps):
        if t + ahead < len(steps):  # the batch staged K steps ahead
            for key in steps[t + ahead].tolist():
                queue = reads.setdefault(key, collections.deque())
                queue.append(t + ahead)
                if len(queue) == 1 and key in cached:
                    order(key)
        missed = []
        for key in batch.tolist():
            clock += 1
            seen[key] = seen.get(key, 0) + 1
            if key in cached:
                cached[key] = (cached[key][0] + 1, clock)
            else:
                missed.append(key)
        misses += len(missed)
        for key in missed:
            clock += 1
            if len(cached) >= capacity and not evict(cached, reads, lfu, furthest, t):
                continue  # no row may leave: this one passes through, as in the cache
            cached[key] = (seen[key] if counts_kept else 1, clock)
        for key in batch.tolist():  # read now: its next read decides its heap
            queue = reads[key]
            queue.popleft()
            if key in cached:
                order(key)
        assert len(cached) <= capacity
    return misses


def evict(cached, reads, lfu, furthest, now):
    """Drops the least touched row (the least recently touched of them) that
    no batch ahead reads, else the row read furthest ahead, never one of
    step `now`'s; False if only those are left."""
    while lfu:
        touches, last, victim = heapq.heappop(lfu)
        if cached.get(victim) == (touches, last) and not reads.get(victim):
            del cached[victim]
            return True
    while furthest:
        step, victim = furthest[0]
        queue = reads.get(victim)
        if victim not in cached or not queue or queue[0] != -step:
            heapq.heappop(furthest)  # stale: evicted, or its next read moved
            continue
        if -step == now:
            return False  # the furthest read is this step's: so is every row left
        heapq.heappop(furthest)
        del cached[victim]
        return True
    return False


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=290, help="steps per worker")
    p.add_argument("--ahead", type=int, nargs="+", default=[1, 4, 16, 32, 64],
                   help="batches staged ahead, whose rows stay while others can go "
                        "(one rule each)")
    args = p.parse_args()
    steps, capacity = traces(args.steps)
    samples = 2 * args.steps * BATCH
    made = first_touches(steps)
    first = sum(len(np.unique(np.concatenate(trace))) for trace in steps) / samples
    rules = [("lfu", {})] + [(f"lfu, next {k} seen", {"ahead": k}) for k in args.ahead]
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

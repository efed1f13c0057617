"""How many rows a cache evicts come back (are fetched again), and how
soon: the share of one worker's evictions whose id is fetched again
within M later evictions, for M a multiple of the cache's capacity. It
says whether a 16-bit wire could keep an evicted row's rounding until the
row comes back (docs/benchmarks.md, "Rows in bfloat16"). The trace and
the LFU rule are tools/eviction_policies.py's (the bench's synthetic data,
1024 samples x 26 fields a step, a 10% cache).

    .venv/bin/python tools/evicted_reuse.py [--steps 140]
"""
import argparse
import heapq
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import eviction_policies  # noqa: E402
import numpy as np  # noqa: E402

STORE_SIZES = (0.25, 0.5, 1, 2, 4, 8)  # multiples of the cache's capacity


def evictions_until_back(steps, capacity):
    """(evictions, [for each evicted id fetched again: evictions since its own])."""
    cached, heap, clock, evicted_at, gaps, evictions = {}, [], 0, {}, [], 0
    for batch in steps:
        kept = set(batch.tolist())
        missed = []
        for key in batch.tolist():
            clock += 1
            if key in cached:
                cached[key] = (cached[key][0] + 1, clock)
                heapq.heappush(heap, (*cached[key], key))
            else:
                missed.append(key)
        for key in missed:
            clock += 1
            if key in evicted_at:
                gaps.append(evictions - evicted_at.pop(key))
            while len(cached) >= capacity and heap:
                touches, last, victim = heapq.heappop(heap)
                if cached.get(victim) != (touches, last) or victim in kept:
                    continue
                del cached[victim]
                evicted_at[victim] = evictions
                evictions += 1
            cached[key] = (1, clock)
            heapq.heappush(heap, (1, clock, key))
    return evictions, np.array(gaps)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=140)
    args = p.parse_args()
    worker_steps, capacity = eviction_policies.traces(args.steps)
    evictions, gaps = evictions_until_back(worker_steps[0], capacity)
    print(f"capacity {capacity} rows, {evictions} evictions, {len(gaps)} fetched again")
    for k in STORE_SIZES:
        m = int(k * capacity)
        print(f"within {k}x capacity ({m} evictions): {np.sum(gaps <= m) / evictions:.3f}")


if __name__ == "__main__":
    main()

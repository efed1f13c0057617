"""Times a cached embedding step against the no-cache step in one process,
and each kernel of either path as the step runs it.

    .venv/bin/python tools/profile_cache_kernels.py [--dim 16] [--optimizer adagrad]

One table of the synthetic data's 338,103 ids (scale 0.01, Zipf 1.1) with
a 10% LFU cache at staleness 100, syncing by refresh and by check, fed
batches of 1024 samples x 26 fields, as `het-tf bench` feeds WDL's table.
Each path first trains --warm-steps batches, so the cache is in its steady
state (about a fifth of the unique keys missing), then times --steps more,
then runs them again under TensorFlow's profiler for each kernel's time,
--repeats times each, keeping the least (noise only adds).
No network: the figures are the kernels' own cost.
"""
import argparse
import os
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # noqa: E402

import het_tf  # noqa: E402
from het_tf.data import SyntheticCriteo  # noqa: E402
from het_tf.runtime.cache import lookup_without_cache, push_without_cache  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from profiler_trace import kernel_times  # noqa: E402


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dim", type=int, default=16)
    p.add_argument("--optimizer", default="adagrad")
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--warm-steps", type=int, default=150)
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--repeats", type=int, default=3)
    return p.parse_args()


def cached_step(cache, learning_rate=0.1):
    """One training step of `cache` on a batch of ids, with a fixed gradient."""
    @tf.function
    def step(ids, next_ids):
        rows, unique, _ = cache.lookup(ids, True)
        cache.apply_gradients(unique, tf.ones_like(rows) * 0.01, learning_rate)
    return step


def lookahead_step(cache, learning_rate=0.1):
    """The same step as the lookahead runs it: the pipeline stages the next
    batch, the step's own exchange asks only for ids not cached, and its
    prefetch brings the next batch's missing rows and carries its pushes."""
    @tf.function
    def step(ids, next_ids):
        with tf.control_dependencies([cache.stage(next_ids)]):
            rows, unique, _ = cache.lookup(ids, True, lookahead=True)
        with tf.control_dependencies([cache.prefetch(ids, rows)]):
            cache.apply_gradients(unique, tf.ones_like(rows) * 0.01, learning_rate)
    return step


def uncached_step(table, learning_rate=0.1):
    @tf.function
    def step(ids, next_ids):
        rows, unique, _ = lookup_without_cache(table, ids)
        push_without_cache(table, unique, tf.ones_like(rows) * 0.01, learning_rate)
    return step


def run(step, batches):
    """Steps through `batches`, each step given the next batch too (which
    only the lookahead's stages)."""
    for i, ids in enumerate(batches[:-1]):
        step(ids, batches[i + 1])


def timed_ms(step, batches):
    started = time.perf_counter()
    run(step, batches)
    return (time.perf_counter() - started) / (len(batches) - 1) * 1000


def kernel_ms(step, batches):
    """Each het_tf kernel's time per step, from a profiler trace of the steps."""
    with tempfile.TemporaryDirectory() as logdir:
        tf.profiler.experimental.start(logdir)
        run(step, batches)
        tf.profiler.experimental.stop()
        times = kernel_times(logdir)
    steps = len(batches) - 1
    return {op: ps / steps / 1e9 for op, (ps, _) in times.items() if op.startswith("Het")}


def main():
    args = parse_args()
    data = SyntheticCriteo(0, 0.01, 1.1)
    batches = [tf.reshape(data.rows(0, s * args.batch_size, args.batch_size)[0]["categorical"],
                          [-1]) for s in range(args.warm_steps + args.steps)]
    warm, timed = batches[:args.warm_steps], batches[args.warm_steps:]
    optimizer = het_tf.OptimizerConfig(args.optimizer)

    def table(name):
        return het_tf.ShardedTable(het_tf.TableConfig(name, args.dim, seed=1, optimizer=optimizer),
                                   [None])

    steps = {}
    for sync in ("refresh", "check"):
        config = het_tf.CacheConfig(int(0.1 * data.vocabulary_size), "lfu", 100, 100, sync=sync)
        cache = het_tf.WorkerCache(table(f"profiled_{sync}"), config)
        steps[f"cached step, sync={sync}"] = (cached_step(cache, 0.05), cache)
    config = het_tf.CacheConfig(int(0.1 * data.vocabulary_size), "lfu", 100, 100)
    cache = het_tf.WorkerCache(table("profiled_lookahead"), config)
    cache.stage(warm[0])
    steps["cached step, lookahead"] = (lookahead_step(cache, 0.05), cache)
    steps["no-cache step"] = (uncached_step(table("profiled_uncached"), 0.05), None)
    for name, (step, cache) in steps.items():
        run(step, warm + timed[:1])
        ms = min(timed_ms(step, timed) for _ in range(args.repeats))
        print(f"{name}: {ms:.2f} ms a step")
        if cache is not None:
            stats = cache.stats()
            print(f"  unique ids {stats['unique_keys'] / stats['steps']:.0f} a step, "
                  f"misses {stats['misses'] / stats['unique_keys']:.1%} of them")
        traces = [kernel_ms(step, timed) for _ in range(args.repeats)]
        for op in traces[0]:
            print(f"  {op}: {min(t.get(op, 0.0) for t in traces):.3f} ms")

if __name__ == "__main__":
    main()

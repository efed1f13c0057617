"""One worker of the exactly-once soak (tools/exactly_once_soak.py): a
process of its own, a client of the PS tasks, that trains one table for
--seconds with faults drawn between the steps (tests/fault_runs.py), then
flushes and writes what it trained.

    exactly_once_worker.py --ps HOST:PORT,HOST:PORT --index I --out DIR

Worker 0 then waits for every other worker's record, and checks every row
the shards hold against the sum of them: the data, not a counter.

With --optimizer adagrad or adam each worker trains keys of its own (the
ids of its index modulo the workers), and the oracle is its steps replayed
without a fault in a NumPy table of that optimizer (tests/fault_runs.py
ReplayOracle): every row, slots included, is checked after the flush, and
the worker's evaluation reads of its keys are checked against it along the
way (one draw in ten). Shared keys stay with SGD, whose sum is exact in any
order.

With --evict the table evicts at a limit (on_full="evict"): the 24 trained
ids are pinned (read whole, as a hot block reads them) and every step also
reads an id never seen before, so the shards evict those all the while the
trained rows take their pushes, faults and all.
"""
import argparse
import json
import os
import random
import socket
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# Each remote op's error at its call: enqueued by stream, an expected refusal
# would surface at a later op and cancel every op after it on that PS task.
os.environ["TF_ENABLE_EAGER_CLIENT_STREAMING_ENQUEUE"] = "False"
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import het_tf  # noqa: E402
from tests.fault_runs import DIM, LR, SEED, FaultyWorker, Oracle, ReplayOracle  # noqa: E402

# How often each happens between two steps.
FAULTS = (("train", 60), ("drop_answer", 15), ("refuse", 10), ("replay", 15))


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ps", required=True, help="the PS tasks, host:port,host:port")
    p.add_argument("--index", type=int, required=True)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--out", required=True)
    p.add_argument("--seconds", type=float, default=60.0)
    p.add_argument("--sync", choices=["refresh", "check"], default="refresh")
    p.add_argument("--staleness", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--evict", action="store_true", help="a table that evicts at its limit")
    p.add_argument("--optimizer", choices=["sgd", "adagrad", "adam"], default="sgd")
    return p.parse_args()


def connect(ps, index):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    job = f"soak{index}"
    cluster = tf.train.ClusterSpec({"ps": ps, job: [f"127.0.0.1:{port}"]})
    tf.config.experimental_connect_to_cluster(cluster, job_name=job, task_index=0,
                                              make_master_device_default=False)
    print(f"worker {index}: connected", flush=True)


def main():
    args = parse_args()
    ps = args.ps.split(",")
    connect(ps, args.index)
    # 30 rows a shard with --evict: the 12 or so trained ids pinned there
    # leave too little room to evict for the refused step's 28 new rows.
    lifetime = dict(max_rows=60, on_full="evict") if args.evict else dict(max_rows=64)
    config = het_tf.TableConfig("exactly_once_soak", DIM, seed=SEED,
                                optimizer=het_tf.OptimizerConfig(args.optimizer), **lifetime)
    table = het_tf.ShardedTable(config, [f"/job:ps/task:{s}" for s in range(len(ps))])
    cache = het_tf.WorkerCache(table, het_tf.CacheConfig(8, "lru", args.staleness,
                                                          args.staleness, sync=args.sync),
                               shared_name=f"exactly_once_soak_worker{args.index}")
    shared = args.optimizer == "sgd"
    # Both workers draw from the same 24 ids under SGD, so they share rows;
    # otherwise each its own.
    ids = list(range(24)) if shared else list(range(args.index, 24, args.workers))
    oracle = Oracle() if shared else ReplayOracle(args.optimizer)
    worker = FaultyWorker(table, cache, oracle)
    worker.replay_ids = ids[:2]
    reads = {"checked": 0, "wrong": 0, "first_wrong": None, "largest_difference": 0.0}
    rng = random.Random(args.seed * 1000 + args.index)
    names, weights = zip(*FAULTS)
    if args.evict:
        table.read_rows(tf.constant(list(range(24)), tf.int64))  # pinned: never evicted
    steps, deadline = 0, time.monotonic() + args.seconds
    while time.monotonic() < deadline:
        if args.evict:  # an id no one saw before: the shards evict to make room
            table.gather(tf.constant([10**9 * (args.index + 1) + steps], tf.int64))
        action = rng.choices(names, weights)[0]
        if action in ("train", "drop_answer"):
            getattr(worker, action)(rng.sample(ids, rng.randint(1, min(8, len(ids)))),
                                    rng.randint(-4, 4))
        else:
            getattr(worker, action)()
        steps += 1
        if not shared and rng.random() < 0.1:
            read = rng.sample(ids, rng.randint(1, 4))
            try:
                rows = cache.lookup(tf.constant(read, tf.int64), training=False)[0].numpy()
            except tf.errors.AbortedError:  # a replay's new incarnation met no epoch yet
                continue
            reads["checked"] += 1
            want = oracle.rows(read)
            reads["largest_difference"] = max(reads["largest_difference"],
                                              float(np.max(np.abs(rows - want))))
            if not np.allclose(rows, want, **ReplayOracle.TOLERANCE):
                reads["wrong"] += 1
                reads["first_wrong"] = reads["first_wrong"] or f"step {steps}, ids {read}"
    cache.flush(LR)
    record = dict(steps=steps, faults=worker.faults, reads=reads,
                  stats={k: int(v) for k, v in cache.stats().items()})
    if shared:
        record.update(oracle.to_json())
    else:
        try:
            oracle.check(table, ids)
            record["own_rows_equal_the_replay"] = True
        except AssertionError as e:
            record["own_rows_equal_the_replay"] = False
            record["mismatch"] = str(e)[:2000]
    path = os.path.join(args.out, f"worker{args.index}.json")
    with open(path + ".tmp", "w") as f:
        json.dump(record, f)
    os.replace(path + ".tmp", path)
    print(f"worker {args.index}: {steps} steps, faults {worker.faults}", flush=True)
    if args.index != 0:
        return 0
    # Every worker flushed before writing its record: the sum is the data.
    others = [os.path.join(args.out, f"worker{i}.json") for i in range(1, args.workers)]
    while not all(os.path.exists(p) for p in others):
        time.sleep(0.2)
    records = [record] + [json.load(open(p)) for p in others]
    result = {"rows_checked": sum(table.shard_rows(s) for s in range(table.num_shards)),
              "table_stats": {k: int(v) for k, v in table.stats().items()},
              "reads_checked": sum(r["reads"]["checked"] for r in records),
              "reads_wrong": sum(r["reads"]["wrong"] for r in records),
              "reads_largest_difference": max(r["reads"]["largest_difference"] for r in records)}
    if shared:
        for r in records[1:]:
            oracle.add(Oracle.from_json(r))
        try:
            oracle.check(table)
            result["every_row_equals_the_data"] = True
        except AssertionError as e:
            result["every_row_equals_the_data"] = False
            result["mismatch"] = str(e)[:2000]
    else:
        result["every_row_equals_the_data"] = (
            all(r["own_rows_equal_the_replay"] for r in records) and result["reads_wrong"] == 0)
        result["mismatch"] = [r.get("mismatch") or r["reads"]["first_wrong"] for r in records]
    with open(os.path.join(args.out, "check.json"), "w") as f:
        json.dump(result, f, indent=2)
    print(f"worker 0: every row equals the data: {result['every_row_equals_the_data']}",
          flush=True)
    return 0 if result["every_row_equals_the_data"] else 1


if __name__ == "__main__":
    sys.exit(main())

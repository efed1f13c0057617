"""Resident memory per row of one table shard against its raw bytes.

    python tools/measure_memory.py --rows 20000000 --dim 16 --optimizer adagrad

Creates the rows in this process through the shard's import op (in chunks,
as a restore would), then reads VmRSS from /proc/self/status before and
after. Raw bytes per row are the values, the optimizer slots and the 8-byte
clock (plus Adam's 8-byte step count): what any table must hold.
"""
import argparse
import json
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def rss_bytes():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=20_000_000)
    p.add_argument("--dim", type=int, default=16)
    p.add_argument("--optimizer", default="adagrad", choices=("sgd", "adagrad", "adam", "ftrl"))
    p.add_argument("--chunk", type=int, default=1 << 20)
    p.add_argument("--json", help="also write the figures here")
    args = p.parse_args()

    import numpy as np
    import tensorflow as tf

    from het_tf.runtime.config import OptimizerConfig, TableConfig
    from het_tf.runtime.table import ShardedTable

    config = TableConfig("memory", args.dim, optimizer=OptimizerConfig(args.optimizer))
    table = ShardedTable(config, [None], instance="measure")
    slots = config.num_slots
    values = np.zeros((args.chunk, args.dim), np.float32)
    slot_values = np.zeros((args.chunk, slots, args.dim), np.float32)
    zeros = np.zeros(args.chunk, np.int64)
    table.stats()  # the shard exists before the baseline is taken
    before = rss_bytes()
    started = time.perf_counter()
    for first in range(0, args.rows, args.chunk):
        n = min(args.chunk, args.rows - first)
        keys = tf.range(first, first + n, dtype=tf.int64) * 7919  # spread, as hashed ids are
        table.import_rows(keys, values[:n], slot_values[:n], zeros[:n], zeros[:n])
        print(f"{first + n:,} rows, RSS {(rss_bytes() - before) / 2**30:.2f} GiB above start",
              flush=True)
    after = rss_bytes()
    stats = table.stats()
    raw = 4 * args.dim * (1 + slots) + 8 + (8 if args.optimizer == "adam" else 0)
    result = {
        "rows": int(stats["rows"]), "dim": args.dim, "optimizer": args.optimizer,
        "raw_bytes_per_row": raw,
        "resident_bytes_per_row": (after - before) / args.rows,
        "reported_bytes_per_row": int(stats["memory_bytes"]) / args.rows,
        "seconds": time.perf_counter() - started,
    }
    result["ratio"] = result["resident_bytes_per_row"] / raw
    print(json.dumps(result, indent=2))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()

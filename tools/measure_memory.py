"""Resident memory per row of one table shard against its raw bytes, and
what a checkpoint of the table costs.

    python tools/measure_memory.py --rows 20000000 --dim 16 --optimizer adagrad
    python tools/measure_memory.py --rows 100000000 --shards 2 \
        --checkpoint /tmp/ckpt --restore-shards 3

Creates the rows in this process through the shard's import op (in chunks,
as a restore would), then reads VmRSS from /proc/self/status before and
after. Raw bytes per row are the values, the optimizer slots and the 8-byte
clock (plus Adam's 8-byte step count): what any table must hold.

With --checkpoint, saves the table there with tf.train.Checkpoint, drops
it, and restores it onto --restore-shards shards, timing both and reading
the process's peak resident memory (VmHWM, reset before each) above the
resident memory of the filled table.

With --chain N as well, the table checkpoints incrementally: the full save,
then N - 1 times a --changed share of its rows written (new values, random
keys) and an incremental checkpoint; then the newest is restored, with its
chain of N, onto --restore-shards shards and checked against the table.

    python tools/measure_memory.py --rows 100000000 --shards 2 \
        --checkpoint /tmp/ckpt --chain 10 --changed 0.01 --restore-shards 3
"""
import argparse
import json
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def rss_bytes(field="VmRSS"):
    """Resident memory now (VmRSS), or at its peak since reset_peak (VmHWM)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def write_figures(result, path=None):
    """Prints the figures, and writes them to `path` if given."""
    print(json.dumps(result, indent=2))
    if path:
        with open(path, "w") as f:
            json.dump(result, f, indent=2)


def reset_peak():
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # VmHWM starts again from VmRSS


def measure_checkpoint(table, config, directory, restore_shards, filled):
    """Saves `table`, drops its rows, restores them onto `restore_shards`
    shards; times and peak resident memory above `filled` bytes."""
    import tensorflow as tf

    from het_tf.runtime.checkpoint import TableCheckpoint
    from het_tf.runtime.table import ShardedTable

    def checkpoint(t):
        return tf.train.Checkpoint(table=TableCheckpoint(t, lambda: [], lambda: []))

    rows = table.stats()["rows"]
    reset_peak()
    started = time.perf_counter()
    path = checkpoint(table).write(os.path.join(directory, "table"))
    saved = {"save_seconds": time.perf_counter() - started,
             "save_peak_above_table_bytes": rss_bytes("VmHWM") - filled}
    size = sum(os.path.getsize(os.path.join(directory, f)) for f in os.listdir(directory))
    table.clear()
    target = ShardedTable(config, [None] * restore_shards, instance="restored")
    target.stats()
    reset_peak()
    started = time.perf_counter()
    checkpoint(target).read(path).assert_consumed()
    seconds = time.perf_counter() - started
    restored_rows = target.stats()["rows"]
    if restored_rows != rows:
        raise RuntimeError(f"restored {restored_rows} rows of {rows}")
    return dict(saved, checkpoint_bytes=size, restore_shards=restore_shards,
                restore_seconds=seconds, restored_rows=restored_rows,
                # above the restored table's own resident memory
                restore_peak_above_table_bytes=rss_bytes("VmHWM") - rss_bytes())


def folder_bytes(directory, prefix):
    return sum(os.path.getsize(os.path.join(directory, f)) for f in os.listdir(directory)
               if f.startswith(os.path.basename(prefix) + "."))


def measure_chain(table, config, directory, restore_shards, links, changed, key_of, seed=0):
    """A full checkpoint, then links - 1 incremental ones, each after about
    `changed` of the rows (keys key_of(0 .. rows - 1)) were written; the
    newest restored onto `restore_shards` shards. Times and bytes of each,
    and the restore's."""
    import numpy as np
    import tensorflow as tf

    from het_tf.runtime.checkpoint import TableCheckpoint
    from het_tf.runtime.table import ShardedTable

    saving = TableCheckpoint(table, lambda: [], lambda: [], full_every=links)
    manager = tf.train.CheckpointManager(tf.train.Checkpoint(table=saving), directory,
                                         max_to_keep=None)
    rows = int(table.stats()["rows"])
    rng = np.random.default_rng(seed)
    saves = []
    for link in range(links):
        if link:
            keys = key_of(np.unique(rng.integers(0, rows, size=int(changed * rows))))
            n = len(keys)
            states = rng.normal(size=(n, config.dim)).astype(np.float32)
            table.import_rows(keys, states, np.ones((n, config.num_slots, config.dim),
                                                    np.float32),
                              np.full(n, link, np.int64), np.zeros(n, np.int64))
        started = time.perf_counter()
        path = manager.save()
        seconds = time.perf_counter() - started
        saves.append(dict(saving.last_save, seconds=seconds,
                          bytes=folder_bytes(directory, path)))
        print(f"checkpoint {link + 1}: {saves[-1]}", flush=True)
    want = [t.numpy() for t in table.export_shard(0, 0, 1 << 16)[:2]]
    table.clear()
    target = ShardedTable(config, [None] * restore_shards, instance="restored_chain")
    target.stats()
    started = time.perf_counter()
    tf.train.Checkpoint(table=TableCheckpoint(target, lambda: [], lambda: [])).read(path)
    seconds = time.perf_counter() - started
    restored_rows = int(target.stats()["rows"])
    if restored_rows != rows:
        raise RuntimeError(f"restored {restored_rows} rows of {rows}")
    # A sample of rows, some of them changed since the full checkpoint:
    # restored as the table held them.
    if not np.array_equal(target.gather(want[0]).numpy(), want[1]):
        raise RuntimeError("the restored rows differ from the table's")
    full, incremental = saves[0], saves[1:]
    return {"chain": links, "changed_share": changed, "saves": saves,
            "full_seconds": full["seconds"], "full_bytes": full["bytes"],
            "incremental_seconds_mean": float(np.mean([s["seconds"] for s in incremental])),
            "incremental_bytes_mean": float(np.mean([s["bytes"] for s in incremental])),
            "chain_restore_seconds": seconds, "restore_shards": restore_shards,
            "restored_rows": restored_rows}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=20_000_000)
    p.add_argument("--dim", type=int, default=16)
    p.add_argument("--optimizer", default="adagrad", choices=("sgd", "adagrad", "adam", "ftrl"))
    p.add_argument("--chunk", type=int, default=1 << 20)
    p.add_argument("--shards", type=int, default=1)
    p.add_argument("--max-rows", type=int, help="the table's row limit: filling past it "
                   "shows the refusal (and what the table holds then)")
    p.add_argument("--on-full", default="refuse", choices=("refuse", "evict"),
                   help="with 'evict' (and --max-rows) each row keeps what eviction needs")
    p.add_argument("--ttl", type=int, help="seconds: each row keeps what expiry needs")
    p.add_argument("--admit-after", type=int, help="the table counts sightings of new ids")
    p.add_argument("--checkpoint", help="a folder to save the table to, then restore it from")
    p.add_argument("--restore-shards", type=int, default=1)
    p.add_argument("--chain", type=int, help="with --checkpoint: a full checkpoint and "
                   "CHAIN - 1 incremental ones, the newest restored with its chain")
    p.add_argument("--changed", type=float, default=0.01,
                   help="with --chain: the share of rows written before each incremental one")
    p.add_argument("--json", help="also write the figures here")
    args = p.parse_args()
    if args.chain is not None and (args.chain < 2 or not args.checkpoint):
        p.error("--chain needs --checkpoint and at least 2 checkpoints (a full one and one "
                "incremental)")

    import numpy as np
    import tensorflow as tf

    from het_tf.runtime.config import OptimizerConfig, TableConfig
    from het_tf.runtime.table import ShardedTable

    config = TableConfig("memory", args.dim, optimizer=OptimizerConfig(args.optimizer),
                         max_rows=args.max_rows, on_full=args.on_full, ttl=args.ttl,
                         admit_after=args.admit_after)
    table = ShardedTable(config, [None] * args.shards, instance="measure")

    def key_of(index):
        return index * 7919  # spread, as hashed ids are

    slots = config.num_slots
    values = np.zeros((args.chunk, args.dim), np.float32)
    slot_values = np.zeros((args.chunk, slots, args.dim), np.float32)
    zeros = np.zeros(args.chunk, np.int64)
    table.stats()  # the shard exists before the baseline is taken
    before = rss_bytes()
    started = time.perf_counter()
    refused = None
    for first in range(0, args.rows, args.chunk):
        n = min(args.chunk, args.rows - first)
        keys = key_of(tf.range(first, first + n, dtype=tf.int64))
        try:
            table.import_rows(keys, values[:n], slot_values[:n], zeros[:n], zeros[:n])
        except tf.errors.ResourceExhaustedError as e:
            refused = e.message
            print(f"refused: {refused}", flush=True)
            break
        print(f"{first + n:,} rows, RSS {(rss_bytes() - before) / 2**30:.2f} GiB above start",
              flush=True)
    after = rss_bytes()
    stats = table.stats()
    if refused is not None:
        args.rows = int(stats["rows"])  # what the figures below are of
    raw = 4 * args.dim * (1 + slots) + 8 + (8 if args.optimizer == "adam" else 0)
    result = {
        "rows": int(stats["rows"]), "dim": args.dim, "optimizer": args.optimizer,
        "raw_bytes_per_row": raw,
        "resident_bytes_per_row": (after - before) / args.rows,
        "reported_bytes_per_row": int(stats["memory_bytes"]) / args.rows,
        "seconds": time.perf_counter() - started,
    }
    result["ratio"] = result["resident_bytes_per_row"] / raw
    if refused is not None:
        result.update(max_rows=args.max_rows, refused=refused)
    result.update(on_full=args.on_full, ttl=args.ttl, admit_after=args.admit_after)
    if args.checkpoint and args.chain:
        result.update(measure_chain(table, config, args.checkpoint, args.restore_shards,
                                    args.chain, args.changed, key_of))
    elif args.checkpoint:
        result.update(measure_checkpoint(table, config, args.checkpoint, args.restore_shards,
                                         after))
    write_figures(result, args.json)


if __name__ == "__main__":
    main()

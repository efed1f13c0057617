"""Fault soak: a 2-PS, 2-worker cluster trains while its workers are killed
and restarted every few seconds; then the books are checked.

    python tools/fault_soak.py --out build/soak [--lookahead]

The chief runs examples/cluster_train.py with a checkpoint per epoch. A
killer thread SIGKILLs one worker at a time (alternating), waits, and starts
it again on the same port. When the chief is done the script checks that:

- the chief finished every epoch (exit code 0);
- every update that reached a shard is in the shard's clocks: the shards'
  applied-update counters equal the sum of the row clocks;
- the surviving caches' pushes all reached the shards: pushes counted by the
  caches are at most the updates the shards applied (a killed worker's
  counters die with it, and so do its at most write_staleness pending
  updates per cached row, by design);
- the final checkpoint restores, onto a fresh cluster, exactly the rows,
  values and clocks the chief saw at the end.

It writes soak.json and soak.log to --out and exits 1 if a check fails. It
is bounded by --timeout and leaves no process behind.
"""
import argparse
import json
import os
import random
import subprocess
import sys
import threading
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from het_tf.apps.launch import LocalCluster  # noqa: E402

SCRIPT = os.path.join(os.path.dirname(HERE), "examples", "cluster_train.py")


class Log:
    """Task output to a file, with the text kept for waiting on lines."""

    def __init__(self, path):
        self._file = open(path, "w")
        self._lock = threading.Lock()
        self._text = []

    def write(self, text):
        with self._lock:
            self._file.write(text)
            self._file.flush()
            self._text.append(text)

    def flush(self):
        pass

    def text(self):
        with self._lock:
            return "".join(self._text)


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default="build/soak")
    p.add_argument("--epochs", type=int, default=6)
    p.add_argument("--steps-per-epoch", type=int, default=200)
    p.add_argument("--kill-every", type=float, default=6.0,
                   help="seconds between worker kills")
    p.add_argument("--down-for", type=float, default=2.0,
                   help="seconds a killed worker stays down before its restart")
    p.add_argument("--timeout", type=float, default=1200.0,
                   help="seconds before the run is stopped and counted as failed")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lookahead", action="store_true",
                   help="train with het_tf.lookahead: each worker's pipeline stages the next "
                   "batch and each step prefetches it")
    return p.parse_args()


def kill_and_restart(cluster, log, stop, args, events):
    """Kills worker 0, 1, 0, ... every kill_every seconds once training runs."""
    while "Epoch 1/" not in log.text():
        if stop.wait(0.2):
            return
    rng = random.Random(args.seed)
    index = 0
    while not stop.wait(args.kill_every * rng.uniform(0.7, 1.3)):
        name = f"worker:{index}"
        cluster.kill_task(name)
        events.append({"t": time.monotonic(), "killed": name})
        print(f"soak: killed {name}", flush=True)
        if stop.wait(args.down_for):
            break
        cluster.start_task("worker", index)
        events.append({"t": time.monotonic(), "restarted": name})
        print(f"soak: restarted {name}", flush=True)
        index = 1 - index


def run_chief(cluster, extra, result_path, timeout):
    chief = cluster.start_chief([sys.executable, SCRIPT, "--result-json", result_path, *extra])
    try:
        return chief.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        return 124


def main():
    args = parse_args()
    os.makedirs(args.out, exist_ok=True)
    checkpoints = os.path.join(args.out, "ckpt")
    if os.path.exists(checkpoints):
        raise SystemExit(f"{checkpoints} exists: the soak starts from nothing; remove it first")
    log = Log(os.path.join(args.out, "soak.log"))
    events = []
    started = time.monotonic()
    train_json = os.path.join(args.out, "train.json")
    stop = threading.Event()
    with LocalCluster(2, 2, out=log) as cluster:
        killer = threading.Thread(target=kill_and_restart,
                                  args=(cluster, log, stop, args, events), daemon=True)
        killer.start()
        code = run_chief(cluster, ["--epochs", str(args.epochs), "--steps-per-epoch",
                                   str(args.steps_per_epoch), "--checkpoint-dir", checkpoints]
                         + (["--lookahead"] if args.lookahead else []),
                         train_json, args.timeout)
        stop.set()
        killer.join(timeout=60)
    train_seconds = time.monotonic() - started
    checks = {"chief finished": code == 0}
    report = {"command": " ".join([sys.executable] + sys.argv), "chief_exit_code": code,
              "train_seconds": round(train_seconds, 1),
              "kills": sum("killed" in e for e in events),
              "restarts": sum("restarted" in e for e in events),
              "epochs": args.epochs, "steps_per_epoch": args.steps_per_epoch}
    if code == 0:
        trained = json.load(open(train_json))
        stats = trained["stats"]
        report.update(losses=trained["losses"], table_rows=stats["table_rows"],
                      table_updates_applied=stats["table_updates_applied"],
                      clock_sum=trained["clock_sum"],
                      cache_updates_pushed_by_survivors=stats.get("cache_updates_pushed"))
        checks["shard clocks equal the updates applied"] = (
            stats["table_updates_applied"] == trained["clock_sum"])
        checks["surviving caches' pushes all reached the shards"] = (
            stats.get("cache_updates_pushed", 0) <= stats["table_updates_applied"])
        checks["loss fell"] = trained["losses"][-1] < trained["losses"][0]
        # The final checkpoint onto a fresh cluster, no training.
        restore_json = os.path.join(args.out, "restore.json")
        with LocalCluster(2, 1, out=log) as cluster:
            restore_code = run_chief(cluster, ["--epochs", "0", "--checkpoint-dir", checkpoints],
                                     restore_json, args.timeout)
        checks["final checkpoint restores"] = restore_code == 0
        if restore_code == 0:
            restored = json.load(open(restore_json))
            keys, values, clocks = restored["table"]
            want_keys, want_values, want_clocks = trained["table"]
            checks["restored rows, values and clocks are the trained ones"] = (
                keys == want_keys and clocks == want_clocks
                and np.array_equal(np.array(values), np.array(want_values)))
            report["restored_from"] = restored.get("resumed_from")
    return write_report(args.out, report, checks, f"{report['kills']} kills, "
                        f"{report['restarts']} restarts in {train_seconds:.0f} s")


def write_report(out, report, checks, summary):
    """Writes soak.json with the checks, prints them; the exit code."""
    report.update(checks=checks, passed=all(checks.values()))
    path = os.path.join(out, "soak.json")
    with open(path, "w") as f:
        json.dump(report, f, indent=2)
    for name, ok in checks.items():
        print(f"soak: {'ok  ' if ok else 'FAIL'} {name}")
    print(f"soak: {summary}; report in {path}")
    return 0 if report["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())

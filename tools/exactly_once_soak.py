"""Exactly-once soak: two worker processes train one table on two PS tasks
for a while, each injecting faults between its steps, and then every row
the shards hold must equal what the data says.

    python tools/exactly_once_soak.py --out build/soak/exactly-once [--sync check]

The PS tasks are real tf.distribute.Server processes on 127.0.0.1; each
worker (tests/exactly_once_worker.py) is a client of its own that drives its
cache through the ops, sharing rows with the other. Between steps it drops
an answer after the shards merged (sometimes several in a row), makes shard
1 refuse a step after shard 0 answered, and restarts as a new incarnation
whose old round then arrives late (tests/fault_runs.py). Each worker
records the gradients it trained; after both flush, worker 0 checks each
row's value and clock against their sum (SGD: the initial row minus the
learning rate times the sum, the clock at their number). Shards restored
while updates are pending are soaked in one process, by the property test
of tests/test_exactly_once.py: a PS task restarted under a live eager
client ends that client, as it ends a training job (docs/reliability.md).
With --optimizer adagrad or adam each worker trains keys of its own and is
held to its steps replayed without a fault in NumPy, slots included, and
its reads along the way too (tests/exactly_once_worker.py).

Writes soak.json and soak.log to --out and exits 1 if a check fails; bounded
by --timeout, it leaves no process behind.
"""
import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)
sys.path.insert(0, HERE)

from fault_soak import Log, write_report  # noqa: E402

from het_tf.apps.launch import LocalCluster  # noqa: E402

WORKER = os.path.join(ROOT, "tests", "exactly_once_worker.py")


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default="build/soak/exactly-once")
    p.add_argument("--seconds", type=float, default=120.0, help="each worker's training time")
    p.add_argument("--sync", choices=["refresh", "check"], default="refresh")
    p.add_argument("--staleness", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--timeout", type=float, default=900.0)
    p.add_argument("--evict", action="store_true",
                   help="the table evicts at its limit while the workers train (the trained "
                   "rows pinned), so that eviction runs beside every fault")
    p.add_argument("--optimizer", choices=["sgd", "adagrad", "adam"], default="sgd",
                   help="adagrad or adam: each worker trains keys of its own, checked with its "
                   "reads along the way against its steps replayed without a fault")
    return p.parse_args()


def wait_for(log, text, process, deadline):
    while text not in log.text():
        if process.poll() is not None:
            raise SystemExit(f"a soak worker exited with {process.returncode} before "
                             f"'{text}' (see {log._file.name})")
        if time.monotonic() > deadline:
            raise SystemExit(f"no '{text}' before the timeout")
        time.sleep(0.2)


def main():
    args = parse_args()
    os.makedirs(args.out, exist_ok=True)
    for name in os.listdir(args.out):
        if name.endswith(".json"):
            os.remove(os.path.join(args.out, name))
    log = Log(os.path.join(args.out, "soak.log"))
    deadline = time.monotonic() + args.timeout
    started = time.monotonic()
    with LocalCluster(2, 2, hybrid=True, out=log) as cluster:
        ps = ",".join(cluster.cluster["ps"])
        workers = []
        for index in range(2):
            argv = [sys.executable, WORKER, "--ps", ps, "--index", str(index), "--out", args.out,
                    "--seconds", str(args.seconds), "--sync", args.sync,
                    "--staleness", str(args.staleness), "--seed", str(args.seed)]
            argv += ["--evict"] if args.evict else []
            argv += ["--optimizer", args.optimizer]
            workers.append(cluster._spawn(f"soak:{index}", argv, dict(os.environ)))
            # One client connects at a time (docs/hybrid.md: TensorFlow 2.16).
            wait_for(log, f"worker {index}: connected", workers[-1], deadline)
        codes = []
        for w in workers:
            try:
                codes.append(w.wait(timeout=max(1.0, deadline - time.monotonic())))
            except subprocess.TimeoutExpired:
                codes.append(124)  # the cluster's close kills it
    if any(not os.path.exists(os.path.join(args.out, f"worker{i}.json")) for i in range(2)):
        print(f"soak: FAIL a worker wrote no record (exit codes {codes}; see soak.log)")
        return 1
    records = [json.load(open(os.path.join(args.out, f"worker{i}.json"))) for i in range(2)]
    check_path = os.path.join(args.out, "check.json")
    checked = json.load(open(check_path)) if os.path.exists(check_path) else {}
    faults = {k: sum(r["faults"][k] for r in records) for k in records[0]["faults"]}
    checks = {
        "workers finished": codes[1] == 0 and os.path.exists(check_path),
        "every row equals the data": checked.get("every_row_equals_the_data", False),
        "every fault happened": all(faults.values()),
        "repeats were answered without a merge": checked.get("table_stats", {}).get(
            "repeats", 0) > 0,
    }
    if args.optimizer != "sgd":
        checks["reads were checked along the way"] = checked.get("reads_checked", 0) > 0
    if args.evict:
        checks["the shards evicted rows"] = checked.get("table_stats", {}).get(
            "rows_evicted", 0) > 0
    report = {"command": " ".join([sys.executable] + sys.argv), "exit_codes": codes,
              "seconds": round(time.monotonic() - started, 1), "sync": args.sync,
              "staleness": args.staleness, "evict": args.evict, "optimizer": args.optimizer,
              "steps": [r["steps"] for r in records],
              "faults": faults, **checked}
    return write_report(args.out, report, checks,
                        f"{sum(report['steps'])} steps with faults {faults}")

if __name__ == "__main__":
    sys.exit(main())

"""One `het-tf bench` run: the configurations (or the accuracy sweep) one
after the other, results.json written after each, then the report."""
import json
import os
import sys
import time

from het_tf.apps.bench import accuracy_sweep, plan, runs
from het_tf.apps.bench.experiments import miss_rates, unique_id_traffic
from het_tf.apps.bench.report import plot, report, summarize
from het_tf.apps.train import default_run_dir, options


def _sweep(args, out, runs_dir, log, results):
    def write(partial):
        results.update(partial)
        with open(os.path.join(out, "results.json"), "w") as f:
            json.dump(results, f, indent=2)

    swept = accuracy_sweep.run(
        args, lambda name, extra: runs.train(name, extra, args, runs_dir, log), log, write)
    results["seconds"] = time.perf_counter() - log.started
    write(swept)
    with open(os.path.join(out, "report.md"), "w") as f:
        f.write(swept["report"])
    print(swept["report"], flush=True)
    log(f"het-tf bench --sweep: wrote {out}/results.json and report.md")
    return 0


def run(args):
    plan.resolve(args)
    out = os.path.abspath(args.out) if args.out else default_run_dir("bench")
    runs_dir = os.path.join(out, "runs")
    os.makedirs(runs_dir, exist_ok=True)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    started = time.perf_counter()

    def log(message):
        print(f"[{time.perf_counter() - started:6.0f} s] {message}", flush=True)

    log.started = started
    record = {"config": options(args), "versions": runs.versions(), "command": " ".join(sys.argv)}
    if args.sweep:
        return _sweep(args, out, runs_dir, log, record)
    link = runs.link_rate(args, log)
    results = dict(record, link=link or "loopback", runs={})

    def write_results():  # after every run, so an interrupted benchmark keeps what it measured
        with open(os.path.join(out, "results.json"), "w") as f:
            json.dump(results, f, indent=2)

    log("het-tf bench: miss rate against cache size (LRU, LFU)")
    results["miss_rates"] = miss_rates(args)
    results["unique_id_traffic"] = traffic = unique_id_traffic(args)
    for name, extra in plan.ps_plan(args):
        if link and "hybrid" in extra:
            # horovodrun's ranks share one namespace here, so their links
            # could not be shaped: a figure for them would be loopback's.
            results["runs"][name] = {"failed": True, "reason": "not run with --link: the "
                                     "Horovod ranks of a local run share one network namespace"}
            continue
        if link and "ps" in extra:
            extra = extra + ["--link", link]
        result = runs.train(name, extra, args, runs_dir, log)
        if name == "tfra" and result.get("failed"):
            # Under the strategy it fails (see the reason); one process it runs.
            result_local = runs.train("tfra-local", ["--mode", "local", "--embedding", "tfra"],
                                      args, runs_dir, log)
            result_local["under_strategy"] = result
            result = result_local
        results["runs"][name] = result
        write_results()
    results["table"], results["targets"] = summarize(results, traffic)
    results["seconds"] = time.perf_counter() - started
    write_results()
    plot(results, out)
    text = report(results)
    with open(os.path.join(out, "report.md"), "w") as f:
        f.write(text)
    print(text, flush=True)
    log(f"het-tf bench: wrote {out}/results.json, report.md and throughput.png, miss_rate.png, "
        "auc_staleness.png")
    return 0

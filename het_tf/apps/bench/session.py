"""One `het-tf bench` run: the configurations (or the accuracy sweep) one
after the other, results.json written after each, then the report."""
import json
import os
import sys
import time

from het_tf.apps.bench import accuracy_sweep, floor, plan, runs
from het_tf.apps.bench.experiments import miss_rates, unique_id_traffic
from het_tf.apps.bench.report import plot, report, summarize
from het_tf.apps.train import default_run_dir, options


def _sweep(args, out, runs_dir, log, results):
    def write(partial):
        results.update(partial)
        with open(os.path.join(out, "results.json"), "w") as f:
            json.dump(results, f, indent=2)

    section = plan.Section(args.model[0], args.dim[0], None)
    swept = accuracy_sweep.run(
        args, lambda name, extra: runs.train(name, extra, args, runs_dir, log, section), log,
        write)
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
    rate = runs.link_rate(args, log, plan.FULL_PLAN_LINK if args.plan == "full" else None)
    results = dict(record, link=rate or "loopback", latency=args.latency if rate else None,
                   sections=[])

    def write_results():  # after every run, so an interrupted benchmark keeps what it measured
        with open(os.path.join(out, "results.json"), "w") as f:
            json.dump(results, f, indent=2)

    if args.plan != "reduced":
        log("het-tf bench: miss rate against cache size (LRU, LFU)")
        results["miss_rates"] = miss_rates(args)
    for index, section in enumerate(plan.sections(args, rate)):
        log(f"het-tf bench: {section.title}")
        entry = {"model": section.model, "dim": section.dim, "link": section.link or "loopback",
                 "key": section.key, "runs": {},
                 "unique_id_traffic": unique_id_traffic(args, section)}
        results["sections"].append(entry)
        section_dir = os.path.join(runs_dir, section.key)
        os.makedirs(section_dir, exist_ok=True)
        for name, extra in plan.section_plan(args, section, first=index == 0):
            result = runs.train(name, extra, args, section_dir, log, section)
            if name == "tfra" and result.get("failed"):
                # Under the strategy it fails (see the reason); one process it runs.
                result_local = runs.train("tfra-local", ["--mode", "local", "--embedding",
                                                         "tfra"], args, section_dir, log, section)
                result_local["under_strategy"] = result
                result = result_local
            if result.get("cached_tables"):
                result["floor"] = floor.floor(result)
                if "ratio" in result["floor"]:
                    log(f"het-tf bench: {name}: {result['floor']['ratio']:.2f}x its Belady "
                        f"floor ({result['floor']['floor_bytes_per_sample']:,.0f} bytes/sample)")
            entry["runs"][name] = result
            write_results()
        entry["table"], entry["targets"] = summarize(entry, args.target_share)
        write_results()
    results["seconds"] = time.perf_counter() - started
    write_results()
    figures = plot(results, out)
    text = report(results)
    with open(os.path.join(out, "report.md"), "w") as f:
        f.write(text)
    print(text, flush=True)
    log(f"het-tf bench: wrote {out}/results.json, report.md and {', '.join(figures)}")
    return 0

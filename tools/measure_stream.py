"""Runs one `het-tf train` configuration a number of times (seeds 0, 1, ...)
and summarizes what a long or endless stream needs to know: held-out AUC
and logloss, samples/s, rows held, evicted and not admitted (mean and
spread over the runs), each task's resident memory over time against its
level at the end of warm-up, and a plot of the first run's rows held and
memory over time.

    python tools/measure_stream.py --out /tmp/stream --label limited --repeats 3 -- \\
        --mode ps --ps 2 --workers 2 --scale 1 --drift 0.1 --samples 4000000 \\
        --max-rows 370000 --on-full evict --admit-after 2 --cache-capacity 50000

Warm-up ends at the first progress chunk (a tenth of training) whose end
finds rows evicted, or, without eviction, at the end of the first chunk.
Writes <out>/<label>.json and <out>/<label>.png; each run's metrics.json is
in <out>/<label>/seed<i>/.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import textwrap

SUMMED = ("auc", "logloss", "samples_per_second", "table_rows", "rows_evicted",
          "ids_not_admitted", "cache_hit_rate", "embedding_bytes_per_sample")


def run(train_args, run_dir, seed):
    command = [os.path.join(os.path.dirname(sys.executable), "het-tf"), "train", *train_args,
               "--seed", str(seed), "--run-dir", run_dir, "--no-save"]
    print("measure_stream:", " ".join(command), flush=True)
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    with open(os.path.join(run_dir, "metrics.json")) as f:
        return json.load(f)


def warm_up_end(metrics):
    """Seconds into training where warm-up ends (see the module's doc)."""
    chunks = metrics["progress"]
    evicting = [c for c in chunks if c["rows_evicted"] > 0]
    return (evicting or chunks)[0]["seconds"]


def memory_after_warm_up(metrics):
    """Per task: resident bytes at the end of warm-up, the most after it, and
    the ratio of the two."""
    end = warm_up_end(metrics)
    samples = metrics["memory_timeline"]
    after = [s for s in samples if s["seconds"] >= end]
    if not after:
        return {}
    found = {}
    for task, level in after[0]["rss_bytes"].items():
        most = max(s["rss_bytes"].get(task, 0) for s in after)
        found[task] = {"at_warm_up_end": level, "most_after": most, "ratio": most / level}
    return found


def spread(values):
    values = [v for v in values if v is not None]
    if not values:
        return None
    return {"mean": statistics.fmean(values),
            "stdev": statistics.stdev(values) if len(values) > 1 else 0.0,
            "min": min(values), "max": max(values), "runs": values}


def plot(metrics, path, title):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (rows_axis, memory_axis) = plt.subplots(2, 1, figsize=(8, 7), sharex=True)
    chunks = metrics["progress"]
    seconds = [0.0] + [c["seconds"] for c in chunks]
    rows_axis.plot(seconds, [0] + [c["table_rows"] for c in chunks], "o-", label="rows held")
    limit = metrics["config"].get("max_rows")
    if limit:
        rows_axis.axhline(limit, color="gray", linestyle="--", label="--max-rows")
    rows_axis.plot(seconds, [0] + [c["rows_evicted"] for c in chunks], "s-",
                   label="rows evicted so far")
    rows_axis.set_ylabel("rows")
    rows_axis.legend()
    rows_axis.set_title("\n".join(textwrap.wrap(title, 110)), fontsize="small")
    samples = metrics["memory_timeline"]
    for task in sorted(samples[-1]["rss_bytes"]) if samples else []:
        memory_axis.plot([s["seconds"] for s in samples],
                         [s["rss_bytes"].get(task, 0) / 2**30 for s in samples], label=task)
    memory_axis.axvline(warm_up_end(metrics), color="gray", linestyle=":", label="warm-up end")
    memory_axis.set_ylabel("resident memory (GiB)")
    memory_axis.set_xlabel("training seconds")
    memory_axis.legend(fontsize="small")
    figure.tight_layout()
    figure.savefig(path, dpi=90)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("--label", required=True)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("train_args", nargs=argparse.REMAINDER,
                   help="het-tf train's options, after --")
    args = p.parse_args()
    train_args = args.train_args[1:] if args.train_args[:1] == ["--"] else args.train_args
    if args.repeats < 1 or any(a in ("--seed", "--run-dir") for a in train_args):
        p.error("--repeats must be >= 1, and the tool sets --seed and --run-dir itself")
    runs = [run(train_args, os.path.join(args.out, args.label, f"seed{seed}"), seed)
            for seed in range(args.repeats)]
    summary = {"label": args.label, "train_args": train_args,
               **{key: spread([m.get(key) for m in runs]) for key in SUMMED},
               "train_samples": runs[0]["train_samples"],
               "peak_rss_bytes": [m["peak_rss_bytes"] for m in runs],
               "memory_after_warm_up": [memory_after_warm_up(m) for m in runs],
               "progress": [m["progress"] for m in runs]}
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, f"{args.label}.json"), "w") as f:
        json.dump(summary, f, indent=2)
    plot(runs[0], os.path.join(args.out, f"{args.label}.png"), f"{args.label}: "
         + " ".join(train_args))
    auc, speed = summary["auc"], summary["samples_per_second"]
    print(f"measure_stream: {args.label}: AUC {auc['mean']:.4f} ± {auc['stdev']:.4f}, "
          f"{speed['mean']:,.0f} ± {speed['stdev']:,.0f} samples/s over {args.repeats} runs; "
          f"wrote {args.out}/{args.label}.json and .png", flush=True)


if __name__ == "__main__":
    main()

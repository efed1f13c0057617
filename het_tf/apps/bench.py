"""`het-tf bench`: the same model, data and cluster size under TensorFlow's own
PS path, TensorFlow Recommenders-Addons and HetEmbedding, one configuration
after the other in one run, with throughput ratios, embedding traffic, cache
hit rates and held-out AUC, written as JSON and PNG plots to an output folder.

Every training run is a `het-tf train` process with its own run folder under
OUT/runs; a configuration that fails is recorded with its error and the
benchmark goes on.
"""
import json
import math
import os
import subprocess
import sys
import time

from het_tf.apps import accuracy_sweep
from het_tf.apps.train import DEFAULT_DIM, default_run_dir, options

# (name, what it is, `het-tf train` arguments). "limit" is the same model
# with plain Embedding in one process: the no-communication limit.
CONFIGURATIONS = (
    ("limit", "tf_keras Embedding, one process, no cluster (no-communication limit)",
     ["--mode", "local", "--embedding", "keras"]),
    ("keras-ps", "tf_keras Embedding under ParameterServerStrategy, variable partitioner",
     ["--mode", "ps", "--embedding", "keras"]),
    ("tfra", "TFRA 0.8.1 dynamic_embedding Keras layer",
     ["--mode", "ps", "--embedding", "tfra"]),
    ("het-nocache", "HetEmbedding, cache off", ["--mode", "ps", "--cache-capacity", "0"]),
    ("het-s10", "HetEmbedding, 10% LFU cache, staleness 10", ["--mode", "ps", "--staleness", "10"]),
    ("het-s100", "HetEmbedding, 10% LFU cache, staleness 100",
     ["--mode", "ps", "--staleness", "100"]),
    ("het-auto", "HetEmbedding, 10% LFU cache, staleness auto (the default)",
     ["--mode", "ps", "--staleness", "auto"]),
    ("hybrid-s100", "HetEmbedding, 10% LFU cache, staleness 100, hybrid mode",
     ["--mode", "hybrid", "--staleness", "100"]),
)
# The staleness sweep for AUC: s10 and s100 come from the configurations above.
STALENESS_SWEEP = (("het-s0", "0"), ("het-s10", "10"), ("het-s100", "100"),
                   ("het-s10000", "10000"), ("het-sinf", "inf"), ("het-auto", "auto"))
CACHE_FRACTIONS = (0.01, 0.02, 0.05, 0.1, 0.15, 0.2)


def add_arguments(p):
    p.add_argument("--model", choices=("wdl", "deepfm", "dcn"), default="wdl")
    p.add_argument("--samples", type=int,
                   help="training samples per run (default 1,000,000; with --sweep, the "
                   "sweep size's)")
    p.add_argument("--eval-samples", type=int,
                   help="held-out samples per run (default 100,000; with --sweep, the sweep "
                   "size's)")
    p.add_argument("--sweep", action="store_true",
                   help="instead of the configurations: held-out accuracy of SGD, Adagrad "
                   "and Adam at staleness 0 (the cache-off path), 10, 100, 10,000 and auto, "
                   "--repeats seeds each, as mean and spread (docs/benchmarks.md)")
    p.add_argument("--sweep-size", choices=sorted(accuracy_sweep.SIZES), default="reduced",
                   help="reduced: %s training samples a run; full: %s" % tuple(
                       f"{accuracy_sweep.SIZES[k][0]:,}" for k in ("reduced", "full")))
    p.add_argument("--repeats", type=int, default=3, help="--sweep: seeds per setting")
    p.add_argument("--ps", type=int, default=1)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--scale", type=float, default=0.01)
    p.add_argument("--zipf", type=float, default=1.1)
    p.add_argument("--out", help="output folder (default runs/bench-TIME)")
    p.add_argument("--only", nargs="+", metavar="NAME",
                   help="run only these configurations (names as in the report; with "
                   "--sweep, OPTIMIZER-SETTING such as adagrad-s100)")
    p.add_argument("--run-timeout", type=int, default=1200, help="seconds per training run")
    p.add_argument("--link", metavar="RATE",
                   help="put each task of the ps-mode clusters in a network namespace of its "
                   "own behind a tc-shaped link of RATE (for example 1gbit, 100mbit); needs "
                   "root, otherwise the benchmark says so and runs on loopback")


def _versions():
    from het_tf.apps.train import versions as train_versions

    versions = train_versions()
    try:
        import importlib.metadata as metadata

        versions["tensorflow-recommenders-addons"] = metadata.version(
            "tensorflow-recommenders-addons")
    except Exception:  # not installed: the TFRA configuration records its failure
        pass
    return versions


def _common_args(args):
    return ["--model", args.model, "--samples", str(args.samples), "--eval-samples",
            str(args.eval_samples), "--ps", str(args.ps), "--workers", str(args.workers),
            "--batch-size", str(args.batch_size), "--scale", str(args.scale), "--zipf",
            str(args.zipf), "--no-save"]


def _failure_reason(text):
    """The most telling error line of a failed run's output."""
    import re

    detail = re.search(r"\(0\) ([A-Z_]+: [^\\\n]+)", text)  # a root error inside gRPC text
    if detail:
        return detail.group(1).strip()[:400]
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    for marker in ("Error:", "Error(", "error:", "Segmentation fault", "Fatal"):
        for line in reversed(lines):
            if marker in line and "Ignoring an error" not in line:
                return line[-400:]
    return (lines[-1] if lines else "no output")[-400:]


def _train(name, extra, args, runs_dir, log):
    run_dir = os.path.join(runs_dir, name)
    argv = [sys.executable, "-m", "het_tf.apps.cli", "train", *_common_args(args), *extra,
            "--run-dir", run_dir]
    log(f"het-tf bench: {name}: {' '.join(argv[3:])}")
    started = time.perf_counter()
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=args.run_timeout)
        output, code = done.stdout + done.stderr, done.returncode
    except subprocess.TimeoutExpired as e:
        output = (e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) \
            else (e.stdout or "")
        code = "timeout"
    with open(os.path.join(runs_dir, f"{name}.log"), "w") as f:
        f.write(output)
    seconds = time.perf_counter() - started
    metrics_path = os.path.join(run_dir, "metrics.json")
    if code == 0 and os.path.exists(metrics_path):
        with open(metrics_path) as f:
            metrics = json.load(f)
        metrics["wall_seconds"] = seconds
        log(f"het-tf bench: {name}: AUC {metrics.get('auc', float('nan')):.4f}, "
            f"{metrics['samples_per_second']:,.0f} samples/s ({seconds:.0f} s)")
        return metrics
    reason = _failure_reason(output)
    log(f"het-tf bench: {name}: failed ({code}): {reason}")
    return {"failed": True, "exit": code, "reason": reason, "wall_seconds": seconds}


def unique_id_traffic(args, batches=20):
    """Embedding bytes per sample of TensorFlow's PS path (and TFRA's), which
    keep no cache: every step each worker reads the rows of its batch's
    unique ids (8-byte id out, 4*dim bytes back) and sends their gradients
    (8-byte id and 4*dim bytes), for each table of the model."""
    import numpy as np

    from het_tf.data import SyntheticCriteo

    data = SyntheticCriteo(0, args.scale, args.zipf)
    unique = []
    for b in range(batches):
        features, _ = data.rows(0, b * args.batch_size, args.batch_size)
        unique.append(len(np.unique(features["categorical"].numpy())))
    per_batch = float(np.mean(unique))
    # The benchmark trains at het-tf train's default embedding size.
    dims = [DEFAULT_DIM] + ([1] if args.model in ("wdl", "deepfm") else [])
    per_sample = sum(per_batch * (2 * 8 + 2 * 4 * dim) for dim in dims) / args.batch_size
    return {"unique_ids_per_batch": per_batch, "bytes_per_sample": per_sample}


def miss_rates(args, batches=1200, warmup=400, batch_size=128):
    """Cache miss rate (misses over unique keys looked up) against cache size,
    for LRU and LFU, on the synthetic data's key stream, with the table's
    real cache and unbounded staleness (so only capacity and first-touch
    misses count). Batches of 128 samples, so that a batch's unique keys fit
    the smallest cache."""
    from het_tf.data import SyntheticCriteo
    from het_tf.runtime.cache import WorkerCache, hit_rate
    from het_tf.runtime.config import UNBOUNDED, CacheConfig, TableConfig
    from het_tf.runtime.table import ShardedTable

    data = SyntheticCriteo(0, args.scale, args.zipf)
    keys = [data.rows(0, b * batch_size, batch_size)[0]["categorical"] for b in range(batches)]
    results = {}
    for policy in ("lru", "lfu"):
        for fraction in CACHE_FRACTIONS:
            rows = max(1, int(fraction * data.vocabulary_size))
            name = f"bench_{policy}_{int(fraction * 1000)}"
            table = ShardedTable(TableConfig(name, 16), [None], instance=f"bench{os.getpid()}")
            cache = WorkerCache(table, CacheConfig(rows, policy, UNBOUNDED, UNBOUNDED),
                                shared_name=f"bench_cache_{name}_{os.getpid()}")
            before = None
            for b, batch in enumerate(keys):
                if b == warmup:
                    before = cache.stats()
                cache.lookup(batch, training=True)
            after = cache.stats()
            measured = {k: after[k] - before[k] for k in ("hits", "unique_keys")}
            results.setdefault(policy, []).append(
                {"fraction": fraction, "rows": rows, "miss_rate": 1 - hit_rate(measured)})
            cache.clear()
            table.clear()
    return results


def _ratio(a, b):
    if not a or not b or any(isinstance(v, float) and math.isnan(v) for v in (a, b)):
        return None
    return a / b


def summarize(results, traffic):
    """The report's figures from the runs."""
    runs = results["runs"]
    base = runs.get("keras-ps", {}).get("samples_per_second")
    limit = runs.get("limit", {}).get("samples_per_second")
    rows = []
    for name, label, _ in CONFIGURATIONS:
        if name not in runs:  # left out with --only
            continue
        run = runs[name]
        if run.get("failed"):
            rows.append({"name": name, "label": label, "failed": run["reason"]})
            continue
        bytes_per_sample = run.get("embedding_bytes_per_sample")
        if name in ("keras-ps", "tfra", "limit") and bytes_per_sample is None:
            bytes_per_sample = 0.0 if name == "limit" else traffic["bytes_per_sample"]
        rows.append({"name": name, "label": label, "mode": run.get("config", {}).get("mode"),
                     "samples_per_second": run.get("samples_per_second"),
                     "ratio_to_keras_ps": _ratio(run.get("samples_per_second"), base),
                     "ratio_to_limit": _ratio(run.get("samples_per_second"), limit),
                     "embedding_bytes_per_sample": bytes_per_sample,
                     "cache_hit_rate": run.get("cache_hit_rate"),
                     "auc": run.get("auc"), "logloss": run.get("logloss")})
    off = runs.get("het-nocache", {}).get("embedding_bytes_per_sample")
    s100 = runs.get("het-s100", {}).get("embedding_bytes_per_sample")
    s0_auc = runs.get("het-s0", {}).get("auc")

    def auc_minus_s0(name):
        auc = runs.get(name, {}).get("auc")
        return None if s0_auc is None or auc is None else auc - s0_auc

    targets = {
        "traffic_reduction_s100_vs_cache_off": None if not off or s100 is None
        else 1 - s100 / off,
        "auc_s100_minus_s0": auc_minus_s0("het-s100"),
        "auc_auto_minus_s0": auc_minus_s0("het-auto"),
        "het_s100_ratio_to_limit": _ratio(runs.get("het-s100", {}).get("samples_per_second"),
                                          limit),
        "het_s100_ratio_to_keras_ps": _ratio(
            runs.get("het-s100", {}).get("samples_per_second"), base),
        "keras_ps_embedding_time_share": None if not base or not limit else 1 - base / limit,
    }
    return rows, targets


def plot(results, out):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in results["table"] if r.get("samples_per_second")]
    fig, ax = plt.subplots(figsize=(8, 4))
    ax.barh([f"{r['name']} [{r['mode']}]" for r in rows], [r["samples_per_second"] for r in rows],
            color="#4c72b0")
    ax.set_xlabel("samples/s (steady state)")
    ax.set_title(f"Throughput, {results['config']['model']}, "
                 f"{results['config']['workers']} workers")
    ax.invert_yaxis()
    fig.tight_layout()
    fig.savefig(os.path.join(out, "throughput.png"), dpi=120)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(6, 4))
    for policy, points in results["miss_rates"].items():
        ax.plot([100 * p["fraction"] for p in points], [100 * p["miss_rate"] for p in points],
                marker="o", label=policy.upper())
    ax.set_xlabel("cache size (% of rows)")
    ax.set_ylabel("miss rate (%)")
    ax.set_title(f"Miss rate on Zipf({results['config']['zipf']}) keys")
    ax.legend()
    fig.tight_layout()
    fig.savefig(os.path.join(out, "miss_rate.png"), dpi=120)
    plt.close(fig)

    sweep = [(label, results["runs"].get(name, {}).get("auc"))
             for name, label in STALENESS_SWEEP]
    sweep = [(label, auc) for label, auc in sweep if auc is not None]
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(range(len(sweep)), [auc for _, auc in sweep], marker="o")
    ax.set_xticks(range(len(sweep)), [label for label, _ in sweep])
    ax.set_xlabel("staleness bound")
    ax.set_ylabel("held-out AUC")
    ax.set_title("AUC against staleness (10% LFU cache)")
    fig.tight_layout()
    fig.savefig(os.path.join(out, "auc_staleness.png"), dpi=120)
    plt.close(fig)


def _fmt(value, spec):
    return "—" if value is None else format(value, spec)


def report(results):
    """The results as Markdown, for docs/benchmarks.md."""
    lines = [f"Links between tasks: {results.get('link', 'loopback')}.", "",
             "| Configuration | samples/s | vs TF PS | vs limit | embedding bytes/sample | "
             "hit rate | AUC | logloss |", "|---|---|---|---|---|---|---|---|"]
    for r in results["table"]:
        if "failed" in r:
            lines.append(f"| {r['name']}: {r['label']} | failed: {r['failed'][:160]} |"
                         " | | | | | |")
            continue
        lines.append(
            f"| {r['name']}: {r['label']} | {_fmt(r['samples_per_second'], ',.0f')} | "
            f"{_fmt(r['ratio_to_keras_ps'], '.2f')} | {_fmt(r['ratio_to_limit'], '.2f')} | "
            f"{_fmt(r['embedding_bytes_per_sample'], ',.0f')} | "
            f"{_fmt(r['cache_hit_rate'], '.3f')} | {_fmt(r['auc'], '.4f')} | "
            f"{_fmt(r['logloss'], '.4f')} |")
    lines += ["", "| Staleness | AUC |", "|---|---|"]
    for name, label in STALENESS_SWEEP:
        run = results["runs"].get(name, {})
        lines.append(f"| {label} | "
                     f"{'failed' if run.get('failed') else _fmt(run.get('auc'), '.4f')} |")
    lines += ["", "| Cache size | LRU miss rate | LFU miss rate |", "|---|---|---|"]
    miss = results["miss_rates"]
    for i, fraction in enumerate(CACHE_FRACTIONS):
        lines.append(f"| {fraction:.0%} | {miss['lru'][i]['miss_rate']:.3f} | "
                     f"{miss['lfu'][i]['miss_rate']:.3f} |")
    t = results["targets"]
    lines += ["", f"- embedding traffic at 10% cache, staleness 100, below cache off: "
              f"{_fmt(t['traffic_reduction_s100_vs_cache_off'], '.1%')}",
              f"- AUC at staleness 100 minus staleness 0: {_fmt(t['auc_s100_minus_s0'], '+.4f')}"
              f"; at staleness auto: {_fmt(t['auc_auto_minus_s0'], '+.4f')} (one run each: "
              "`--sweep` repeats them)",
              f"- HetEmbedding (s=100) samples/s over the no-communication limit: "
              f"{_fmt(t['het_s100_ratio_to_limit'], '.2f')}; over TF's PS: "
              f"{_fmt(t['het_s100_ratio_to_keras_ps'], '.2f')}",
              f"- TF's PS: share of step time on embedding traffic (1 - its samples/s over "
              f"the limit's): {_fmt(t['keras_ps_embedding_time_share'], '.1%')}"]
    tfra = results["runs"].get("tfra", {})
    if tfra.get("under_strategy"):
        lines.append(f"- TFRA under ParameterServerStrategy failed "
                     f"({tfra['under_strategy']['reason'][:300]}); its row is TFRA in one "
                     "process")
    return "\n".join(lines) + "\n"


def _link(args, log):
    """The rate to give the ps-mode runs, or None for loopback."""
    if not args.link:
        return None
    from het_tf.apps import link

    try:
        link.check_available()
    except link.LinkUnavailable as e:
        log(f"het-tf bench: {e}; running on loopback")
        return None
    return args.link


def _resolve_sizes(args):
    """Fills --samples and --eval-samples from the sweep size or the defaults."""
    samples, eval_samples = (accuracy_sweep.SIZES[args.sweep_size] if args.sweep
                             else (1_000_000, 100_000))
    args.samples = samples if args.samples is None else args.samples
    args.eval_samples = eval_samples if args.eval_samples is None else args.eval_samples
    if args.samples < 1 or args.eval_samples < 1:
        raise ValueError("--samples and --eval-samples must be positive")
    if args.sweep and (args.repeats < 1 or args.link):
        raise ValueError("--sweep takes --repeats >= 1 and no --link")


def _run_sweep(args, out, runs_dir, log, results):
    def write(partial):
        results.update(partial)
        with open(os.path.join(out, "results.json"), "w") as f:
            json.dump(results, f, indent=2)

    swept = accuracy_sweep.run(args, lambda name, extra: _train(name, extra, args, runs_dir, log),
                               log, write)
    results["seconds"] = time.perf_counter() - log.started
    write(swept)
    with open(os.path.join(out, "report.md"), "w") as f:
        f.write(swept["report"])
    print(swept["report"], flush=True)
    log(f"het-tf bench --sweep: wrote {out}/results.json and report.md")
    return 0


def run(args):
    _resolve_sizes(args)
    names = (set(accuracy_sweep.cells()) if args.sweep
             else {c[0] for c in CONFIGURATIONS} | {n for n, _ in STALENESS_SWEEP})
    for name in args.only or ():
        if name not in names:
            raise ValueError(f"--only {name!r}: no such configuration"
                             + (" of the sweep (OPTIMIZER-SETTING, such as adagrad-s100)"
                                if args.sweep else ""))
    if args.link:  # a bad rate is the caller's error, found before any folder is made
        from het_tf.apps.link import parse_rate

        parse_rate(args.link)
    out = os.path.abspath(args.out) if args.out else default_run_dir("bench")
    runs_dir = os.path.join(out, "runs")
    os.makedirs(runs_dir, exist_ok=True)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    started = time.perf_counter()

    def log(message):
        print(f"[{time.perf_counter() - started:6.0f} s] {message}", flush=True)

    log.started = started
    if args.sweep:
        return _run_sweep(args, out, runs_dir, log, {"config": options(args),
                                                     "versions": _versions(),
                                                     "command": " ".join(sys.argv)})
    link = _link(args, log)
    results = {"config": options(args), "versions": _versions(), "command": " ".join(sys.argv),
               "link": link or "loopback", "runs": {}}

    def write_results():  # after every run, so an interrupted benchmark keeps what it measured
        with open(os.path.join(out, "results.json"), "w") as f:
            json.dump(results, f, indent=2)

    log("het-tf bench: miss rate against cache size (LRU, LFU)")
    results["miss_rates"] = miss_rates(args)
    results["unique_id_traffic"] = traffic = unique_id_traffic(args)
    wanted = set(args.only or [])
    plan = [(name, extra) for name, _, extra in CONFIGURATIONS]
    plan += [(name, ["--mode", "ps", "--staleness", s]) for name, s in STALENESS_SWEEP
             if name not in dict(plan)]
    for name, extra in plan:
        if wanted and name not in wanted:
            continue
        if link and "hybrid" in extra:
            # horovodrun's ranks share one namespace here, so their links
            # could not be shaped: a figure for them would be loopback's.
            results["runs"][name] = {"failed": True, "reason": "not run with --link: the "
                                     "Horovod ranks of a local run share one network namespace"}
            continue
        if link and "ps" in extra:
            extra = extra + ["--link", link]
        result = _train(name, extra, args, runs_dir, log)
        if name == "tfra" and result.get("failed"):
            # Under the strategy it fails (see the reason); one process it runs.
            result_local = _train("tfra-local", ["--mode", "local", "--embedding", "tfra"], args,
                                  runs_dir, log)
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

"""`het-tf bench --sweep`: held-out accuracy against the staleness bound, for
each table optimizer, repeated with different seeds, so that a claim of "no
accuracy cost" rests on a mean and a spread rather than on one run of an
asynchronous cluster.

Each (optimizer, setting) trains `repeats` times with seeds 0, 1, ...; the
same seeds serve every setting, so each repeat of s=100 has an s=0 twin on
the same data and the differences are paired.
"""
import math
import statistics

OPTIMIZERS = ("sgd", "adagrad", "adam")
# (name, `het-tf train` arguments); "s0" is the reference of the differences.
# Staleness 0 trains without a cache (the direct path), so it is also the
# cache-off figure; "auto" is the default bound.
SETTINGS = (("s0", ["--staleness", "0"]), ("s10", ["--staleness", "10"]),
            ("s100", ["--staleness", "100"]), ("s10000", ["--staleness", "10000"]),
            ("auto", ["--staleness", "auto"]))
REFERENCE = "s0"
# Samples and held-out samples per run. The reduced size keeps the default
# sweep (45 runs on 2 workers) near half an hour on 2 cores.
SIZES = {"reduced": (200_000, 20_000), "full": (1_000_000, 100_000)}


def cells():
    """The sweep's (optimizer, setting) names, as --only takes them."""
    return [f"{optimizer}-{setting}" for optimizer in OPTIMIZERS for setting, _ in SETTINGS]


def plan(repeats, only=None):
    """(run name, optimizer, setting, seed, `het-tf train` arguments), for
    every cell or only those named."""
    out = []
    for seed in range(repeats):  # repeat-major: an interrupted sweep keeps whole repeats
        for optimizer in OPTIMIZERS:
            for setting, extra in SETTINGS:
                if only and f"{optimizer}-{setting}" not in only:
                    continue
                out.append((f"{optimizer}-{setting}-seed{seed}", optimizer, setting, seed,
                            ["--mode", "ps", "--optimizer", optimizer, "--seed", str(seed),
                             *extra]))
    return out


def _spread(values):
    """mean, sample standard deviation (None for one value), min, max."""
    if not values:
        return None
    return {"mean": statistics.fmean(values),
            "std": statistics.stdev(values) if len(values) > 1 else None,
            "min": min(values), "max": max(values), "n": len(values)}


def summarize(runs, repeats):
    """One row per (optimizer, setting): AUC and logloss over the repeats,
    and their paired differences from s=0."""
    rows = []
    for optimizer in OPTIMIZERS:
        for setting, _ in SETTINGS:
            metrics = {m: [] for m in ("auc", "logloss")}
            deltas = {m: [] for m in ("auc", "logloss")}
            failed, ran = 0, False
            for seed in range(repeats):
                run = runs.get(f"{optimizer}-{setting}-seed{seed}")
                if run is None:
                    continue
                ran = True
                if run.get("failed") or run.get("auc") is None:
                    failed += 1
                    continue
                reference = runs.get(f"{optimizer}-{REFERENCE}-seed{seed}", {})
                for m in metrics:
                    metrics[m].append(run[m])
                    if reference.get(m) is not None and not reference.get("failed"):
                        deltas[m].append(run[m] - reference[m])
            if not ran:  # left out with --only
                continue
            rows.append({"optimizer": optimizer, "setting": setting, "failed": failed,
                         **{m: _spread(v) for m, v in metrics.items()},
                         **{f"{m}_minus_{REFERENCE}": _spread(v) for m, v in deltas.items()}})
    return rows


def _fmt(spread, spec, signed=False):
    if spread is None:
        return "—"
    sign = "+" if signed else ""
    text = format(spread["mean"], sign + spec)
    if spread["std"] is not None and not math.isnan(spread["std"]):
        text += " ± " + format(spread["std"], spec)
    return text


def report(rows, config):
    lines = [f"Held-out AUC and logloss over {config['repeats']} seeds each "
             f"(mean ± sample standard deviation), {config['samples']:,} training samples, "
             f"{config['workers']} workers, 10% LFU cache (s=0 trains without one: it is "
             f"also the cache-off figure); differences are paired with s=0 on the same "
             f"seed.", "",
             "| optimizer | setting | AUC | logloss | AUC − s0 | logloss − s0 | failed |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['optimizer']} | {r['setting']} | {_fmt(r['auc'], '.4f')} | "
                     f"{_fmt(r['logloss'], '.4f')} | {_fmt(r['auc_minus_s0'], '.4f', True)} | "
                     f"{_fmt(r['logloss_minus_s0'], '.4f', True)} | {r['failed']} |")
    return "\n".join(lines) + "\n"


def run(args, train, log, write):
    """Runs the sweep with `train(name, extra)` (bench's runner) and returns
    its results; `write(results)` is called after every run."""
    results = {"sweep": {"repeats": args.repeats, "size": args.sweep_size,
                         "samples": args.samples, "eval_samples": args.eval_samples,
                         "workers": args.workers}, "runs": {}}
    todo = plan(args.repeats, args.only)
    for i, (name, _optimizer, _setting, _seed, extra) in enumerate(todo, 1):
        log(f"het-tf bench --sweep: run {i} of {len(todo)}")
        results["runs"][name] = train(name, extra)
        write(results)
    results["table"] = summarize(results["runs"], args.repeats)
    results["report"] = report(results["table"], results["sweep"])
    return results

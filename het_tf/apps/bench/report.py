"""The benchmark's figures from its runs: the summary table, the targets,
the plots and the Markdown report."""
import math
import os

from het_tf.apps.bench.plan import CACHE_FRACTIONS, CONFIGURATIONS, STALENESS_SWEEP


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

"""The benchmark's figures from its runs: each section's table and targets,
time to accuracy, the plots and the Markdown report."""
import os

from het_tf.apps.bench import precision
from het_tf.apps.bench.plan import CACHE_FRACTIONS, CONFIGURATIONS, STALENESS_SWEEP
from het_tf.apps.bench.precision import fmt, met, ratio


def time_to_target(runs, share):
    """(target AUC, {run: training seconds to reach it, or None}): the target
    is `share` of the best AUC any run's timeline reached."""
    best = max((p["auc"] for run in runs.values() for p in run.get("timeline", ())),
               default=None)
    if best is None:
        return None, {}
    target = share * best
    return target, {name: next((p["seconds"] for p in run["timeline"] if p["auc"] >= target),
                               None)
                    for name, run in runs.items() if run.get("timeline")}


def summarize(section, share):
    """A section's table and targets from its runs."""
    runs, traffic = section["runs"], section["unique_id_traffic"]
    base = runs.get("keras-ps", {}).get("samples_per_second")
    limit = runs.get("limit", {}).get("samples_per_second")
    target_auc, to_target = time_to_target(runs, share)
    rows = []
    for name, label, _ in CONFIGURATIONS:
        if name not in runs:  # left out with --only
            continue
        run = runs[name]
        if run.get("failed"):
            rows.append({"name": name, "label": label, "failed": run["reason"]})
            continue
        counted = run.get("embedding_bytes_per_sample")
        if name in ("keras-ps", "tfra", "limit") and counted is None:
            counted = 0.0 if name == "limit" else traffic["bytes_per_sample"]
        rows.append({"name": name, "label": label, "mode": run.get("config", {}).get("mode"),
                     "samples_per_second": run.get("samples_per_second"),
                     "ratio_to_keras_ps": ratio(run.get("samples_per_second"), base),
                     "ratio_to_limit": ratio(run.get("samples_per_second"), limit),
                     "embedding_bytes_per_sample": counted,
                     "wire_bytes_per_sample": run.get("wire_bytes_per_sample"),
                     "wire_ps_bytes_per_sample": run.get("wire_ps_bytes_per_sample"),
                     "wire_between_workers_bytes_per_sample":
                         run.get("wire_between_workers_bytes_per_sample"),
                     "cache_hit_rate": run.get("cache_hit_rate"),
                     "cache_misses_per_sample": run.get("cache_misses_per_sample"),
                     "auc": run.get("auc"), "logloss": run.get("logloss"),
                     "seconds_to_target": to_target.get(name),
                     "floor": run.get("floor")})
    return rows, _targets(runs, rows, traffic, target_auc, base, limit)


def _targets(runs, rows, traffic, target_auc, base, limit):
    by_name = {r["name"]: r for r in rows if "failed" not in r}

    def get(name, key):
        return by_name.get(name, {}).get(key)

    off, s100 = get("het-nocache", "embedding_bytes_per_sample"), get(
        "het-s100", "embedding_bytes_per_sample")
    s0_auc = runs.get("het-s0", {}).get("auc")

    def auc_minus_s0(name):
        auc = runs.get(name, {}).get("auc")
        return None if s0_auc is None or auc is None else auc - s0_auc

    keras_wire = get("keras-ps", "wire_ps_bytes_per_sample")
    herald_bytes = ratio(get("herald", "embedding_bytes_per_sample"),
                          get("hybrid-s0-check", "embedding_bytes_per_sample"))
    hybrid_wire = get("hybrid-s100", "wire_bytes_per_sample")
    lookahead = get("het-s100-lookahead", "embedding_bytes_per_sample")
    return {
        "traffic_reduction_s100_vs_cache_off": None if not off or s100 is None
        else 1 - s100 / off,
        "traffic_reduction_s100_lookahead_vs_cache_off": None if not off or lookahead is None
        else 1 - lookahead / off,
        "auc_s100_minus_s0": auc_minus_s0("het-s100"),
        "auc_auto_minus_s0": auc_minus_s0("het-auto"),
        "het_s100_ratio_to_limit": ratio(get("het-s100", "samples_per_second"), limit),
        "het_s100_ratio_to_keras_ps": ratio(get("het-s100", "samples_per_second"), base),
        "keras_ps_embedding_time_share": None if not base or not limit else 1 - base / limit,
        "target_auc": target_auc,
        "hybrid_s100_speedup_to_target_vs_nocache": ratio(
            get("hybrid-nocache", "seconds_to_target"), get("hybrid-s100", "seconds_to_target")),
        "hybrid_s100_lookahead_speedup_to_target_vs_nocache": ratio(
            get("hybrid-nocache", "seconds_to_target"),
            get("hybrid-s100-lookahead", "seconds_to_target")),
        "het_s100_speedup_to_target_vs_keras_ps": ratio(
            get("keras-ps", "seconds_to_target"), get("het-s100", "seconds_to_target")),
        # TF's PS path moves its embedding rows and its dense variables through
        # the PS tasks: what the rows' estimate leaves of the wire is dense.
        "keras_ps_dense_share_of_ps_wire": None if not keras_wire
        else 1 - traffic["bytes_per_sample"] / keras_wire,
        "hybrid_s100_allreduce_share_of_wire": None if not hybrid_wire
        else get("hybrid-s100", "wire_between_workers_bytes_per_sample") / hybrid_wire,
        **precision.targets(get),
        # Herald: the allocation against HET's cache at the same
        # capacity and staleness; allocation and plan against HET's s=0.
        "herald_alloc_hit_rate_minus_s100": {
            name: get(name, "cache_hit_rate") - get("hybrid-s100", "cache_hit_rate")
            for name in ("herald-alloc", "herald-alloc-b0")
            if get(name, "cache_hit_rate") is not None
            and get("hybrid-s100", "cache_hit_rate") is not None},
        "herald_bytes_reduction_vs_s0_check": None if herald_bytes is None
        else 1 - herald_bytes,
        "herald_speedup_to_target_vs_s0_check": ratio(
            get("hybrid-s0-check", "seconds_to_target"), get("herald", "seconds_to_target")),
        # The wire to and from the PS tasks against the table shards' own
        # count over the same interval.
        "wire_ps_minus_counted": {
            name: run["wire_ps_bytes_per_sample"] - run["shard_bytes_per_sample"]
            for name, run in runs.items()
            if run.get("wire_ps_bytes_per_sample") is not None
            and run.get("shard_bytes_per_sample") is not None},
    }


def plot(results, out):
    """Writes the figures; returns their file names."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = []

    def save(fig, name):
        fig.tight_layout()
        fig.savefig(os.path.join(out, name), dpi=120)
        plt.close(fig)
        names.append(name)

    for section in results["sections"]:
        rows = [r for r in section["table"] if r.get("samples_per_second")]
        fig, ax = plt.subplots(figsize=(8, 4))
        ax.barh([f"{r['name']} [{r['mode']}]" for r in rows],
                [r["samples_per_second"] for r in rows], color="#4c72b0")
        ax.set_xlabel("samples/s (steady state)")
        ax.set_title(f"Throughput, {_title(section)}, {results['config']['workers']} workers")
        ax.invert_yaxis()
        save(fig, f"throughput-{section['key']}.png")
        timelines = {n: r["timeline"] for n, r in section["runs"].items() if r.get("timeline")}
        if timelines:
            fig, ax = plt.subplots(figsize=(7, 4))
            for name, points in timelines.items():
                ax.plot([p["seconds"] for p in points], [p["auc"] for p in points],
                        marker=".", label=name)
            target = section["targets"].get("target_auc")
            if target:
                ax.axhline(target, color="grey", linestyle=":", label="target")
            ax.set_xlabel("training time (s)")
            ax.set_ylabel("held-out AUC")
            ax.set_title(f"AUC against time, {_title(section)}")
            ax.legend(fontsize=7)
            save(fig, f"auc_time-{section['key']}.png")

    if "miss_rates" in results:  # not measured by the reduced plan
        fig, ax = plt.subplots(figsize=(6, 4))
        for policy, points in results["miss_rates"].items():
            ax.plot([100 * p["fraction"] for p in points],
                    [100 * p["miss_rate"] for p in points], marker="o", label=policy.upper())
        ax.set_xlabel("cache size (% of rows)")
        ax.set_ylabel("miss rate (%)")
        ax.set_title(f"Miss rate on Zipf({results['config']['zipf']}) keys")
        ax.legend()
        save(fig, "miss_rate.png")

    first = results["sections"][0]["runs"] if results["sections"] else {}
    sweep = [(label, first.get(name, {}).get("auc")) for name, label in STALENESS_SWEEP]
    sweep = [(label, auc) for label, auc in sweep if auc is not None]
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(range(len(sweep)), [auc for _, auc in sweep], marker="o")
    ax.set_xticks(range(len(sweep)), [label for label, _ in sweep])
    ax.set_xlabel("staleness bound")
    ax.set_ylabel("held-out AUC")
    ax.set_title("AUC against staleness (10% LFU cache)")
    save(fig, "auc_staleness.png")
    return names


def _title(section):
    return f"{section['model'].upper()}, dim {section['dim']}, {section['link']}"


def _section_report(section, latency):
    link = section["link"] + (f", {latency} one-way delay" if latency else "") \
        if section["link"] != "loopback" else "loopback"
    lines = [f"## {section['model'].upper()}, dim {section['dim']}: {link}", "",
             "| Configuration | samples/s | vs TF PS | vs limit | embedding bytes/sample "
             "(counted) | wire bytes/sample: all, PS, between workers | hit rate | "
             "misses/sample | AUC | logloss | s to target |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in section["table"]:
        if "failed" in r:
            lines.append(f"| {r['name']}: {r['label']} | failed: {r['failed'][:160]} |"
                         " | | | | | | | | |")
            continue
        wire = ("—" if r["wire_bytes_per_sample"] is None else
                f"{r['wire_bytes_per_sample']:,.0f}, {r['wire_ps_bytes_per_sample']:,.0f}, "
                f"{r['wire_between_workers_bytes_per_sample']:,.0f}")
        lines.append(
            f"| {r['name']}: {r['label']} | {fmt(r['samples_per_second'], ',.0f')} | "
            f"{fmt(r['ratio_to_keras_ps'], '.2f')} | {fmt(r['ratio_to_limit'], '.2f')} | "
            f"{fmt(r['embedding_bytes_per_sample'], ',.0f')} | {wire} | "
            f"{fmt(r['cache_hit_rate'], '.3f')} | "
            f"{fmt(r['cache_misses_per_sample'], '.3f')} | {fmt(r['auc'], '.4f')} | "
            f"{fmt(r['logloss'], '.4f')} | {fmt(r['seconds_to_target'], '.0f')} |")
    lines += [""] + _floor_report(section["table"])
    t = section["targets"]
    traffic_target = 0.7 if section["dim"] <= 16 else 0.75
    lines += ["", f"- target AUC (time to accuracy): {fmt(t['target_auc'], '.4f')}",
              "- embedding traffic at 10% cache, staleness 100, below cache off (counted, "
              f"ps mode; target 70% at dim 16, 75% at 128): without the lookahead "
              f"{met(t['traffic_reduction_s100_vs_cache_off'], traffic_target, '.1%')}; with "
              "it " + met(t["traffic_reduction_s100_lookahead_vs_cache_off"], traffic_target,
                           ".1%"),
              f"- AUC at staleness 100 minus staleness 0: {fmt(t['auc_s100_minus_s0'], '+.4f')}"
              f"; at staleness auto: {fmt(t['auc_auto_minus_s0'], '+.4f')} (one run each: "
              "`--sweep` repeats them)",
              f"- HetEmbedding (s=100) samples/s over the no-communication limit: "
              f"{fmt(t['het_s100_ratio_to_limit'], '.2f')}; over TF's PS: "
              f"{fmt(t['het_s100_ratio_to_keras_ps'], '.2f')}",
              f"- time to target, hybrid cache s=100 over hybrid cache off (target "
              f"2x behind 100 Mbit at dim 128): "
              f"{met(t['hybrid_s100_speedup_to_target_vs_nocache'], 2.0, '.2f')}; with the "
              f"lookahead: "
              f"{met(t['hybrid_s100_lookahead_speedup_to_target_vs_nocache'], 2.0, '.2f')}",
              f"- time to target, HetEmbedding s=100 over TF's PS: "
              f"{fmt(t['het_s100_speedup_to_target_vs_keras_ps'], '.2f')}",
              f"- TF's PS: share of step time on embedding traffic (1 - its samples/s over "
              f"the limit's): {fmt(t['keras_ps_embedding_time_share'], '.1%')}",
              f"- TF's PS: dense variables' share of the PS wire (1 - the embedding rows' "
              f"estimate over the wire): {fmt(t['keras_ps_dense_share_of_ps_wire'], '.1%')}",
              f"- hybrid s=100: allreduce share of the wire: "
              f"{fmt(t['hybrid_s100_allreduce_share_of_wire'], '.1%')}"]
    lines += precision.report_lines(t)
    if t["herald_alloc_hit_rate_minus_s100"] or t["herald_bytes_reduction_vs_s0_check"] \
            is not None:
        raised = ", ".join(f"{n} {met(v, 0.001, '+.4f')}"
                           for n, v in t["herald_alloc_hit_rate_minus_s100"].items())
        lines += [
            "- Herald's allocation, hit rate minus HET's cache at s=100 (target: "
            f"a raise, here +0.001 or more): {raised or 'not measured'}",
            "- Herald, embedding bytes below HET's cache at s=0 (target 48%): "
            f"{met(t['herald_bytes_reduction_vs_s0_check'], 0.48, '.1%')}; time to target, "
            f"HET's s=0 over Herald (target: 1 or more): "
            f"{met(t['herald_speedup_to_target_vs_s0_check'], 1.0, '.2f')}"]
    if t["wire_ps_minus_counted"]:
        lines.append("- PS wire minus the table shards' own count over the same interval, "
                     "bytes/sample (dense variables, gRPC framing and headers): " + ", ".join(
                         f"{n} {v:+,.0f}" for n, v in t["wire_ps_minus_counted"].items()))
    tfra = section["runs"].get("tfra", {})
    if tfra.get("under_strategy"):
        lines.append(f"- TFRA under ParameterServerStrategy failed "
                     f"({tfra['under_strategy']['reason'][:300]}); its row is TFRA in one "
                     "process")
    return lines


def _floor_report(rows):
    """Each cached run's training traffic against its Belady floor
    (het_tf/apps/bench/floor.py), or why it has none."""
    lines = ["| Configuration | training embedding bytes/sample | Belady floor | ratio "
             "(target 1.3 or less) | floor misses/sample |", "|---|---|---|---|---|"]
    skipped = []
    for r in rows:
        floor = r.get("floor")
        if not floor:
            continue
        if "not_replayed" in floor:
            if floor["not_replayed"] != "no cache":
                skipped.append(f"{r['name']} ({floor['not_replayed']})")
            continue
        lines.append(f"| {r['name']} | {floor['training_bytes_per_sample']:,.0f} | "
                     f"{floor['floor_bytes_per_sample']:,.0f} | "
                     f"{'met' if floor['ratio'] <= 1.3 else 'missed'}: {floor['ratio']:.2f} | "
                     f"{floor['floor_misses_per_sample']:.3f} |")
    if len(lines) == 2 and not skipped:
        return []
    note = ("The floor replays the ids each worker trained through a cache of the same "
            "capacity that evicts the row used furthest ahead, with the measured protocol's "
            "messages and the run's own refreshes: a reference, not a proof of optimality "
            "(docs/benchmarks.md). Training bytes leave out the evaluations.")
    return lines + [""] + ([f"- not replayed: {', '.join(skipped)}"] if skipped else []) + \
        [f"- {note}"]


def report(results):
    """The results as Markdown, for docs/benchmarks.md."""
    lines = [f"Links between tasks: {results.get('link', 'loopback')}"
             + (f", {results['latency']} one-way delay" if results.get("latency") else "")
             + ".", ""]
    for section in results["sections"]:
        lines += _section_report(section, results.get("latency")) + [""]
    first = results["sections"][0]["runs"] if results["sections"] else {}
    lines += ["| Staleness | AUC |", "|---|---|"]
    for name, label in STALENESS_SWEEP:
        run = first.get(name, {})
        lines.append(f"| {label} | "
                     f"{'failed' if run.get('failed') else fmt(run.get('auc'), '.4f')} |")
    miss = results.get("miss_rates")
    if miss:
        lines += ["", "| Cache size | LRU miss rate | LFU miss rate |", "|---|---|---|"]
    for i, fraction in enumerate(CACHE_FRACTIONS if miss else ()):
        lines.append(f"| {fraction:.0%} | {miss['lru'][i]['miss_rate']:.3f} | "
                     f"{miss['lfu'][i]['miss_rate']:.3f} |")
    return "\n".join(lines) + "\n"

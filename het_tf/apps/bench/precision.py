"""The report's figures of the 16-bit options, each against float32 in the
same run: the dense allreduce in float16 (hybrid mode) and the rows in
bfloat16 (ps and hybrid mode); and how the report writes a figure (a
ratio of two runs, a value, a target met or missed)."""
import math


def ratio(a, b):
    if not a or not b or any(isinstance(v, float) and math.isnan(v) for v in (a, b)):
        return None
    return a / b


def fmt(value, spec):
    return "—" if value is None else format(value, spec)


def met(value, threshold, spec, below=False):
    """A target's measured value, and whether it met `threshold` (at least,
    or with `below` at most)."""
    if value is None:
        return "not measured"
    met = value <= threshold if below else value >= threshold
    return f"{format(value, spec)} ({'met' if met else 'missed'})"


def targets(get):
    """The figures, from `get(run name, key)` of the section's runs."""
    def versus(key, run, baseline):
        return ratio(get(run, key), get(baseline, key))

    def per_mode(key, option):  # ps mode's runs are het-*, hybrid mode's hybrid-*
        return {mode: versus(key, f"{prefix}-s100-lookahead-{option}",
                             f"{prefix}-s100-lookahead")
                for mode, prefix in (("ps", "het"), ("hybrid", "hybrid"))}

    return {
        # The dense allreduce in float16 against float32, cached, and its
        # time to target against float32's cache-off run.
        "hybrid_fp16_allreduce_bytes_ratio": versus(
            "wire_between_workers_bytes_per_sample", "hybrid-s100-lookahead-fp16",
            "hybrid-s100-lookahead"),
        "hybrid_fp16_speedup_cached": versus(
            "samples_per_second", "hybrid-s100-lookahead-fp16", "hybrid-s100-lookahead"),
        "hybrid_fp16_lookahead_speedup_to_target_vs_nocache": versus(
            "seconds_to_target", "hybrid-nocache", "hybrid-s100-lookahead-fp16"),
        # Rows in bfloat16 against float32, cached with the lookahead: the
        # PS task's bytes (its interface's counters) and the speed; with the
        # float16 allreduce too, time to target against float32 cache off.
        "bf16_ps_bytes_ratio": per_mode("wire_ps_bytes_per_sample", "bf16"),
        "bf16_speedup_cached": per_mode("samples_per_second", "bf16"),
        "bf16_fp16_speedup_to_target_vs_nocache": versus(
            "seconds_to_target", "hybrid-nocache", "hybrid-s100-lookahead-bf16-fp16"),
        "bf16_fp16_speedup_vs_keras_ps": versus(
            "samples_per_second", "hybrid-s100-lookahead-bf16-fp16", "keras-ps"),
    }


def report_lines(t):
    """The report's lines of those figures (none where a run is missing)."""
    lines = []
    if t["hybrid_fp16_allreduce_bytes_ratio"] is not None:
        lines.append(
            "- dense allreduce in float16 (hybrid, cached, lookahead) over float32: allreduce "
            f"bytes {met(t['hybrid_fp16_allreduce_bytes_ratio'], 0.55, '.2f', below=True)}, "
            f"samples/s {met(t['hybrid_fp16_speedup_cached'], 1.4, '.2f')}; time to target, "
            "float32 cache off over it: "
            f"{met(t['hybrid_fp16_lookahead_speedup_to_target_vs_nocache'], 2.0, '.2f')}")
    if any(v is not None for v in t["bf16_ps_bytes_ratio"].values()):
        ratios = t["bf16_ps_bytes_ratio"]
        lines.append(
            "- rows in bfloat16 over float32 (cached, lookahead): PS bytes a sample, hybrid "
            f"{met(ratios['hybrid'], 0.6, '.2f', below=True)}, ps "
            f"{fmt(ratios['ps'], '.2f')}; samples/s hybrid "
            f"{fmt(t['bf16_speedup_cached']['hybrid'], '.2f')}, ps "
            f"{fmt(t['bf16_speedup_cached']['ps'], '.2f')}; with the float16 allreduce, "
            "time to target, float32 cache off over it: "
            f"{met(t['bf16_fp16_speedup_to_target_vs_nocache'], 3.0, '.2f')}, samples/s over "
            f"TF's PS: {met(t['bf16_fp16_speedup_vs_keras_ps'], 15.0, '.1f')}")
    return lines

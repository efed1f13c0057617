"""Runs one `het-tf train` process of a benchmark and reads its figures, or
the reason it failed, from its run folder and log."""
import json
import os
import re
import subprocess
import sys
import time

from het_tf.apps import link
from het_tf.apps.bench.plan import common_args
from het_tf.apps.train.figures import versions as train_versions


def versions():
    versions = train_versions()
    try:
        import importlib.metadata as metadata

        versions["tensorflow-recommenders-addons"] = metadata.version(
            "tensorflow-recommenders-addons")
    except Exception:  # not installed: the TFRA configuration records its failure
        pass
    return versions


def _failure_reason(text):
    """The most telling error line of a failed run's output."""
    detail = re.search(r"\(0\) ([A-Z_]+: [^\\\n]+)", text)  # a root error inside gRPC text
    if detail:
        return detail.group(1).strip()[:400]
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    for marker in ("Error:", "Error(", "error:", "Segmentation fault", "Fatal"):
        for line in reversed(lines):
            if marker in line and "Ignoring an error" not in line:
                return line[-400:]
    return (lines[-1] if lines else "no output")[-400:]


def train(name, extra, args, runs_dir, log, section):
    run_dir = os.path.join(runs_dir, name)
    argv = [sys.executable, "-m", "het_tf.apps.cli", "train", *common_args(args, section),
            *extra, "--run-dir", run_dir]
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


def link_rate(args, log, default=None):
    """The rate to shape the clusters' links to, or None for loopback when
    this machine cannot make links. A latency it cannot emulate is an error:
    the benchmark asked for would not be the one run."""
    rate = args.link or default
    if not rate:
        return None
    try:
        link.EmulatedLinks(rate, args.latency).close()  # what every run will need
    except link.LinkUnavailable as e:
        if args.latency:
            raise ValueError(str(e)) from None
        log(f"het-tf bench: {e}; running on loopback")
        return None
    return rate

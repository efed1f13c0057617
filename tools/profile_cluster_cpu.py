"""Where a loopback cluster's CPU goes while it trains: each task's share of
a core (chief, PS task, each worker) and CPU microseconds a training
sample, for the bench's cached and cache-off configurations on the bench's
WDL model and data (`het-tf train --mode ps`, 2 workers, 1 PS task).

Every second the CPU time of each task is read from /proc (a task's role
from its TF_CONFIG; "launcher" is the process that started them). The
steady state is the middle half of the seconds in which both workers ran
busy; the samples a second come from the run's own report. With perf
installed (Debian's linux-perf), each worker and PS task is also sampled
for --perf-seconds in the steady state, and the shared objects and the
het_tf functions that took the most of its CPU are printed.

    .venv/bin/python tools/profile_cluster_cpu.py [--dim 16] [--samples 1500000]
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

CONFIGURATIONS = {
    "het-nocache": ["--cache-capacity", "0"],
    "het-s100-lookahead": ["--staleness", "100", "--lookahead"],
    "het-s100": ["--staleness", "100", "--no-lookahead"],
    "keras-ps": ["--embedding", "keras"],
}
TICKS = os.sysconf("SC_CLK_TCK")


def role(pid):
    with open(f"/proc/{pid}/environ", "rb") as f:
        env = dict(item.split(b"=", 1) for item in f.read().split(b"\0") if b"=" in item)
    if b"TF_CONFIG" not in env:
        return "launcher"
    task = json.loads(env[b"TF_CONFIG"])["task"]
    return f"{task['type']}:{task['index']}"


def tasks():
    """pid -> (role, CPU seconds) of every het-tf process."""
    found = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as f:
                if b"het_tf.apps.cli" not in f.read():
                    continue
            with open(f"/proc/{name}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            found[int(name)] = (role(name), (int(fields[11]) + int(fields[12])) / TICKS)
        except (OSError, ValueError, KeyError):
            continue  # gone meanwhile
    return found


def perf_profile(pids, seconds, tmp):
    """Starts perf on each (role, pid); returns the runs to wait for."""
    runs = []
    for name, pid in pids:
        out = os.path.join(tmp, f"{name}.data")
        runs.append((name, out, subprocess.Popen(
            ["perf", "record", "-F", "499", "-o", out, "-p", str(pid), "--", "sleep",
             str(seconds)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)))
    return runs


def perf_summary(out, top=8):
    def report(*sort):
        text = subprocess.run(["perf", "report", "-i", out, "--stdio", "--no-children",
                               "-g", "none", *sort], capture_output=True, text=True).stdout
        return [line.split(None, 1) for line in text.splitlines()
                if line.strip() and not line.startswith("#")]
    dsos = ", ".join(f"{name.strip()} {share}" for share, name in report("--sort", "dso")[:5])
    het = [(share, re.sub(r"^\[\.\]\s+", "", name.strip()))
           for share, name in report("--sort", "dso,sym") if "_het_ops.so" in name]
    funcs = ", ".join(f"{name.split('_het_ops.so', 1)[1].strip()[4:]} {share}"
                      for share, name in het[:top])
    return f"{dsos}\n      het_tf: {funcs}"


def run(config, args, tmp):
    argv = [sys.executable, "-m", "het_tf.apps.cli", "train", "--mode", "ps", "--model", "wdl",
            "--dim", str(args.dim), "--samples", str(args.samples), "--eval-samples", "2048",
            "--timeline-samples", "0", "--no-save", "--run-dir", os.path.join(tmp, config),
            *CONFIGURATIONS[config]]
    log = os.path.join(tmp, f"{config}.log")
    with open(log, "w") as out:
        process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
    seconds = []  # per second: role -> share of a core
    last = tasks()
    profiled = None
    while process.poll() is None:
        time.sleep(1.0)
        now = tasks()
        share = {}
        for pid, (name, cpu) in now.items():
            share[name] = share.get(name, 0.0) + cpu - last.get(pid, (name, cpu))[1]
        last = now
        seconds.append(share)
        busy = sum(1 for s in seconds if min(s.get("worker:0", 0), s.get("worker:1", 0)) > 0.3)
        if profiled is None and busy == 3 and args.perf_seconds and shutil.which("perf"):
            pids = [(name, pid) for pid, (name, _) in now.items() if name in ("ps:0", "worker:0")]
            profiled = perf_profile(pids, args.perf_seconds, tmp)
    if process.returncode != 0:
        sys.exit(f"{config}: het-tf train exited with {process.returncode}; see {log}")
    with open(log) as f:
        rate = float(re.findall(r"([\d,]+) samples/s", f.read())[-1].replace(",", ""))
    busy = [s for s in seconds if min(s.get("worker:0", 0), s.get("worker:1", 0)) > 0.3]
    steady = busy[len(busy) // 4:len(busy) - len(busy) // 4] or busy
    roles = sorted({name for s in steady for name in s})
    mean = {name: sum(s.get(name, 0.0) for s in steady) / len(steady) for name in roles}
    total = sum(mean.values())
    cores = ", ".join(f"{n} {v:.2f}" for n, v in mean.items())
    micros = ", ".join(f"{n} {1e6 * v / rate:.1f}" for n, v in mean.items())
    print(f"{config}, dim {args.dim}: {rate:,.0f} samples/s; {total:.2f} cores busy ({cores}); "
          f"CPU µs a sample {1e6 * total / rate:.1f} ({micros})", flush=True)
    for name, out, perf in profiled or []:
        perf.wait()
        print(f"  perf, {name}: {perf_summary(out)}", flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dim", type=int, default=16)
    p.add_argument("--samples", type=int, default=1_500_000)
    p.add_argument("--perf-seconds", type=int, default=10, help="0: no perf profile")
    p.add_argument("--only", nargs="+", default=["het-nocache", "het-s100-lookahead"],
                   choices=sorted(CONFIGURATIONS))
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for config in args.only:
            run(config, args, tmp)


if __name__ == "__main__":
    main()

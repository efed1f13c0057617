"""Where a loopback cluster's CPU goes while it trains: each task's share of
a core (chief, PS task, each worker) and CPU microseconds a training
sample, for the bench's cached and cache-off configurations on the bench's
WDL model and data (`het-tf train --mode ps`, 2 workers, 1 PS task).

Every second the CPU time of each process the run started is read from
/proc (a task's role from its TF_CONFIG; "launcher" is `het-tf train`
itself). The steady state is the middle half of the seconds in which both
workers used half a core or more; CPU a sample divides its mean by the
samples a second of the run's own report. With perf installed (Debian's
linux-perf), the first worker and the PS task are also sampled for
--perf-seconds from the fifth busy second in a row, and the shared objects
and het_tf functions that took the most of their CPU are printed; perf's
own load lowers that run's speed (--perf-seconds 0 leaves it out).

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


def tasks(root):
    """pid -> (role, CPU seconds) of `root` and every process below it."""
    stats = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            stats[int(name)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / TICKS)
        except (OSError, ValueError, IndexError):
            continue  # gone meanwhile
    found = {}
    for pid, (_, cpu) in stats.items():
        up = pid
        while up not in (root, 0, 1) and up in stats:
            up = stats[up][0]
        if up != root:
            continue
        try:
            found[pid] = (role(pid), cpu)
        except (OSError, ValueError, KeyError):
            continue
    return found


def perf_profile(pids, seconds, tmp):
    """Starts perf on each (role, pid); returns the runs to wait for."""
    runs = []
    for name, pid in pids:
        out = os.path.join(tmp, f"{name}.data")
        runs.append((name, out, subprocess.Popen(
            ["perf", "record", "-F", "499", "-o", out, "-p", str(pid), "--", "sleep",
             str(seconds)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)))
    return runs


def perf_summary(out, top=8):
    def report(*sort):
        text = subprocess.run(["perf", "report", "-i", out, "--stdio", "--no-children",
                               "-g", "none", *sort], capture_output=True, text=True).stdout
        return [line.split(None, 1) for line in text.splitlines()
                if line.strip() and not line.startswith("#")]
    dsos = ", ".join(f"{name.strip()} {share}" for share, name in report("--sort", "dso")[:5])
    # Lines are "share  _het_ops.so  [.] symbol".
    het = [(share, name.split("[.]", 1)[-1].strip())
           for share, name in report("--sort", "dso,sym") if "_het_ops.so" in name]
    funcs = ", ".join(f"{name} {share}" for share, name in het[:top])
    return f"{dsos}\n      het_tf: {funcs}"


def busy(share):
    """Both workers used at least half a core that second."""
    return min(share.get("worker:0", 0.0), share.get("worker:1", 0.0)) > 0.5


def run(config, args, tmp):
    argv = [sys.executable, "-m", "het_tf.apps.cli", "train", "--mode", "ps", "--model", "wdl",
            "--dim", str(args.dim), "--samples", str(args.samples), "--eval-samples", "2048",
            "--timeline-samples", "0", "--no-save", "--run-dir", os.path.join(tmp, config),
            *CONFIGURATIONS[config]]
    log = os.path.join(tmp, f"{config}.log")
    with open(log, "w") as out:
        process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
    seconds = []  # per second: role -> share of a core
    last, then = tasks(process.pid), time.monotonic()
    profiled = None
    streak = 0
    while process.poll() is None:
        time.sleep(1.0)
        now, elapsed = tasks(process.pid), time.monotonic() - then
        then += elapsed
        share = {}
        for pid, (name, cpu) in now.items():
            share[name] = share.get(name, 0.0) + (cpu - last.get(pid, (name, cpu))[1]) / elapsed
        last = now
        seconds.append(share)
        # Five busy seconds in a row: training, not the workers' start.
        streak = streak + 1 if busy(share) else 0
        if profiled is None and streak == 5 and args.perf_seconds and shutil.which("perf"):
            # A task's own process, not a helper it started with its environment.
            main = {}
            for pid, (name, cpu) in now.items():
                if name in ("ps:0", "worker:0") and cpu > main.get(name, (0, -1.0))[1]:
                    main[name] = (pid, cpu)
            profiled = perf_profile([(n, pid) for n, (pid, _) in main.items()],
                                    args.perf_seconds, tmp)
    if process.returncode != 0:
        sys.exit(f"{config}: het-tf train exited with {process.returncode}; see {log}")
    with open(log) as f:
        rate = float(re.findall(r"([\d,]+) samples/s", f.read())[-1].replace(",", ""))
    trained = [s for s in seconds if busy(s)]
    steady = trained[len(trained) // 4:len(trained) - len(trained) // 4] or trained
    roles = sorted({name for s in steady for name in s})
    mean = {name: sum(s.get(name, 0.0) for s in steady) / len(steady) for name in roles}
    total = sum(mean.values())
    cores = ", ".join(f"{n} {v:.2f}" for n, v in mean.items())
    micros = ", ".join(f"{n} {1e6 * v / rate:.1f}" for n, v in mean.items())
    print(f"{config}, dim {args.dim}: {rate:,.0f} samples/s; {total:.2f} cores busy ({cores}); "
          f"CPU µs a sample {1e6 * total / rate:.1f} ({micros})", flush=True)
    for name, out, perf in profiled or []:
        _, err = perf.communicate()
        if perf.returncode != 0:
            sys.exit(f"perf record of {name} failed: {err.decode().strip()}")
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

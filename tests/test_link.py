"""Rate-limited links between the tasks of a local cluster (`--link`)."""
import glob
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from het_tf.apps import link
from het_tf.apps.launch import LocalCluster

SENDER = r"""
import socket, sys, time
host, port, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
deadline = time.monotonic() + 30
while True:
    try:
        s = socket.create_connection((host, port), timeout=5)
        break
    except OSError:
        if time.monotonic() > deadline:
            raise
        time.sleep(0.1)
started = time.monotonic()
s.sendall(b"x" * size)
s.shutdown(socket.SHUT_WR)
s.recv(1)  # the receiver's ack: every byte crossed the link
print(time.monotonic() - started)
"""

RECEIVER = r"""
import socket, sys
server = socket.socket()
server.bind(("0.0.0.0", int(sys.argv[1])))
server.listen(1)
conn, _ = server.accept()
while conn.recv(1 << 16):
    pass
conn.sendall(b"k")
"""


HET_TF = [sys.executable, "-m", "het_tf.apps.cli"]


def namespaces():
    return subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout


def link_state():
    """What links leave on the machine: namespaces, host-side veths and
    bridges, and /etc/netns entries."""
    devices = subprocess.run(["ip", "-o", "link", "show"], capture_output=True,
                             text=True).stdout
    return (set(namespaces().split()),
            {line.split(":")[1].strip().split("@")[0] for line in devices.splitlines()},
            set(glob.glob("/etc/netns/*")))


def netem_available():
    """Whether this kernel has netem, asked of a throwaway namespace's loopback."""
    name = f"hetnetem{os.getpid()}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        return subprocess.run(["ip", "netns", "exec", name, "tc", "qdisc", "add", "dev", "lo",
                               "root", "netem", "delay", "1ms"],
                              capture_output=True).returncode == 0
    finally:
        subprocess.run(["ip", "netns", "del", name])


@pytest.mark.parametrize("rate, message", [("fast", "give a rate as tc writes it"),
                                           ("100", "give a rate as tc writes it"),
                                           ("10kbit", "below 100kbit")])
def test_bad_rates_are_refused(rate, message):
    with pytest.raises(ValueError, match=message):
        link.parse_rate(rate)


def test_without_root_it_says_so(monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(link.LinkUnavailable, match="needs root"):
        link.EmulatedLinks("100mbit")


def test_a_link_carries_bytes_no_faster_than_its_rate_and_is_removed_after():
    """2 MB over an 8mbit link takes at least about 2 s (the token bucket's
    burst is 32 KiB); on loopback it takes milliseconds. Only a lower bound
    is asserted: a slow machine cannot make it fail."""
    links = link.EmulatedLinks("8mbit")
    try:
        links.add("a")
        address = links.add("b")
        receiver = subprocess.Popen(links.command("b", [sys.executable, "-c", RECEIVER, "5000"]))
        try:
            sent = subprocess.run(
                links.command("a", [sys.executable, "-c", SENDER, address, "5000",
                                    str(2_000_000)]),
                capture_output=True, text=True, timeout=120)
            assert sent.returncode == 0, sent.stderr
            seconds = float(sent.stdout)
        finally:
            receiver.kill()
            receiver.wait()
        assert seconds > 0.8 * (2_000_000 - 32 * 1024) * 8 / 8e6, seconds
    finally:
        links.close()
    assert links._prefix not in namespaces()


def test_a_cluster_behind_links_serves_and_leaves_nothing_behind():
    links = link.EmulatedLinks("1gbit")
    cluster = LocalCluster(1, 1, link=links)
    try:
        cluster.start()  # every task's port answers across its link
        assert all(address.startswith("10.231.") for job in cluster.cluster.values()
                   for address in job)
    finally:
        cluster.close()
    assert links._prefix not in namespaces()
    for process in cluster.tasks.values():
        assert process.poll() is not None


def test_train_refuses_a_link_in_local_mode(tmp_path):
    done = subprocess.run(HET_TF + ["train", "--mode", "local", "--link", "100mbit", "--samples",
                                    "2048", "--run-dir", str(tmp_path / "run")],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 2
    assert "--link shapes the local cluster that ps or hybrid mode starts" in done.stderr


@pytest.mark.parametrize("latency, message", [("100", "give a delay with a unit"),
                                              ("fast", "give a delay with a unit"),
                                              ("2s", "above 1s")])
def test_bad_latencies_are_refused(latency, message):
    with pytest.raises(ValueError, match=message):
        link.parse_latency(latency)


def test_a_latency_needs_a_link_and_the_kernels_netem():
    done = subprocess.run(HET_TF + ["launch", "--latency", "100us", "--", "true"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "give --link RATE too" in done.stderr
    before = link_state()
    done = subprocess.run(HET_TF + ["launch", "--link", "100mbit", "--latency", "1ms", "--",
                                    sys.executable, "-c", "print('ran')"],
                          capture_output=True, text=True, timeout=300)
    if netem_available():
        assert done.returncode == 0 and "1ms one-way delay" in done.stdout, done.stderr[-2000:]
    else:  # no loopback stand-in: the run asked for would not be the one run
        assert done.returncode == 2 and "netem" in done.stderr and "ran" not in done.stdout
    assert link_state() == before


# Behind a link, float32 rows add nothing bfloat16's do not check:
# tests/test_bench.py checks float32's wire against the shards' count.
@pytest.mark.parametrize("wire", [pytest.param("float32", marks=pytest.mark.long), "bfloat16"])
def test_hybrid_training_behind_links_is_shaped_counted_and_cleaned_up(tmp_path, wire):
    """Two Horovod ranks and a PS task, each in a namespace of its own
    behind a 4mbit link: no task's interface moves bytes faster than the
    rate, the allreduce crosses the links, and the wire carries at least
    what the table shards counted, with the rows in float32 or in bfloat16
    (whose messages the shards count as they are sent). Each rank moves
    about 14 MB each way (8 steps); on loopback its training takes about a
    second, so unshaped ranks would fail the link's ceiling of 0.5 MB/s
    many times over."""
    before = link_state()
    run_dir = tmp_path / "run"
    done = subprocess.run(HET_TF + ["train", "--mode", "hybrid", "--ps", "1", "--workers", "2",
                                    "--link", "4mbit", "--samples", "8192", "--batch-size",
                                    "512", "--eval-samples", "1024", "--no-save", "--run-dir",
                                    str(run_dir), "--wire-dtype", wire],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    metrics = json.loads((run_dir / "metrics.json").read_text())
    tasks = metrics["wire_tasks"]
    assert set(tasks) == {"ps:0", "rank:0", "rank:1"}
    ceiling = 4e6 / 8 * metrics["wire_seconds"] * 1.02 + 64 * 1024  # rate, and the tbf burst
    for name, moved in tasks.items():
        assert 0 < moved["sent"] <= ceiling and 0 < moved["received"] <= ceiling, (name, moved)
    assert metrics["wire_between_workers_bytes_per_sample"] > 0  # the allreduce, on the links
    assert metrics["wire_ps_bytes_per_sample"] > metrics["shard_bytes_per_sample"] > 0
    assert link_state() == before


RANK = r"""
import os, sys, time
rank = int(os.environ["HOROVOD_RANK"])
print(f"rank {rank} up", flush=True)
if rank == 1 and sys.argv[1] == "fail":
    sys.exit(3)
time.sleep(600)
"""


@pytest.mark.parametrize("how", ["fail", "interrupt"])
def test_ranks_behind_links_leave_nothing_behind(how):
    """A rank that fails ends the job with its code; Ctrl-C ends it with
    130. Either way the ranks, the PS task, the namespaces and the links go."""
    before = link_state()
    marker = f"het-tf-rank-probe-{os.getpid()}-{how}"
    launch = subprocess.Popen(HET_TF + ["launch", "--hybrid", "--link", "100mbit", "--",
                                        sys.executable, "-c", f"# {marker}\n{RANK}", how],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if how == "interrupt":
        seen = set()
        deadline = time.monotonic() + 120
        while len(seen) < 2 and time.monotonic() < deadline:
            line = launch.stdout.readline()
            seen |= {r for r in (0, 1) if f"rank {r} up" in line}
        assert seen == {0, 1}
        launch.send_signal(signal.SIGINT)
    output, _ = launch.communicate(timeout=120)
    assert launch.returncode == (3 if how == "fail" else 130), output[-3000:]
    assert link_state() == before
    leftover = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True)
    assert leftover.stdout == ""

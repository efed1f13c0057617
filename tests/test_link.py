"""Rate-limited links between the tasks of a local cluster (`--link`)."""
import os
import subprocess
import sys

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


def namespaces():
    return subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout


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


def test_train_refuses_a_link_outside_ps_mode(tmp_path):
    done = subprocess.run([sys.executable, "-m", "het_tf.apps.cli", "train", "--mode", "local",
                           "--link", "100mbit", "--samples", "2048", "--run-dir",
                           str(tmp_path / "run")], capture_output=True, text=True, timeout=300)
    assert done.returncode != 0
    assert "--link shapes the local cluster that ps mode starts" in done.stderr

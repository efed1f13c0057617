"""Rate-limited links between the tasks of a local cluster.

Each task runs in a network namespace of its own, joined to a bridge in the
host's namespace by a veth pair whose two ends are shaped with tc's token
bucket filter to the same rate, so every byte a task sends or receives
crosses a link of that rate, as between hosts on a switch. Needs root and
iproute2's `ip` and `tc`.
"""
import os
import re
import shutil
import subprocess

_RATE = re.compile(r"^(\d+(?:\.\d+)?)(bit|kbit|mbit|gbit)$")
_UNITS = {"bit": 1, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9}
# Each namespace has its own port space, so every task can use this one.
TASK_PORT = 2222


class LinkUnavailable(RuntimeError):
    """This machine or user cannot make namespaces and shaped links."""


def parse_rate(rate):
    """Bits per second of a tc rate such as 100mbit or 1gbit."""
    match = _RATE.match(str(rate).strip().lower())
    if not match:
        raise ValueError(f"--link {rate!r}: give a rate as tc writes it, for example 100mbit "
                         "or 1gbit (units bit, kbit, mbit, gbit)")
    bits = float(match.group(1)) * _UNITS[match.group(2)]
    if bits < 1e5:
        raise ValueError(f"--link {rate!r}: rates below 100kbit would stall the cluster's "
                         "heartbeats")
    return bits


def check_available():
    """Raises LinkUnavailable with the reason when links cannot be made."""
    if os.geteuid() != 0:
        raise LinkUnavailable("--link needs root (it creates network namespaces)")
    missing = [tool for tool in ("ip", "tc") if shutil.which(tool) is None]
    if missing:
        raise LinkUnavailable(f"--link needs iproute2 ({', '.join(missing)} not found)")


class EmulatedLinks:
    """Namespaces, veths and shaping for named tasks; close() removes them."""

    def __init__(self, rate):
        self.rate = str(rate).strip().lower()
        bits = parse_rate(self.rate)
        check_available()
        # A burst of 10 ms of traffic (at least 32 KiB) keeps tbf accurate at
        # the kernel's timer granularity.
        self._burst = max(32 * 1024, int(bits / 8 / 100))
        self._tag = os.getpid() % 100000
        self._bridge = f"hb{self._tag}"
        self._subnet = f"10.231.{self._tag % 250}"
        self._prefix = f"het{self._tag}"
        self._tasks = {}  # name -> (namespace, host-side veth, address)
        try:
            self._sh("ip", "link", "add", self._bridge, "type", "bridge")
            self._sh("ip", "addr", "add", f"{self._subnet}.1/24", "dev", self._bridge)
            self._sh("ip", "link", "set", self._bridge, "up")
        except Exception:
            self.close()
            raise

    def _sh(self, *argv):
        done = subprocess.run(argv, capture_output=True, text=True)
        if done.returncode != 0:
            raise LinkUnavailable(f"`{' '.join(argv)}` failed: {done.stderr.strip()}")

    def _shape(self, device, namespace=None):
        run = ("ip", "netns", "exec", namespace) if namespace else ()
        self._sh(*run, "tc", "qdisc", "add", "dev", device, "root", "tbf", "rate", self.rate,
                 "burst", str(self._burst), "latency", "100ms")

    def add(self, name):
        """Puts task `name` in a namespace of its own; returns its address."""
        index = len(self._tasks)
        namespace = f"{self._prefix}-{index}"
        host_end, task_end = f"hv{self._tag}-{index}", f"ht{index}"
        address = f"{self._subnet}.{index + 2}"
        self._tasks[name] = (namespace, host_end, address)
        in_ns = ("ip", "netns", "exec", namespace)
        try:
            self._sh("ip", "netns", "add", namespace)
            self._sh("ip", "link", "add", host_end, "type", "veth", "peer", "name", task_end)
            self._sh("ip", "link", "set", task_end, "netns", namespace)
            self._sh("ip", "link", "set", host_end, "master", self._bridge)
            self._sh("ip", "link", "set", host_end, "up")
            self._sh(*in_ns, "ip", "addr", "add", f"{address}/24", "dev", task_end)
            self._sh(*in_ns, "ip", "link", "set", task_end, "up")
            self._sh(*in_ns, "ip", "link", "set", "lo", "up")
            self._shape(host_end)
            self._shape(task_end, namespace)
        except Exception:
            self.close()
            raise
        return address

    def command(self, name, argv):
        """argv run inside task `name`'s namespace (same pid: exec)."""
        return ["ip", "netns", "exec", self._tasks[name][0], *argv]

    def close(self):
        for namespace, host_end, _ in self._tasks.values():
            subprocess.run(["ip", "link", "del", host_end], capture_output=True)
            subprocess.run(["ip", "netns", "del", namespace], capture_output=True)
        self._tasks = {}
        subprocess.run(["ip", "link", "del", self._bridge], capture_output=True)

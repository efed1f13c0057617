"""Rate-limited links between the tasks of a local cluster.

Each task runs in a network namespace of its own, joined to a bridge in the
host's namespace by a veth pair whose two ends are shaped with tc's token
bucket filter to the same rate, so every byte a task sends or receives
crosses a link of that rate, as between hosts on a switch. With a latency,
netem holds each packet a task sends for that long before the rate limit
(one way: a round trip between two tasks costs twice it). Needs root and
iproute2's `ip` and `tc`; a latency also needs the kernel's netem qdisc.
"""
import json
import os
import re
import shutil
import socket
import subprocess

_RATE = re.compile(r"^(\d+(?:\.\d+)?)(bit|kbit|mbit|gbit)$")
_UNITS = {"bit": 1, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9}
_LATENCY = re.compile(r"^(\d+(?:\.\d+)?)(us|ms|s)$")
_SECONDS = {"us": 1e-6, "ms": 1e-3, "s": 1.0}
# Where a cluster's processes learn each task's interface, to read its
# byte counters: JSON {task: [namespace, interface]}.
INTERFACES_ENV = "HET_TF_LINK_INTERFACES"
# Each namespace has its own port space, so every task can use this one.
TASK_PORT = 2222


class LinkUnavailable(RuntimeError):
    """This machine or user cannot make namespaces and shaped links."""


def _quantity(value, option, pattern, units, hint, allowed, limit):
    """A number with a unit, in the unit of 1; refused with `hint` when
    malformed, with `limit` when not allowed(number)."""
    match = pattern.match(str(value).strip().lower())
    if not match:
        raise ValueError(f"{option} {value!r}: {hint}")
    number = float(match.group(1)) * units[match.group(2)]
    if not allowed(number):
        raise ValueError(f"{option} {value!r}: {limit} would stall the cluster's heartbeats")
    return number


def parse_rate(rate):
    """Bits per second of a tc rate such as 100mbit or 1gbit."""
    return _quantity(rate, "--link", _RATE, _UNITS, "give a rate as tc writes it, for example "
                     "100mbit or 1gbit (units bit, kbit, mbit, gbit)", lambda bits: bits >= 1e5,
                     "rates below 100kbit")


def parse_latency(latency):
    """Seconds of a one-way delay such as 100us or 1ms."""
    return _quantity(latency, "--latency", _LATENCY, _SECONDS, "give a delay with a unit, for "
                     "example 100us or 1ms (units us, ms, s)", lambda seconds: seconds <= 1,
                     "delays above 1s")


def check_available():
    """Raises LinkUnavailable with the reason when links cannot be made."""
    if os.geteuid() != 0:
        raise LinkUnavailable("--link needs root (it creates network namespaces)")
    missing = [tool for tool in ("ip", "tc") if shutil.which(tool) is None]
    if missing:
        raise LinkUnavailable(f"--link needs iproute2 ({', '.join(missing)} not found)")


def interface_bytes(namespace, interface):
    """(bytes sent, bytes received) so far by `interface` in `namespace`,
    as the kernel counts them: every frame, headers included."""
    done = subprocess.run(["ip", "-n", namespace, "-j", "-s", "link", "show", "dev", interface],
                          capture_output=True, text=True, check=True)
    stats = json.loads(done.stdout)[0]["stats64"]
    return stats["tx"]["bytes"], stats["rx"]["bytes"]


def read_counters(interfaces=None):
    """{task: (sent, received)} for the tasks named in INTERFACES_ENV (or in
    `interfaces`); {} outside a cluster behind links."""
    if interfaces is None:
        interfaces = json.loads(os.environ.get(INTERFACES_ENV) or "{}")
    return {task: interface_bytes(ns, dev) for task, (ns, dev) in interfaces.items()}


class EmulatedLinks:
    """Namespaces, veths and shaping for named tasks; close() removes them."""

    def __init__(self, rate, latency=None):
        self.rate = str(rate).strip().lower()
        bits = parse_rate(self.rate)
        self.latency = None if latency is None else str(latency).strip().lower()
        if self.latency is not None:
            parse_latency(self.latency)
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
            if self.latency is not None:
                self._check_netem()
        except Exception:
            self.close()
            raise

    def _sh(self, *argv):
        done = subprocess.run(argv, capture_output=True, text=True)
        if done.returncode != 0:
            raise LinkUnavailable(f"`{' '.join(argv)}` failed: {done.stderr.strip()}")

    def _check_netem(self):
        """Fails now, not at the first task, when the kernel has no netem."""
        try:
            self._sh("tc", "qdisc", "add", "dev", self._bridge, "root", "netem", "delay",
                     self.latency)
        except LinkUnavailable as e:
            raise LinkUnavailable("--latency needs the kernel's netem qdisc "
                                  "(CONFIG_NET_SCH_NETEM), which this kernel does not have: "
                                  f"{e}") from None
        self._sh("tc", "qdisc", "del", "dev", self._bridge, "root")

    def _shape(self, device, namespace=None):
        run = ("ip", "netns", "exec", namespace) if namespace else ()
        tbf = ("tbf", "rate", self.rate, "burst", str(self._burst), "latency", "100ms")
        if self.latency is None or namespace is None:
            self._sh(*run, "tc", "qdisc", "add", "dev", device, "root", *tbf)
            return
        # What a task sends waits in netem, then in the rate limit.
        self._sh(*run, "tc", "qdisc", "add", "dev", device, "root", "handle", "1:", "netem",
                 "delay", self.latency, "limit", "100000")
        self._sh(*run, "tc", "qdisc", "add", "dev", device, "parent", "1:1", "handle", "10:", *tbf)

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
            # The task's end is made inside its namespace: two clusters at
            # once never race for its name in the host's.
            self._sh("ip", "link", "add", host_end, "type", "veth", "peer", "name", task_end,
                     "netns", namespace)
            self._sh("ip", "link", "set", host_end, "master", self._bridge)
            self._sh("ip", "link", "set", host_end, "up")
            self._sh(*in_ns, "ip", "addr", "add", f"{address}/24", "dev", task_end)
            self._sh(*in_ns, "ip", "link", "set", task_end, "up")
            self._sh(*in_ns, "ip", "link", "set", "lo", "up")
            self._write_hosts(namespace, address)
            self._shape(host_end)
            self._shape(task_end, namespace)
        except Exception:
            self.close()
            raise
        return address

    @staticmethod
    def _write_hosts(namespace, address):
        """In the namespace, this machine's name is the task's own address,
        as on a host of its own. `ip netns exec` puts /etc/netns/NS/hosts
        over /etc/hosts. Horovod's Gloo needs it: its process-set contexts
        find their address by the host name, not by HOROVOD_GLOO_IFACE, and
        loopback would be wrong between namespaces."""
        folder = os.path.join("/etc/netns", namespace)
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, "hosts"), "w") as f:
            f.write(f"127.0.0.1 localhost\n{address} {socket.gethostname()}\n")

    def command(self, name, argv):
        """argv run inside task `name`'s namespace (same pid: exec)."""
        return ["ip", "netns", "exec", self._tasks[name][0], *argv]

    @property
    def gateway(self):
        """The bridge's address: where the tasks reach this process."""
        return f"{self._subnet}.1"

    def interface(self, name):
        """Task `name`'s interface inside its namespace."""
        return f"ht{list(self._tasks).index(name)}"

    def interfaces(self):
        """{task: [namespace, interface]}, for INTERFACES_ENV."""
        return {name: [ns, self.interface(name)] for name, (ns, _, _) in self._tasks.items()}

    def close(self):
        for namespace, host_end, _ in self._tasks.values():
            subprocess.run(["ip", "link", "del", host_end], capture_output=True)
            subprocess.run(["ip", "netns", "del", namespace], capture_output=True)
            shutil.rmtree(os.path.join("/etc/netns", namespace), ignore_errors=True)
        self._tasks = {}
        subprocess.run(["ip", "link", "del", self._bridge], capture_output=True)


def add_arguments(parser, whose):
    """--link and --latency, for the local clusters that `whose` starts."""
    parser.add_argument("--link", metavar="RATE",
                        help=f"put each task of {whose} (each Horovod rank too) in a network "
                        "namespace of its own behind a tc-shaped link of RATE, such as 100mbit "
                        "or 1gbit (needs root; otherwise loopback, with a message)")
    parser.add_argument("--latency", metavar="DELAY",
                        help="with --link: a one-way delay netem adds to what each task sends, "
                        "such as 100us or 1ms (needs the kernel's netem qdisc)")


def check_arguments(args):
    """A bad --link or --latency is the caller's error, found before anything starts."""
    if args.latency and not args.link:
        raise ValueError("--latency delays the emulated links: give --link RATE too")
    if args.link:
        parse_rate(args.link)
    if args.latency:
        parse_latency(args.latency)

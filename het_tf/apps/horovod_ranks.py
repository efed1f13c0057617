"""Horovod ranks that het-tf starts itself.

horovodrun starts a machine's ranks as its own children in one network
namespace, so ranks on one machine cannot sit behind links of their own.
This starts them the way horovodrun's Gloo launcher does
(horovod/runner/gloo_run.py): one rendezvous server here, and each rank
with the environment that launcher gives its slot (rank, size, local and
cross ranks, the rendezvous address and port, the Gloo interface), built by
Horovod's own functions. Each rank is then spawned wherever the caller
chooses: inside a namespace of its own behind an emulated link, as between
hosts, or on loopback.
"""
import signal
import subprocess
import time

from horovod.runner.common.util.hosts import get_host_assignments, parse_hosts
from horovod.runner.gloo_run import create_run_env_vars, create_slot_env_vars
from horovod.runner.http.http_server import RendezvousServer


class Rendezvous:
    """Horovod's Gloo rendezvous for `num_ranks` ranks. With one_per_host,
    every rank counts as a host of its own (local size 1), as ranks behind
    links of their own are; otherwise all are local ranks of one host."""

    def __init__(self, num_ranks, one_per_host):
        hosts = (",".join(f"rank{r}:1" for r in range(num_ranks)) if one_per_host
                 else f"localhost:{num_ranks}")
        self._plan = get_host_assignments(parse_hosts(hosts), num_ranks)
        self._server = RendezvousServer()
        self.port = self._server.start()
        self._server.init(self._plan)

    def rank_env(self, rank, address, interface):
        """The environment of rank `rank`, which reaches the rendezvous at
        `address` and runs Gloo over `interface`."""
        env = create_slot_env_vars(self._plan[rank])
        env.update(create_run_env_vars(address, [interface], self.port))
        env["PYTHONUNBUFFERED"] = "1"  # as horovodrun sets it: logs arrive as written
        return {k: str(v) for k, v in env.items()}

    def close(self):
        self._server.stop()


class RankGroup:
    """The rank processes as one job, as horovodrun runs them: it ends when
    every rank has exited, or as soon as one fails, whose code it returns
    after stopping the others (they would wait for it in an allreduce)."""

    def __init__(self, processes):
        self.processes = list(processes)

    def poll(self):
        codes = [p.poll() for p in self.processes]
        failed = [c for c in codes if c not in (None, 0)]
        if failed:
            for p in self.processes:
                if p.poll() is None:
                    p.send_signal(signal.SIGTERM)
            return failed[0]
        return 0 if all(c == 0 for c in codes) else None

    def wait(self, timeout=None):
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            code = self.poll()
            if code is not None:
                return code
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired("horovod ranks", timeout)
            time.sleep(0.2)

"""`het-tf launch`: a local cluster of task processes around one chief
command, on loopback or behind emulated links."""
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

from het_tf.apps import horovod_ranks
from het_tf.apps import link as link_module
from het_tf.apps.link import TASK_PORT
from het_tf.distribute import horovod
from het_tf.distribute.server import SERVER_JOBS

# The chief (or each Horovod rank) of a local cluster learns the process ids
# of the cluster's server tasks here, as JSON {"ps:0": pid, ...}, to report
# their memory (het-tf train's metrics.json peak_rss_bytes).
LOCAL_TASKS_ENV = "HET_TF_LOCAL_TASKS"


def free_ports(count, host="127.0.0.1"):
    """Ports free right now on host, all different."""
    sockets, ports = [], []
    try:
        for _ in range(count):
            s = socket.socket()
            s.bind((host, 0))
            sockets.append(s)
            ports.append(s.getsockname()[1])
    finally:
        for s in sockets:
            s.close()
    return ports


def local_cluster_spec(num_ps, num_workers, host="127.0.0.1", hybrid=False):
    """In hybrid mode only the PS job is a cluster: the Horovod ranks connect
    to it as clients of their own."""
    if hybrid:
        return {"ps": [f"{host}:{p}" for p in free_ports(num_ps, host)]}
    ports = free_ports(1 + num_ps + num_workers, host)
    addresses = [f"{host}:{p}" for p in ports]
    return {"chief": addresses[:1], "ps": addresses[1:1 + num_ps],
            "worker": addresses[1 + num_ps:]}


def _prefix_lines(stream, name, out):
    for line in iter(stream.readline, b""):
        out.write(f"[{name}] {line.decode(errors='replace')}")
        out.flush()
    stream.close()


class LocalCluster:
    """One process per task on 127.0.0.1, each with its own TF_CONFIG.

    Task logs are prefixed with the task's name. Every process is started
    in its own session and killed on close, so nothing outlives the cluster.
    """

    def __init__(self, num_ps, num_workers, evaluator=False, env=None, host="127.0.0.1",
                 out=None, hybrid=False, link=None):
        if num_ps < 1 or num_workers < 1:
            raise ValueError(f"a cluster needs at least 1 ps and 1 worker, got {num_ps} ps "
                             f"and {num_workers} workers")
        if link is not None and evaluator:
            raise ValueError("rate-limited links are made for the chief, ps and worker tasks "
                             "and the Horovod ranks, not for an evaluator")
        self.hybrid = hybrid
        self.num_workers = num_workers
        self.env = dict(os.environ if env is None else env)
        # A link.EmulatedLinks: each task (and each Horovod rank) in a
        # namespace of its own.
        self.link = link
        if link is None:
            self.cluster = local_cluster_spec(num_ps, num_workers, host, hybrid)
        else:
            jobs = (("ps", num_ps),) if hybrid else (("chief", 1), ("ps", num_ps),
                                                     ("worker", num_workers))
            self.cluster = {job: [f"{link.add(f'{job}:{i}')}:{TASK_PORT}" for i in range(n)]
                            for job, n in jobs}
            self.rank_addresses = ([link.add(f"rank:{r}") for r in range(num_workers)]
                                   if hybrid else [])
            self.env[link_module.INTERFACES_ENV] = json.dumps(link.interfaces())
        self.rendezvous = None
        self.evaluator = evaluator
        self.out = out or sys.stdout
        self.tasks = {}  # "ps:0" -> Popen
        self._threads = []
        self.stopping = False

    def task_env(self, task_type, index):
        config = {"cluster": self.cluster, "task": {"type": task_type, "index": index}}
        return dict(self.env, TF_CONFIG=json.dumps(config))

    def _spawn(self, name, argv, env):
        if self.link is not None:
            argv = self.link.command(name, argv)
        process = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, start_new_session=True)
        thread = threading.Thread(target=_prefix_lines, args=(process.stdout, name, self.out),
                                  daemon=True)
        thread.start()
        self._threads.append(thread)
        self.tasks[name] = process
        if self.stopping:
            # A signal handled while Popen ran found no process to stop.
            try:
                os.killpg(process.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        return process

    def start_task(self, task_type, index):
        argv = [sys.executable, "-m", "het_tf.apps.cli", "server"]
        return self._spawn(f"{task_type}:{index}", argv, self.task_env(task_type, index))

    def server_jobs(self):
        return [job for job in SERVER_JOBS if job in self.cluster]

    def start(self):
        for job in self.server_jobs():
            for index in range(len(self.cluster[job])):
                self.start_task(job, index)
        self.wait_until_serving()
        return self

    def wait_until_serving(self, timeout=120):
        """Waits for every server's port to accept connections."""
        deadline = time.monotonic() + timeout
        for job in self.server_jobs():
            for index, address in enumerate(self.cluster[job]):
                host, port = address.rsplit(":", 1)
                while True:
                    if self.stopping:
                        return  # interrupted: the tasks are being stopped
                    process = self.tasks.get(f"{job}:{index}")
                    if process is not None and process.poll() is not None:
                        raise RuntimeError(f"task {job}:{index} exited with code "
                                           f"{process.returncode} while starting")
                    try:
                        socket.create_connection((host, int(port)), timeout=1).close()
                        break
                    except OSError as e:
                        if time.monotonic() > deadline:
                            raise TimeoutError(f"task {job}:{index} is not serving on "
                                               f"{address} after {timeout} s") from e
                        time.sleep(0.2)

    def start_chief(self, command):
        """Starts command as the chief (and as the evaluator, if asked); in
        hybrid mode, as num_workers Horovod ranks with HET_TF_PS set, which
        run as one job (horovod_ranks.RankGroup)."""
        if self.hybrid:
            return self._start_ranks(command)
        process = self._spawn("chief:0", list(command),
                              dict(self.task_env("chief", 0), **self._server_pids()))
        if self.evaluator:
            self._spawn("evaluator:0", list(command), self.task_env("evaluator", 0))
        return process

    def _start_ranks(self, command):
        behind_links = self.link is not None
        self.rendezvous = horovod_ranks.Rendezvous(self.num_workers, one_per_host=behind_links)
        env = dict(self.env, HET_TF_PS=",".join(self.cluster["ps"]), **self._server_pids())
        env.pop("TF_CONFIG", None)
        ranks = []
        for r in range(self.num_workers):
            name = f"rank:{r}"
            if behind_links:
                # Gloo and the rank's client server use its own link.
                where = self.rendezvous.rank_env(r, self.link.gateway, self.link.interface(name))
                where[horovod.CLIENT_HOST_ENV] = self.rank_addresses[r]
            else:
                where = self.rendezvous.rank_env(r, "127.0.0.1", "lo")
            ranks.append(self._spawn(name, list(command), dict(env, **where)))
        return horovod_ranks.RankGroup(ranks)

    def _server_pids(self):
        return {LOCAL_TASKS_ENV: json.dumps({name: p.pid for name, p in self.tasks.items()})}

    def run_chief(self, command, timeout=None):
        """Runs command as the chief; returns its exit code (124 on timeout)."""
        process = self.start_chief(command)
        try:
            return process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return 124

    def signal_all(self, sig=signal.SIGTERM):
        """Signals every task's whole process group without waiting (safe in a
        signal handler): a task's leader may be gone while its children, such
        as horovodrun's ranks, are not."""
        for process in self.tasks.values():
            try:
                os.killpg(process.pid, sig)
            except ProcessLookupError:
                pass

    def interrupt(self):
        """Stops every task, and any started from now on (safe in a signal
        handler, which runs between two steps of the main thread: maybe while
        it starts a task not yet listed)."""
        self.stopping = True
        self.signal_all(signal.SIGTERM)

    def kill_task(self, name, sig=signal.SIGKILL):
        process = self.tasks[name]
        if process.poll() is None:
            os.killpg(process.pid, sig)
        process.wait(timeout=30)

    def _groups_alive(self):
        alive = []
        for process in self.tasks.values():
            process.poll()  # reaps the leader, so a finished group reads as gone
            try:
                os.killpg(process.pid, 0)
                alive.append(process)
            except ProcessLookupError:
                pass
        return alive

    def close(self, grace=10):
        """Stops every task and everything it started: SIGTERM, then SIGKILL
        for groups still alive after `grace` seconds."""
        self.signal_all(signal.SIGTERM)
        deadline = time.monotonic() + grace
        while self._groups_alive() and time.monotonic() < deadline:
            time.sleep(0.1)
        if self._groups_alive():
            self.signal_all(signal.SIGKILL)
            while self._groups_alive():
                time.sleep(0.1)
        for process in self.tasks.values():
            process.wait()
        for thread in self._threads:
            thread.join(timeout=5)
        if self.rendezvous is not None:
            self.rendezvous.close()
        if self.link is not None:
            self.link.close()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.close()


def launch(num_ps, num_workers, command, evaluator=False, hybrid=False, link=None,
           latency=None):
    """`het-tf launch`: a local cluster around one chief command (or, in
    hybrid mode, around num_workers Horovod ranks of it). With `link` (a tc
    rate such as 100mbit) each task and rank gets a network namespace of its
    own behind a link of that rate, delayed by `latency` (such as 100us),
    where root allows; otherwise loopback. A latency the kernel cannot
    emulate is an error: the run would not be the one asked for."""
    kind = "Horovod ranks" if hybrid else "workers"
    links = None
    if link:
        try:
            links = link_module.EmulatedLinks(link, latency)
        except link_module.LinkUnavailable as e:
            if latency:  # the delay is the point of such a run: no loopback stand-in
                raise ValueError(str(e)) from None
            print(f"het-tf launch: {e}; running on loopback instead", flush=True)
    if links is None:
        print(f"het-tf launch: {num_ps} ps and {num_workers} {kind} on 127.0.0.1; tasks listen "
              "on all interfaces of their ports (TensorFlow's gRPC servers cannot bind to one "
              "address): keep this machine's ports closed to other hosts", flush=True)
    else:
        delay = f" with {links.latency} one-way delay" if links.latency else ""
        print(f"het-tf launch: {num_ps} ps and {num_workers} {kind}, each in a network "
              f"namespace of its own behind a {links.rate} link{delay}", flush=True)
    try:
        cluster = LocalCluster(num_ps, num_workers, evaluator=evaluator, hybrid=hybrid,
                               link=links)
    except BaseException:
        if links is not None:
            links.close()
        raise
    print(f"het-tf launch: cluster {json.dumps(cluster.cluster)}", flush=True)
    interrupted = []

    def on_signal(signum, _frame):
        # Only signal here: waiting on a Popen the main thread is waiting on
        # would deadlock. The chief's exit ends run_chief; close() reaps.
        interrupted.append(signum)
        cluster.interrupt()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        cluster.start()
        code = cluster.run_chief(command)
    finally:
        cluster.close()
        for s, handler in previous.items():
            signal.signal(s, handler)
    return 130 if interrupted else code

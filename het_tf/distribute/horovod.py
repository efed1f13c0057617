"""Hybrid mode's connection: Horovod ranks, each a client of the PS tasks.

Every Horovod rank connects to the PS tasks as a client job of its own, so
all ranks share the tables there (shards are found by name) while dense
gradients go through Horovod. The PS addresses come from `HET_TF_PS`
("host:port,host:port") or from the "ps" job of `TF_CONFIG`. The Keras half
(the training step, checkpoints) is het_tf.training.hybrid_training;
het_tf.hybrid offers both.
"""
import json
import os
import socket

import tensorflow as tf

from het_tf import _op_library

PS_ENV = "HET_TF_PS"
# The address other tasks reach this rank's client server at (default: this
# machine's loopback, right for `het-tf launch --hybrid`).
CLIENT_HOST_ENV = "HET_TF_CLIENT_HOST"

_connected = {"num_ps": None}


def initialized():
    try:
        import horovod.tensorflow as hvd
    except ImportError as e:  # pragma: no cover - the stack installs it
        raise ImportError("hybrid mode needs Horovod built with TensorFlow and Gloo: "
                          "`make setup` builds it") from e
    hvd.init()
    return hvd


def rank():
    return initialized().rank()


def size():
    return initialized().size()


def ps_addresses():
    if os.environ.get(PS_ENV):
        return [a.strip() for a in os.environ[PS_ENV].split(",") if a.strip()]
    if os.environ.get("TF_CONFIG"):
        ps = json.loads(os.environ["TF_CONFIG"]).get("cluster", {}).get("ps", [])
        if ps:
            return list(ps)
    raise ValueError(f"hybrid mode needs the PS tasks: set {PS_ENV}=host:port[,host:port...] "
                     "or a TF_CONFIG whose cluster has a \"ps\" job")


def init(addresses=None):
    """Starts Horovod and connects this rank to the PS tasks as a client job
    of its own, rank<N>. Call it first: connecting replaces TensorFlow's
    eager context, so variables made before it would be left behind. Only
    the PS job and this client are in its cluster (listing tasks that are
    not up would make the connection hang)."""
    if _connected["num_ps"] is not None:
        return _connected["num_ps"]
    _op_library.load()  # the PS tasks run het_tf ops this client sends
    hvd = initialized()
    addresses = list(addresses or ps_addresses())
    host = os.environ.get(CLIENT_HOST_ENV, "127.0.0.1")
    port = _unique_client_port(hvd, host)
    job = f"rank{hvd.rank()}"
    cluster = tf.train.ClusterSpec({"ps": addresses, job: [f"{host}:{port}"]})
    # One rank at a time. A TensorFlow 2.16 server that has no client context
    # yet replaces its collective executor manager when a client connects
    # (EagerServiceImpl::CreateContext). Two ranks connecting at once both find
    # it empty, and the first rank's context keeps the manager the second one
    # freed: the PS task then dies with SIGSEGV the first time that context
    # builds a kernel (docs/hybrid.md). Once one context exists, later
    # connections leave the manager alone.
    for turn in range(hvd.size()):
        if turn == hvd.rank():
            tf.config.experimental_connect_to_cluster(cluster, job_name=job, task_index=0,
                                                      make_master_device_default=False)
        barrier()
    _connected["num_ps"] = len(addresses)
    return _connected["num_ps"]


def _unique_client_port(hvd, host):
    """A free port for this rank's client server that no other rank on this
    host picked too. gRPC binds with SO_REUSEPORT, so two ranks given the
    same port would both start and then receive each other's connections."""
    bind_host = "127.0.0.1" if host == "localhost" else host
    for _ in range(20):
        with socket.socket() as s:
            s.bind((bind_host, 0))
            port = s.getsockname()[1]
        picks = hvd.allgather_object((host, port))
        if len(set(picks)) == len(picks):  # the same answer on every rank
            return port
    raise RuntimeError(f"could not find distinct free ports on {host} for the Horovod ranks")


def num_ps():
    """PS tasks this process is connected to in hybrid mode, or None."""
    return _connected["num_ps"]


def allreduce_sum(value):
    """The sum of a number over the ranks."""
    hvd = initialized()
    return float(hvd.allreduce(tf.constant(value, tf.float64), op=hvd.Sum).numpy())


def allgather(tensor):
    """Every rank's tensor, concatenated along the first axis in rank order
    (their first dimensions may differ)."""
    return initialized().allgather(tensor)


def sum_over_ranks(tensor):
    """The elementwise sum of a tensor over the ranks (in a graph, too)."""
    hvd = initialized()
    return hvd.allreduce(tensor, op=hvd.Sum)


def broadcast_object(value):
    """Rank 0's value, on every rank."""
    return initialized().broadcast_object(value, root_rank=0)


def barrier():
    initialized().allreduce(tf.constant(0.0), name="het_tf_barrier")


def on_every_rank(action, what):
    """Runs `action()` on every rank and returns its result; if it fails on
    any rank, every rank raises (that rank its own error, the others one
    naming `what`, the rank and its error) instead of waiting at a later
    collective for a rank that gave up."""
    error = result = None
    try:
        result = action()
    except Exception as e:  # raised again below, once every rank knows
        error = e
    if allreduce_sum(0.0 if error is None else 1.0):  # the barrier, carrying the outcome
        # A second collective, reached by every rank alike: each failure's text.
        failures = initialized().allgather_object(
            None if error is None else f"{type(error).__name__}: {error}")
        if error is not None:
            raise error
        failed = next(r for r, text in enumerate(failures) if text is not None)
        raise RuntimeError(f"{what} failed on rank {failed}: {failures[failed]}; every rank "
                           "stops")
    return result


def on_rank_zero(action, what):
    """Runs `action()` on rank 0 while the other ranks wait, and returns its
    result there (None elsewhere); if it fails every rank raises, as
    on_every_rank."""
    return on_every_rank(lambda: action() if rank() == 0 else None, what)

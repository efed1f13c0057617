"""A cluster from TF_CONFIG: the task servers, with the op library loaded,
and the ParameterServerStrategy a training script runs under."""
import json
import os
import signal
import threading
import time

import tensorflow as tf

from het_tf import _op_library

# Jobs whose tasks are plain servers; the chief and an evaluator run scripts.
SERVER_JOBS = ("ps", "worker")


def tf_config():
    """The parsed TF_CONFIG, with a clear error when it is missing or bad."""
    raw = os.environ.get("TF_CONFIG")
    if not raw:
        raise ValueError("TF_CONFIG is not set: it names the cluster and this task, e.g. "
                         '{"cluster": {"chief": [...], "worker": [...], "ps": [...]}, '
                         '"task": {"type": "ps", "index": 0}}')
    try:
        config = json.loads(raw)
        cluster, task = config["cluster"], config["task"]
        task_type, index = task["type"], int(task["index"])
    except (ValueError, KeyError, TypeError) as e:
        raise ValueError(f"TF_CONFIG is not valid: {e}; got {raw[:200]}") from e
    if task_type not in cluster and task_type != "evaluator":
        raise ValueError(f"TF_CONFIG's task type {task_type!r} is not a job of its cluster "
                         f"({', '.join(cluster)})")
    if task_type in cluster and not 0 <= index < len(cluster[task_type]):
        raise ValueError(f"TF_CONFIG's task index {index} is out of range for job "
                         f"{task_type!r} of {len(cluster[task_type])} tasks")
    return config


def server_config(num_workers):
    """Thread pools large enough that a 2-core machine does not deadlock: a
    ParameterServerStrategy task needs an inter-op thread per concurrent
    worker closure, plus one."""
    config = tf.compat.v1.ConfigProto()
    config.inter_op_parallelism_threads = max(4, num_workers + 2)
    return config


# Modules a server imports for ops of other libraries its tasks must run,
# comma-separated (for example tensorflow_recommenders_addons).
SERVER_IMPORTS_ENV = "HET_TF_SERVER_IMPORTS"


def _import_extra_ops():
    import importlib

    for name in filter(None, (m.strip() for m in
                              os.environ.get(SERVER_IMPORTS_ENV, "").split(","))):
        try:
            importlib.import_module(name)
        except ImportError as e:
            raise ValueError(f"{SERVER_IMPORTS_ENV} names {name!r}, which does not import: "
                             f"{e}") from e


def serve(stop_after=None):
    """Runs the tf.distribute.Server for the task TF_CONFIG names, with the
    op library loaded, until SIGTERM or SIGINT."""
    import faulthandler

    _op_library.load()  # registers the ops this server must run
    _import_extra_ops()
    faulthandler.enable()  # a crash of the task leaves at least a Python stack
    config = tf_config()
    task_type, index = config["task"]["type"], int(config["task"]["index"])
    if task_type not in SERVER_JOBS:
        raise ValueError(f"het-tf server runs ps and worker tasks; TF_CONFIG names a "
                         f"{task_type!r} task, which runs the training (or evaluation) script")
    cluster = tf.train.ClusterSpec(config["cluster"])
    num_workers = len(config["cluster"].get("worker", []))
    server = tf.distribute.Server(cluster, job_name=task_type, task_index=index,
                                  protocol="grpc", config=server_config(num_workers), start=True)
    stopped = threading.Event()

    def stop(signum, _frame):
        print(f"het-tf server {task_type}:{index}: stopping on signal {signum}", flush=True)
        stopped.set()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    print(f"het-tf server {task_type}:{index}: serving {server.target}", flush=True)
    deadline = None if stop_after is None else time.monotonic() + stop_after
    while not stopped.wait(0.5):
        if deadline is not None and time.monotonic() > deadline:
            break
    return 0


def parameter_server_strategy(variable_partitioner=None):
    """The ParameterServerStrategy for the cluster in TF_CONFIG, to be created
    by the chief. Connects to every task, so they must all be serving."""
    config = tf_config()
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    _size_the_chiefs_pool(len(config["cluster"].get("worker", [])))
    return tf.distribute.experimental.ParameterServerStrategy(
        resolver, variable_partitioner=variable_partitioner)


def _size_the_chiefs_pool(num_workers):
    """The coordinator runs a closure per worker at once: with fewer than
    num_workers + 1 inter-op threads `fit` deadlocks without a word. They
    are set before TensorFlow starts (to max(4, num_workers + 2), never
    lowering a larger setting); once it has run an op they are fixed, and
    taken as they are if enough, else refused naming the fix."""
    wanted, needed = max(4, num_workers + 2), num_workers + 1
    if tf.config.threading.get_inter_op_parallelism_threads() >= wanted:
        return
    try:
        tf.config.threading.set_inter_op_parallelism_threads(wanted)
    except RuntimeError as e:  # "cannot be modified after initialization"
        threads = _inter_op_threads()
        if threads < needed:
            raise ValueError(
                f"parameter_server_strategy: the chief has {threads} inter-op threads, and "
                f"{num_workers} workers need at least {needed} (with fewer, fit deadlocks); "
                "TensorFlow has run an op, so they can no longer be changed. Call "
                "het_tf.cluster.parameter_server_strategy() before any TensorFlow op, or "
                f"call tf.config.threading.set_inter_op_parallelism_threads({wanted}) (at "
                f"least {needed}) yourself before any") from e


def _inter_op_threads():
    """The inter-op threads TensorFlow runs with: the setting, else
    TF_NUM_INTEROP_THREADS, else a thread per CPU this process may use (as
    TensorFlow sizes its pool)."""
    threads = tf.config.threading.get_inter_op_parallelism_threads()
    if threads > 0:
        return threads
    try:
        threads = int(os.environ.get("TF_NUM_INTEROP_THREADS", "0"))
    except ValueError:
        threads = 0
    return threads if threads > 0 else len(os.sched_getaffinity(0))


def num_tasks(strategy, job):
    """How many tasks of `job` ("ps" or "worker") a ParameterServerStrategy
    spans, from its cluster resolver."""
    # TF's ParameterServerStrategy keeps the resolver it was made with but
    # its public `cluster_resolver` property answers None (TF 2.16-2.21):
    # this is the one place that reads the kept one.
    resolver = strategy.cluster_resolver or strategy._cluster_resolver
    spec = resolver.cluster_spec()
    return spec.num_tasks(job) if job in spec.jobs else 0

"""Hybrid mode: Horovod allreduce for dense weights, PS shards for embeddings.

Every Horovod rank runs its own `model.fit`. Each connects to the PS tasks as
a client of its own, so all ranks share the tables there (shards are found by
name), while each keeps its own cache. Dense gradients never go through the
PS: they are averaged with Horovod's allreduce, so dense weights stay the
same on every rank.

    import het_tf.hybrid as hybrid
    hybrid.init()                          # first, like hvd.init(): before any model
    model = build_model()                  # a plain tf_keras model with HetEmbedding
    hybrid.distribute(model)               # before compile
    model.compile(tf_keras.optimizers.Adam(0.001 * hybrid.size()), ...)
    model.fit(dataset.shard(hybrid.size(), hybrid.rank()), callbacks=[hybrid.Checkpoint(dir)])

The PS addresses come from `HET_TF_PS` ("host:port,host:port") or from the
"ps" job of `TF_CONFIG`.
"""
import json
import os
import socket

import tensorflow as tf
import tf_keras

from het_tf.keras_layers.het_embedding import het_embedding_layers

PS_ENV = "HET_TF_PS"
# The address other tasks reach this rank's client server at (default: this
# machine's loopback, right for `het-tf launch --hybrid`).
CLIENT_HOST_ENV = "HET_TF_CLIENT_HOST"

_connected = {"num_ps": None}


def _hvd():
    try:
        import horovod.tensorflow as hvd
    except ImportError as e:  # pragma: no cover - the stack installs it
        raise ImportError("hybrid mode needs Horovod built with TensorFlow and Gloo: "
                          "`make setup` builds it") from e
    hvd.init()
    return hvd


def rank():
    return _hvd().rank()


def size():
    return _hvd().size()


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
    import het_tf  # noqa: F401  (the PS tasks run het_tf ops this client sends)

    hvd = _hvd()
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


def _check_built_after_init(model):
    for layer in het_embedding_layers(model):
        if layer.built and not layer.table.devices[0]:
            raise ValueError(f"HetEmbedding '{layer.name}' was built before "
                             "het_tf.hybrid.init(): call init() first, before building the model")


def _hybrid_train_step(model, data):
    """Keras' train step with the dense gradients averaged over the ranks.
    The embedding updates happen inside tape.gradient, on each rank's cache."""
    hvd = _hvd()
    x, y, sample_weight = tf_keras.utils.unpack_x_y_sample_weight(data)
    with tf.GradientTape() as tape:
        y_pred = model(x, training=True)
        loss = model.compute_loss(x, y, y_pred, sample_weight)
    variables = model.trainable_variables
    grads = tape.gradient(loss, variables)
    anchors = {id(layer._anchor) for layer in het_embedding_layers(model) if layer.built}
    dense = [(tf.convert_to_tensor(g), v) for g, v in zip(grads, variables)
             if g is not None and id(v) not in anchors]
    if dense:
        averaged = hvd.grouped_allreduce([g for g, _ in dense], op=hvd.Average)
        model.optimizer.apply_gradients(zip(averaged, [v for _, v in dense]))
    return model.compute_metrics(x, y, y_pred, sample_weight)


def distribute(model):
    """Makes a plain tf_keras model, built after init(), hybrid-ready; call
    it before compile. Broadcasts the weights from rank 0 and averages dense
    gradients over the ranks in every training step; the HetEmbedding tables
    are on the PS tasks, shared by every rank."""
    if num_ps() is None:
        raise ValueError("call het_tf.hybrid.init() first, before building the model")
    hvd = _hvd()
    if getattr(model, "_is_compiled", False):
        raise ValueError("call het_tf.hybrid.distribute(model) before model.compile")
    _check_built_after_init(model)
    model.train_step = lambda data: _hybrid_train_step(model, data)
    hvd.broadcast_variables(model.variables, root_rank=0)
    return model


def allreduce_sum(value):
    """The sum of a number over the ranks."""
    hvd = _hvd()
    return float(hvd.allreduce(tf.constant(value, tf.float64), op=hvd.Sum).numpy())


def barrier():
    _hvd().allreduce(tf.constant(0.0), name="het_tf_barrier")


def flush_and_clear(model):
    """Pushes this rank's pending updates and empties its caches."""
    for layer in het_embedding_layers(model):
        layer.flush()
        layer._clear_cache()


def save(model, manager):
    """A checkpoint of the tables and rank 0's dense weights, taken by every
    rank together: all ranks flush, rank 0 saves, all ranks empty their caches
    (so that training goes on as a restore of this checkpoint would)."""
    flush_and_clear(model)
    barrier()
    path = manager.save() if rank() == 0 else None
    barrier()
    return path


def restore(model, path):
    """Every rank restores the checkpoint, so optimizer slots (restored when
    first created) match on all ranks. Restoring the shared tables on every
    rank is idempotent: each rank empties them before its own import, so the
    last import is always complete. Caches start empty."""
    tf.train.Checkpoint(model=model).restore(path).expect_partial()
    barrier()
    _hvd().broadcast_variables(model.variables, root_rank=0)


class Checkpoint(tf_keras.callbacks.Callback):
    """Saves a checkpoint every epoch in hybrid mode (on every rank)."""

    def __init__(self, directory, max_to_keep=3):
        super().__init__()
        self.directory, self.max_to_keep = directory, max_to_keep
        self.manager = None

    def on_epoch_end(self, epoch, logs=None):
        if self.manager is None:
            checkpoint = tf.train.Checkpoint(model=self.model)
            self.manager = tf.train.CheckpointManager(checkpoint, self.directory,
                                                      max_to_keep=self.max_to_keep)
        save(self.model, self.manager)

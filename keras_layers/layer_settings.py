"""HetEmbedding's settings checked and put as the runtime takes them: its
Keras arguments, the initializer the shards run (or one evaluated once for
a fixed vocabulary), the constraint, the cache, and where the table and
caches are placed."""
import collections
import dataclasses
import zlib

import numpy as np
import tensorflow as tf
import tf_keras

from het_tf.distribute import horovod, server
from het_tf.keras_layers import server_optimizer
from het_tf.keras_layers.combiners import COMBINERS
from het_tf.runtime.config import (
    MATERIALIZE_LIMIT,
    UNBOUNDED,
    TableConfig,
    is_whole,
)


def check_arguments(owner, input_dim, output_dim, combiner, seed, mask_zero, sparse):
    """Keras' Embedding arguments, and the combiner, alone and together."""
    if input_dim is not None and not is_whole(input_dim, at_least=1):
        raise ValueError(f"{owner}: input_dim must be a positive int, or None for dynamic "
                         f"int64 keys; got {input_dim!r}")
    if not is_whole(output_dim, at_least=1):
        raise ValueError(f"{owner}: output_dim must be a positive int, got {output_dim!r}")
    if combiner is not None and combiner not in COMBINERS:
        raise ValueError(f"{owner}: combiner must be None or one of {', '.join(COMBINERS)}; "
                         f"got {combiner!r}")
    if seed is not None and not is_whole(seed):
        raise ValueError(f"{owner}: seed must be an int or None, got {seed!r}")
    if mask_zero and combiner is not None:
        raise ValueError(f"{owner}: mask_zero masks a sequence of ids, which a combiner "
                         "reduces away; give multi-hot ids as a ragged or sparse tensor "
                         "(no padding) instead")
    if sparse and mask_zero:
        raise ValueError(f"{owner}: mask_zero cannot be enabled with sparse=True (as in "
                         "tf_keras.layers.Embedding)")
    if sparse and combiner is not None:
        raise ValueError(f"{owner}: sparse=True returns one vector per id, as a "
                         "SparseTensor; a combiner returns one per row (use one or the "
                         "other)")


def full_checkpoint_every(value, owner):
    """None (every checkpoint of the table full), or n >= 1: every n-th full,
    incremental ones between (het_tf.runtime.checkpoint)."""
    if value is not None and not is_whole(value, at_least=1):
        raise ValueError(f"{owner}: full_checkpoint_every must be None or an int >= 1, "
                         f"got {value!r}")
    return None if value is None else int(value)


def initializer_from_weights(weights, input_dim, output_dim, owner):
    """weights=[matrix]: the table's initial rows, for a fixed vocabulary."""
    if not isinstance(weights, (list, tuple)) or len(weights) != 1:
        raise ValueError(f"{owner}: weights must be a list of one [input_dim, output_dim] "
                         f"matrix (the table), got {type(weights).__name__} of "
                         f"{len(weights) if isinstance(weights, (list, tuple)) else '?'}")
    matrix = np.asarray(weights[0], np.float32)
    if input_dim is None or matrix.shape != (input_dim, output_dim):
        raise ValueError(f"{owner}: weights[0] has shape {matrix.shape}; the table is "
                         f"[{input_dim}, {output_dim}] (weights= needs a fixed input_dim)")
    return tf_keras.initializers.Constant(matrix)


def with_input_length(shape, input_length, owner):
    """The input shape with input_length filling its unknown sequence axes,
    as tf_keras.layers.Embedding infers it."""
    lengths = list(input_length) if isinstance(input_length, (list, tuple)) else [input_length]
    if len(lengths) != len(shape) - 1:
        raise ValueError(f"{owner}: input_length is {input_length}, but the input has "
                         f"shape {shape}")
    for i, (given, seen) in enumerate(zip(lengths, shape[1:])):
        if given is not None and seen is not None and given != seen:
            raise ValueError(f"{owner}: input_length is {input_length}, but the input has "
                             f"shape {shape}")
        if given is None:
            lengths[i] = seen
    return [shape[0], *lengths]


# A table's settings from the layer's arguments: its TableConfig; the
# initializer evaluated once at build, where the shards cannot run it (None
# where they can); the table optimizer's learning rate (a number or a
# schedule); and its Keras config, for get_config.
TableSettings = collections.namedtuple(
    "TableSettings", "config evaluated_initializer learning_rate optimizer_serialized")


def table_settings(name, owner, input_dim, output_dim, initializer, optimizer, constraint,
                   seed, max_rows, on_full="refuse", eviction="lru", ttl=None, admit_after=None):
    """The layer's TableSettings, each argument checked."""
    kind, *params = resolve_initializer(initializer, input_dim, output_dim, owner)
    evaluated = params[0] if kind == "materialize" else None
    a, b = (0.0, 0.0) if evaluated is not None else params
    optimizer_config, learning_rate, serialized = server_optimizer.resolve(optimizer, owner)
    optimizer_config = dataclasses.replace(optimizer_config,
                                           **resolve_constraint(constraint, owner))
    seed = seed if seed is not None else zlib.crc32(name.encode())
    config = TableConfig(name, output_dim, UNBOUNDED if input_dim is None else input_dim,
                         "constant" if evaluated is not None else kind, a, b, int(seed),
                         optimizer_config, max_rows=max_rows, on_full=on_full,
                         eviction=eviction, ttl=ttl, admit_after=admit_after, owner=owner)
    return TableSettings(config, evaluated, learning_rate, serialized)


def resolve_initializer(init, input_dim, output_dim, owner):
    """(kind, a, b) for the shards, or ("materialize", initializer)."""
    simple = {"uniform": ("uniform", -0.05, 0.05), "random_uniform": ("uniform", -0.05, 0.05),
              "normal": ("normal", 0.0, 0.05), "random_normal": ("normal", 0.0, 0.05),
              "truncated_normal": ("truncated_normal", 0.0, 0.05),
              "zeros": ("constant", 0.0, 0.0), "ones": ("constant", 1.0, 0.0)}
    if isinstance(init, str):
        if init in simple:
            return simple[init]
        try:
            init = tf_keras.initializers.get(init)
        except ValueError as e:
            raise ValueError(f"{owner}: unknown embeddings_initializer {init!r}") from e
    inits = tf_keras.initializers
    cfg = init.get_config() if hasattr(init, "get_config") else {}
    if isinstance(init, inits.RandomUniform):
        return ("uniform", float(cfg["minval"]), float(cfg["maxval"]))
    if isinstance(init, inits.TruncatedNormal):
        return ("truncated_normal", float(cfg["mean"]), float(cfg["stddev"]))
    if isinstance(init, inits.RandomNormal):
        return ("normal", float(cfg["mean"]), float(cfg["stddev"]))
    if isinstance(init, inits.Zeros):
        return ("constant", 0.0, 0.0)
    if isinstance(init, inits.Ones):
        return ("constant", 1.0, 0.0)
    if isinstance(init, inits.Constant) and np.ndim(cfg.get("value", None)) == 0:
        return ("constant", float(cfg["value"]), 0.0)
    if not callable(init):
        raise ValueError(f"{owner}: embeddings_initializer must be a name or a tf_keras "
                         f"initializer, got {init!r}")
    if input_dim is None:
        raise ValueError(f"{owner}: {type(init).__name__} cannot run row by row on the "
                         "shards; with input_dim=None use uniform, normal, truncated_normal, "
                         "zeros, ones or a scalar Constant")
    if input_dim * output_dim > MATERIALIZE_LIMIT:
        raise ValueError(f"{owner}: {type(init).__name__} would be evaluated for all "
                         f"{input_dim} rows at once; use an initializer the shards run "
                         "row by row (uniform, normal, truncated_normal, zeros, ones)")
    return ("materialize", init)


def resolve_constraint(constraint, owner):
    """The table's row constraint for a Keras embeddings_constraint, as
    OptimizerConfig fields: NonNeg, and MaxNorm, UnitNorm and MinMaxNorm whose
    norm is over a row (axis=1 or -1). Constraints over the vocabulary axis,
    or of other kinds, would need the whole matrix, which no shard holds."""
    if constraint is None:
        return {}
    try:
        constraint = tf_keras.constraints.get(constraint)
    except ValueError as e:
        raise ValueError(f"{owner}: unknown embeddings_constraint {constraint!r}") from e
    kinds = tf_keras.constraints
    if isinstance(constraint, kinds.NonNeg):
        return dict(constraint="non_neg")
    norms = {kinds.MaxNorm: "max_norm", kinds.UnitNorm: "unit_norm",
             kinds.MinMaxNorm: "min_max_norm"}
    kind = next((name for cls, name in norms.items() if type(constraint) is cls), None)
    if kind is None:
        raise ValueError(f"{owner}: embeddings_constraint {type(constraint).__name__} is not "
                         "supported: the shards apply a constraint row by row, and can take "
                         "NonNeg, MaxNorm, UnitNorm or MinMaxNorm with axis=1 (a row's norm)")
    axis = np.ravel(constraint.axis).tolist()
    if axis not in ([1], [-1]):
        raise ValueError(f"{owner}: {type(constraint).__name__}(axis={constraint.axis}) takes "
                         "its norms over the vocabulary axis (Keras' default, axis=0), which "
                         "needs the whole matrix; the shards constrain each row: give axis=1")
    fields = dict(constraint=kind)
    if kind != "unit_norm":
        fields["constraint_max_value"] = float(constraint.max_value)
    if kind == "min_max_norm":
        fields.update(constraint_min_value=float(constraint.min_value),
                      constraint_rate=float(constraint.rate))
    return fields


def placement(instance):
    """(table shard devices, worker devices, instance) for the current
    strategy: with ParameterServerStrategy one shard per PS task and a
    cache on every worker; otherwise one in-process shard and cache, under
    this process-unique `instance`."""
    strategy = tf.distribute.get_strategy()
    if horovod.num_ps() is not None:  # a Horovod rank, its own client of the PS tasks
        return ([f"/job:ps/replica:0/task:{i}/device:CPU:0" for i in range(horovod.num_ps())],
                None, "cluster")
    if isinstance(strategy, tf.distribute.experimental.ParameterServerStrategy):
        return ([f"/job:ps/replica:0/task:{i}/device:CPU:0"
                 for i in range(server.num_tasks(strategy, "ps"))],
                [f"/job:worker/replica:0/task:{i}/device:CPU:0"
                 for i in range(server.num_tasks(strategy, "worker"))],
                # Named for the cluster: a restarted chief finds the same rows.
                "cluster")
    # Tables are found by name, and a second model with a layer of the same
    # name must not see these rows.
    return [None], None, instance

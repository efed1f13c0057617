"""HetEmbedding's settings as the runtime takes them: the initializer the
shards run (or one evaluated once for a fixed vocabulary), the cache, and
where the table and caches are placed."""
import numpy as np
import tensorflow as tf
import tf_keras

from het_tf.distribute import horovod, server
from het_tf.runtime import routes
from het_tf.runtime.config import (
    AUTO,
    MATERIALIZE_LIMIT,
    UNBOUNDED,
    CacheConfig,
    cache_rows,
    check_window,
    is_whole,
    staleness_bounds,
)


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


def resolve_cache(capacity, policy, staleness, read_staleness, write_staleness, pin_threshold,
                  input_dim, owner, sync="refresh", window=1):
    """The layer's CacheConfig, or None for no cache."""
    rows = cache_rows(capacity, input_dim, owner)
    check_window(window, sync, owner)
    if sync == "herald":
        # Exact: the plan, not a bound, decides what goes when.
        if rows == 0:
            raise ValueError(f"{owner}: sync='herald' needs the cache on (it schedules the "
                             "cached rows); cache_capacity is 0")
        if (not (isinstance(staleness, str) and staleness == AUTO)
                or read_staleness is not None or write_staleness is not None):
            raise ValueError(f"{owner}: sync='herald' is exact and takes no staleness bound; "
                             "leave staleness, read_staleness and write_staleness unset")
        return CacheConfig(rows, policy if isinstance(policy, str) else repr(policy), 0,
                           UNBOUNDED, pin_threshold, sync="herald", window=window).validate(owner)
    if rows == 0:
        return None
    read, write, ramp = staleness_bounds(owner, staleness, read_staleness, write_staleness)
    if read == 0 and write == 0 and sync != "check":
        # Synchronous: a cached copy could only serve what the shards
        # hold, while its clock checks, slot transfers and push
        # acknowledgements would cost more bytes than the direct path,
        # whose numbers are the same (docs/consistency.md). HET's own rule
        # (sync "check") keeps its cache, as HET's s=0 does: the baseline
        # that Herald's traffic is measured against.
        return None
    return CacheConfig(rows, policy if isinstance(policy, str) else repr(policy), read, write,
                       pin_threshold, staleness_ramp=ramp,
                       sync=sync if isinstance(sync, str) else repr(sync)).validate(owner)


def resolve_hot_rows(hot_rows, input_dim, cache_config, owner):
    """The most hot rows the layer replicates (0: none): FAE's hot block
    (docs/fae.md). Its cold rows go through the cache, which must be on."""
    if hot_rows is None or hot_rows == 0:
        return 0
    if not is_whole(hot_rows, at_least=0):
        raise ValueError(f"{owner}: hot_rows must be an int >= 0 or None, got {hot_rows!r}")
    if input_dim is not None and hot_rows > input_dim:
        raise ValueError(f"{owner}: hot_rows={hot_rows} is more rows than the table's "
                         f"{input_dim} (input_dim)")
    if cache_config is not None and cache_config.sync == "herald":
        raise ValueError(f"{owner}: hot_rows and sync='herald' do not combine: choose FAE's "
                         "hot block or Herald's plan (docs/herald.md)")
    if cache_config is None:
        raise ValueError(f"{owner}: hot_rows needs the cache on, for the cold rows (FAE "
                         "trains cold rows through it); it is off (cache_capacity=0, or "
                         "staleness 0 for both reads and writes)")
    return int(hot_rows)


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


def resolve_route(route, hot_rows, cache_config, owner):
    """The factory of a registered route, or None for the route the other
    settings choose (which hot rows and Herald's plan do themselves)."""
    if route is None:
        return None
    if hot_rows or (cache_config is not None and cache_config.sync == "herald"):
        raise ValueError(f"{owner}: route={route!r} chooses the route, as hot_rows and "
                         "sync='herald' do; give one of them")
    return routes.registered(route, owner)

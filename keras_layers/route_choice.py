"""Which route a HetEmbedding's rows take, chosen from the arguments that
choose one (the cache's, sync, window, hot_rows, route), and what the route
stands on: the table's shards and the workers' caches where the strategy
places them, FAE's hot block and Herald's plan, with Horovod's collectives
handed in."""
import collections

import tensorflow as tf

from het_tf.distribute import horovod
from het_tf.keras_layers.layer_settings import placement
from het_tf.runtime import routes
from het_tf.runtime.cache import WorkerCache
from het_tf.runtime.config import (
    AUTO,
    UNBOUNDED,
    CacheConfig,
    cache_rows,
    check_window,
    is_whole,
    staleness_bounds,
)
from het_tf.runtime.herald_plan import HeraldPlan
from het_tf.runtime.hot_block import HotBlock
from het_tf.runtime.routes import CachedRoute, DirectRoute, HeraldRoute, HotRowsRoute
from het_tf.runtime.table import ShardedTable

# What the layer's arguments chose: the cache (None: off), the most hot rows
# (0: none), and a registered route's factory (None: the others choose).
Choice = collections.namedtuple("Choice", "cache_config hot_rows route_factory")

# What a layer's rows stand on. `strategy` is ParameterServerStrategy's
# (its coordinator schedules the workers' steps), or None; `cache` is None
# with the cache off.
Built = collections.namedtuple("Built", "strategy table cache route")


def choose(owner, input_dim, *, cache_capacity, cache_policy, staleness, read_staleness,
           write_staleness, pin_threshold, sync, window, hot_rows, route):
    """The layer's Choice, every argument checked alone and with the others;
    `owner` names the layer in errors."""
    cache_config = resolve_cache(cache_capacity, cache_policy, staleness, read_staleness,
                                 write_staleness, pin_threshold, input_dim, owner, sync, window)
    hot_rows = resolve_hot_rows(hot_rows, input_dim, cache_config, owner)
    return Choice(cache_config, hot_rows, resolve_route(route, hot_rows, cache_config, owner))


def build(name, owner, table_config, choice, instance):
    """The table, cache and route of the layer `name` as its Choice says
    (`owner` names it in errors); `instance` tells this process's tables
    apart when no cluster does."""
    cache_config, hot_rows, route_factory = choice
    shard_devices, worker_devices, instance = placement(instance)
    strategy = tf.distribute.get_strategy() if worker_devices is not None else None
    table = ShardedTable(table_config, shard_devices, instance)
    cache = None
    if cache_config is not None:
        cache = WorkerCache(table, cache_config, shared_name=f"het_cache/{name}/{instance}",
                            worker_devices=worker_devices)
    hot = _hot_block(table, hot_rows, worker_devices, instance)
    plan = _plan(cache, worker_devices, owner)
    if route_factory is not None:
        route = route_factory(table, cache)
    elif cache is None:
        route = DirectRoute(table)
    elif hot is not None:
        route = HotRowsRoute(cache, hot)
    elif plan is not None:
        route = HeraldRoute(cache, plan, owner)
    else:
        route = CachedRoute(cache)
    return Built(strategy, table, cache, route)


def _hot_block(table, hot_rows, worker_devices, instance):
    """The hot block, for hot_rows in hybrid or local mode (under
    ParameterServerStrategy the workers cannot exchange gradients: the hot
    rows are pinned in their caches instead)."""
    if not hot_rows or worker_devices is not None:
        return None
    if horovod.num_ps() is None:
        return HotBlock(table, instance)
    return HotBlock(table, instance, exchange=horovod.allgather, ranks=horovod.size())


def _plan(cache, worker_devices, owner):
    """Herald's plan, for sync "herald" with more than one Horovod rank
    (one process alone has no one to push for)."""
    if cache is None or cache.config.sync != "herald":
        return None
    if worker_devices is not None:
        raise ValueError(f"{owner}: sync='herald' needs hybrid mode (Horovod ranks that share "
                         "the ids they read); under ParameterServerStrategy the workers "
                         "cannot, use sync='refresh' (docs/herald.md)")
    if horovod.num_ps() is None or horovod.size() == 1:
        return None
    return HeraldPlan(cache, horovod.size(), horovod.rank(), horovod.allgather,
                      horovod.sum_over_ranks)


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


def resolve_route(route, hot_rows, cache_config, owner):
    """The factory of a registered route, or None for the route the other
    settings choose (which hot rows and Herald's plan do themselves)."""
    if route is None:
        return None
    if hot_rows or (cache_config is not None and cache_config.sync == "herald"):
        raise ValueError(f"{owner}: route={route!r} chooses the route, as hot_rows and "
                         "sync='herald' do; give one of them")
    return routes.registered(route, owner)

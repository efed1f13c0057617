"""Which route a HetEmbedding's rows take, and what the route stands on:
the table's shards and the workers' caches where the strategy places them,
FAE's hot block and Herald's plan, with Horovod's collectives handed in."""
import collections

import tensorflow as tf

from het_tf.distribute import horovod
from het_tf.keras_layers.layer_settings import placement
from het_tf.runtime.cache import WorkerCache
from het_tf.runtime.herald_plan import HeraldPlan
from het_tf.runtime.hot_block import HotBlock
from het_tf.runtime.routes import CachedRoute, DirectRoute, HeraldRoute, HotRowsRoute
from het_tf.runtime.table import ShardedTable

# What a layer's rows stand on. `strategy` is ParameterServerStrategy's
# (its coordinator schedules the workers' steps), or None; `cache` is None
# with the cache off.
Built = collections.namedtuple("Built", "strategy table cache route")


def build(name, owner, table_config, cache_config, hot_rows, route_factory, instance):
    """The table, cache and route of the layer `name`
    (`owner` names it in errors); `instance` tells this process's tables
    apart when no cluster does."""
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

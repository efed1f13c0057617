"""Which route a HetEmbedding's rows take, chosen from the arguments that
choose one (the cache's, sync, window, hot_rows, route), and what the route
stands on: the table's shards and the workers' caches where the strategy
places them, FAE's hot block and Herald's plan, with Horovod's collectives
handed in."""
import collections
import dataclasses

import tensorflow as tf

from het_tf.distribute import horovod
from het_tf.keras_layers.layer_settings import placement
from het_tf.runtime import combinations, routes
from het_tf.runtime.cache import WorkerCache
from het_tf.runtime.config import (
    AUTO,
    UNBOUNDED,
    CacheConfig,
    cache_rows,
    check_sync,
    check_window,
    is_whole,
    staleness_bounds,
    warn_renamed,
)
from het_tf.runtime.herald_plan import HeraldPlan
from het_tf.runtime.hot_block import HotBlock
from het_tf.runtime.routes import CachedRoute, DirectRoute, HeraldRoute, HotRowsRoute
from het_tf.runtime.table import ShardedTable
from het_tf.runtime.wire_dtype import check_wire_dtype

# What the layer's arguments chose: the cache (None: off), the most hot rows
# (0: none), a registered route's factory (None: the others choose), the
# Combination they make, checked again at build with the strategy's mode, and
# whether the cache's size was left to the layer (cache_capacity="auto").
Choice = collections.namedtuple(
    "Choice", "cache_config hot_rows route_factory combination auto_capacity")

# What a layer's rows stand on. `strategy` is ParameterServerStrategy's
# (its coordinator schedules the workers' steps), or None; `cache` is None
# with the cache off; `combination` is the Choice's with the strategy's mode.
Built = collections.namedtuple("Built", "strategy table cache route combination")


def renamed_sync(sync, scheduler, owner):
    """(sync, scheduler): sync="herald" named the scheduler before it had an
    argument of its own; it still works for one release, with a warning."""
    if not (isinstance(sync, str) and sync == "herald"):
        return sync, scheduler
    if scheduler not in (None, "herald"):
        raise ValueError(f"{owner}: sync='herald' is scheduler='herald', and scheduler is "
                         f"{scheduler!r}; give sync='refresh', scheduler='herald'")
    warn_renamed(f"{owner}: sync='herald'", "sync='refresh', scheduler='herald'")
    return "refresh", "herald"


def choose(owner, input_dim, *, cache_capacity, cache_policy, staleness, read_staleness,
           write_staleness, pin_threshold, sync, scheduler, window, hot_rows, route,
           on_full="refuse", ttl=None, admit_after=None, wire_dtype="float32"):
    """The layer's Choice: each argument checked alone, then all of them
    against the table of what goes together (combinations.py); `owner`
    names the layer in errors."""
    auto_capacity = isinstance(cache_capacity, str) and cache_capacity == AUTO
    # "auto" without a vocabulary keeps no cache: one process needs none,
    # and build refuses it elsewhere, where it cannot size one.
    unsized = auto_capacity and input_dim is None
    rows = 0 if unsized else cache_rows(cache_capacity, input_dim, owner)
    if unsized:
        # Both bounds 0 keep no cache anywhere: nothing to size.
        read, write, _ = staleness_bounds(owner, staleness, read_staleness, write_staleness)
        auto_capacity = combinations.caches(1, (read, write) == (0, 0), sync, scheduler)
    check_sync(sync, scheduler, owner)
    check_window(window, owner)
    check_wire_dtype(wire_dtype, owner)
    bounded = (not (isinstance(staleness, str) and staleness == AUTO)
               or read_staleness is not None or write_staleness is not None)
    if scheduler == "herald" or rows == 0:
        bounds = None  # Herald's plan, not a bound, decides what goes when
    else:
        bounds = staleness_bounds(owner, staleness, read_staleness, write_staleness)
    cache = combinations.caches(rows, bounds is not None and bounds[:2] == (0, 0), sync,
                                scheduler)
    hot_rows = _hot_rows(hot_rows, input_dim, owner)
    combination = combinations.Combination(
        cache=cache, sync=sync, scheduler=scheduler,
        staleness=bounded, window=window, hot_rows=hot_rows > 0, route=route is not None,
        evict=on_full == "evict" or ttl is not None, admits=admit_after is not None,
        wire_dtype=wire_dtype)
    if auto_capacity and unsized and _asks_for_cache(combination):
        raise ValueError(_unsized_auto(owner, "another setting asks for a cache"))
    combinations.check(combination, combinations.spell_argument, f"{owner}: ")
    policy = cache_policy if isinstance(cache_policy, str) else repr(cache_policy)
    cache_config = None
    if scheduler == "herald":
        cache_config = CacheConfig(rows, policy, 0, UNBOUNDED, pin_threshold, sync=sync,
                                   window=window, scheduler=scheduler).validate(owner)
    elif cache:
        read, write, ramp = bounds
        cache_config = CacheConfig(rows, policy, read, write, pin_threshold,
                                   staleness_ramp=ramp, sync=sync,
                                   wire_dtype=wire_dtype).validate(owner)
    factory = None if route is None else routes.registered(route, owner)
    return Choice(cache_config, hot_rows, factory, combination, auto_capacity)


def build(name, owner, table_config, choice, instance):
    """The table, cache and route of the layer `name` as its Choice says
    (`owner` names it in errors); `instance` tells this process's tables
    apart when no cluster does."""
    cache_config, hot_rows, route_factory, combination, _ = choice
    shard_devices, worker_devices, instance = placement(instance)
    combination = dataclasses.replace(combination, mode=mode_of(worker_devices))
    if _cache_saves_nothing(choice, combination):
        cache_config, combination = None, dataclasses.replace(combination, cache=False)
    if (choice.auto_capacity and table_config.vocabulary_size == UNBOUNDED
            and combination.mode != "local"):
        raise ValueError(_unsized_auto(owner, f"in {combination.mode} mode the cache is on"))
    combinations.check(combination, combinations.spell_argument, f"{owner}: ")
    _check_room(owner, table_config, cache_config, worker_devices)
    strategy = tf.distribute.get_strategy() if worker_devices is not None else None
    table = ShardedTable(table_config, shard_devices, instance)
    cache = None
    if cache_config is not None:
        cache = WorkerCache(table, cache_config, shared_name=f"het_cache/{name}/{instance}",
                            worker_devices=worker_devices)
    hot = _hot_block(table, hot_rows, worker_devices, instance)
    plan = _plan(cache)
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
    return Built(strategy, table, cache, route, combination)


def _cache_saves_nothing(choice, combination):
    """Whether cache_capacity="auto" leaves the cache off: in one process,
    where a hit reads the same memory the table's row is in and the rows
    need no sync, unless another setting asks for the cache (a sync by
    check, a staleness bound, a registered route, or what needs the cache
    on). Off, reads and updates are exact, as a cache that keeps up would
    give them."""
    return (choice.auto_capacity and combination.mode == "local" and combination.cache
            and not _asks_for_cache(combination))


def _asks_for_cache(combination):
    """Whether a setting besides cache_capacity asks for the cache: one that
    is refused with the cache off and not with it on."""
    off = combinations.refusals(dataclasses.replace(combination, cache=False))
    on = combinations.refusals(dataclasses.replace(combination, cache=True))
    return (combination.sync != "refresh" or combination.staleness or combination.route
            or any(rule not in on for rule in off))


def _unsized_auto(owner, why):
    return (f"{owner}: cache_capacity='auto' caches a tenth of input_dim, but input_dim is "
            f"None (dynamic keys) and {why}; give cache_capacity as a row count")


def _check_room(owner, table_config, cache_config, worker_devices):
    """An evicting table keeps every row a worker's cache holds: caches
    that together could hold its whole limit would leave it nothing to
    evict."""
    if not table_config.evicting or cache_config is None:
        return
    if worker_devices is not None:
        workers = len(worker_devices)
    else:
        workers = 1 if horovod.num_ps() is None else horovod.size()
    if cache_config.capacity * workers >= table_config.max_rows:
        raise ValueError(f"{owner}: on_full='evict' keeps the rows workers' caches hold, and "
                         f"{workers} cache(s) of {cache_config.capacity} rows could hold all of "
                         f"max_rows={table_config.max_rows}; give the caches fewer rows or the "
                         "table more")


def _hot_block(table, hot_rows, worker_devices, instance):
    """The hot block, for hot_rows in hybrid or local mode (under
    ParameterServerStrategy the workers cannot exchange gradients: the hot
    rows are pinned in their caches instead)."""
    if not hot_rows or worker_devices is not None:
        return None
    if horovod.num_ps() is None:
        return HotBlock(table, instance)
    return HotBlock(table, instance, exchange=horovod.allgather, ranks=horovod.size())


def mode_of(worker_devices):
    """The combinations' mode of the strategy in force, as placement found it."""
    if worker_devices is not None:
        return "ps"
    return "local" if horovod.num_ps() is None else "hybrid"


def _plan(cache):
    """Herald's plan, for scheduler "herald" with more than one Horovod rank
    (one process alone has no one to push for)."""
    if cache is None or cache.config.scheduler != "herald":
        return None
    if horovod.num_ps() is None or horovod.size() == 1:
        return None
    return HeraldPlan(cache, horovod.size(), horovod.rank(), horovod.allgather,
                      horovod.sum_over_ranks)


def _hot_rows(hot_rows, input_dim, owner):
    """The most hot rows the layer replicates (0: none): FAE's hot block
    (docs/fae.md)."""
    if hot_rows is None or hot_rows == 0:
        return 0
    if not is_whole(hot_rows, at_least=0):
        raise ValueError(f"{owner}: hot_rows must be an int >= 0 or None, got {hot_rows!r}")
    if input_dim is not None and hot_rows > input_dim:
        raise ValueError(f"{owner}: hot_rows={hot_rows} is more rows than the table's "
                         f"{input_dim} (input_dim)")
    return int(hot_rows)

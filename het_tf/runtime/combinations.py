"""Which settings go together: one table, as data. HetEmbedding (through
route_choice.py), `het-tf train`'s argument check and the dataset
transforms (the lookahead, Herald's allocation) ask it; none restates it.

Each setting is checked alone where it is made (config.py and the layer's
settings); this table holds only what one setting says about another. A
Combination gives each setting a value; a Rule names the settings it is
about, when it refuses, and why. A refusal names the settings as the
caller spells them: a layer's arguments, or the command's flags."""
import collections
import dataclasses
import typing

EMBEDDINGS = ("het", "keras", "tfra")
MODES = ("local", "ps", "hybrid")


@dataclasses.dataclass(frozen=True)
class Combination:
    embedding: str = "het"  # the embedding layer: HetEmbedding, Keras' or TFRA's
    mode: typing.Optional[str] = None  # local, ps or hybrid; None: not known yet
    workers: int = 1  # worker processes (Horovod ranks in hybrid mode)
    cache: bool = True  # the workers cache rows (off: capacity 0, or both bounds 0)
    sync: str = "refresh"  # the protocol: refresh or check
    scheduler: typing.Optional[str] = None  # None (the bounds) or herald (Herald's plan)
    staleness: bool = False  # a staleness bound is given (not "auto")
    window: int = 1  # the batches Herald's plan looks ahead over
    hot_rows: bool = False  # FAE's hot rows
    route: bool = False  # a registered route of one's own
    lookahead: typing.Optional[bool] = None  # None: not asked for either way
    allocation: bool = False  # Herald's allocation moves samples between ranks
    evict: bool = False  # rows may leave the table: on_full "evict", or a ttl
    admits: bool = False  # ids become rows after admit_after training reads
    wire_dtype: str = "float32"  # the type rows travel in between caches and shards


Rule = collections.namedtuple("Rule", "settings refuses reason")


def caches(rows, bounds_zero, sync, scheduler):
    """Whether a layer keeps a cache: rows to hold, unless both staleness
    bounds are 0 under a sync by refresh with no scheduler. Then a cached
    copy could only serve what the shards hold, while its clock checks,
    slot transfers and push acknowledgements would cost more bytes than the
    direct path, whose numbers are the same (docs/consistency.md). HET's own
    rule (sync "check") keeps its cache, as HET's s=0 does: the baseline that
    Herald's traffic is measured against."""
    return rows > 0 and not (bounds_zero and sync == "refresh" and scheduler is None)


def stages(c):
    """Whether the lookahead stages batches for a layer of these settings,
    and so whether it is on where not asked for either way: for a cache's
    prefetch (refresh) or for Herald's plan over a window. A hot block's
    rows pass by the cache (under ParameterServerStrategy hot rows are
    pinned in it, and prefetch); a route of one's own is staged for, and
    prefetches if it is a cached one."""
    return (c.embedding == "het" and c.cache and not c.admits
            and (c.mode == "ps" or not c.hot_rows)
            and ((c.sync == "refresh" and c.scheduler is None)
                 or (c.scheduler == "herald" and c.window > 1)))


def _wire16(c):
    return c.wire_dtype != "float32"


RULES = (
    Rule(("embedding", "sync"), lambda c: c.embedding != "het" and c.sync != "refresh",
         "sync is how HetEmbedding's caches meet the shards"),
    Rule(("embedding", "staleness"), lambda c: c.embedding != "het" and c.staleness,
         "staleness bounds HetEmbedding's caches"),
    Rule(("embedding", "hot_rows"), lambda c: c.embedding != "het" and c.hot_rows,
         "hot rows replicate HetEmbedding rows"),
    Rule(("embedding", "scheduler"), lambda c: c.embedding != "het" and c.scheduler,
         "Herald's plan schedules HetEmbedding's cached rows"),
    Rule(("scheduler", "sync"), lambda c: c.scheduler == "herald" and c.sync != "refresh",
         "Herald's plan drives a sync by refresh"),
    Rule(("scheduler", "cache"), lambda c: c.scheduler == "herald" and not c.cache,
         "Herald's plan schedules the cached rows, so it needs the cache on"),
    Rule(("scheduler", "staleness"), lambda c: c.scheduler == "herald" and c.staleness,
         "Herald's plan is exact and takes no staleness bound"),
    Rule(("window", "scheduler"), lambda c: c.window > 1 and c.scheduler != "herald",
         "the window is the lookahead of Herald's plan (scheduler herald)"),
    Rule(("scheduler", "mode"), lambda c: c.scheduler == "herald" and c.mode == "ps",
         "ParameterServerStrategy's workers cannot share the ids they read; Herald's plan "
         "needs hybrid mode or one process"),
    Rule(("hot_rows", "cache"), lambda c: c.hot_rows and not c.cache,
         "FAE trains the cold rows through the cache, which must be on"),
    Rule(("hot_rows", "scheduler"), lambda c: c.hot_rows and c.scheduler == "herald",
         "choose FAE's hot block or Herald's plan"),
    Rule(("route", "hot_rows"), lambda c: c.route and c.hot_rows,
         "a route of one's own takes the place of the hot block's"),
    Rule(("route", "scheduler"), lambda c: c.route and c.scheduler == "herald",
         "a route of one's own takes the place of Herald's"),
    Rule(("lookahead", "admits"), lambda c: c.lookahead and c.admits,
         "a step counts once toward an id's admission, and the lookahead would ask for it "
         "twice (ahead and in the step)"),
    Rule(("lookahead",), lambda c: c.lookahead and not stages(c),
         "the lookahead stages ids for HetEmbedding caches that sync by refresh, or by "
         "Herald's plan over a window, and not for a hot block's rows"),
    Rule(("lookahead", "scheduler", "window"),
         lambda c: c.lookahead is False and c.scheduler == "herald" and c.window > 1,
         "the window's batches are the ones the lookahead stages"),
    Rule(("allocation", "mode"), lambda c: c.allocation and c.mode not in (None, "hybrid"),
         "the allocation moves samples between Horovod ranks: it needs hybrid mode"),
    Rule(("allocation", "workers"), lambda c: c.allocation and c.workers < 2,
         "the allocation moves samples between Horovod ranks: it needs 2 or more"),
    Rule(("allocation", "embedding"), lambda c: c.allocation and c.embedding != "het",
         "the allocation sends samples to the ranks whose HetEmbedding caches hold their "
         "rows"),
    Rule(("allocation", "cache"), lambda c: c.allocation and not c.cache,
         "the allocation sends samples to the ranks whose caches hold their rows"),
    Rule(("allocation", "hot_rows"), lambda c: c.allocation and c.hot_rows,
         "the allocation counts the rows each rank caches, and a hot block's rows are in "
         "no cache"),
    Rule(("allocation", "sync"), lambda c: c.allocation and c.sync == "check",
         "the allocation sends samples to caches that sync by refresh or by Herald's plan"),
    Rule(("embedding", "evict"), lambda c: c.embedding != "het" and c.evict,
         "eviction and expiry drop HetEmbedding's rows"),
    Rule(("evict", "sync"), lambda c: c.evict and c.cache and c.sync == "check",
         "a shard that drops rows keeps those workers' caches hold, and only a sync by "
         "refresh tells it which they are"),
    Rule(("admits", "scheduler"), lambda c: c.admits and c.scheduler == "herald",
         "Herald's plan reads its direct rows apart from the cache, and would count them "
         "toward admission apart too"),
    Rule(("admits", "embedding"), lambda c: c.admits and c.embedding != "het",
         "admission decides when an id becomes a HetEmbedding row"),
    Rule(("wire_dtype", "embedding"), lambda c: _wire16(c) and c.embedding != "het",
         "the wire dtype is the type HetEmbedding's caches and shards exchange rows in"),
    Rule(("wire_dtype", "cache"), lambda c: _wire16(c) and not c.cache,
         "16-bit rows travel on the cache's exchange, and the rounding stays in the cache "
         "until the row's next push"),
    Rule(("wire_dtype", "sync"), lambda c: _wire16(c) and c.sync != "refresh",
         "16-bit rows travel on the exchange of a sync by refresh; sync 'check' sends float32"),
    Rule(("wire_dtype", "scheduler"), lambda c: _wire16(c) and c.scheduler == "herald",
         "Herald's plan reads and writes its direct rows in float32"),
    Rule(("evict", "scheduler"), lambda c: c.evict and c.scheduler == "herald",
         "Herald's plan keeps its direct rows' updates between steps, on rows a shard that "
         "drops rows would not know to keep"),
)


def refusals(combination):
    """The rules `combination` breaks, in RULES' order."""
    return [rule for rule in RULES if rule.refuses(combination)]


def check(combination, spell, who):
    """Raises ValueError for the first rule `combination` breaks, naming its
    settings as `spell(setting, combination)` writes them, after `who`."""
    for rule in refusals(combination):
        first, *others = (spell(setting, combination) for setting in rule.settings)
        named = first + (" with " + " and ".join(others) if others else "")
        raise ValueError(f"{who}{named}: {rule.reason}")


def spell_argument(setting, c):
    """A setting as HetEmbedding's arguments (and the calls it meets) say it."""
    return {
        "embedding": "HetEmbedding",
        "mode": {"ps": "ParameterServerStrategy", "hybrid": "hybrid mode",
                 "local": "one process"}.get(c.mode, "this strategy"),
        "workers": f"{c.workers} Horovod rank(s)",
        "cache": "the cache on" if c.cache else
                 "the cache off (cache_capacity=0, or staleness 0 for reads and writes)",
        "sync": f"sync={c.sync!r}",
        "scheduler": f"scheduler={c.scheduler!r}",
        "staleness": "a staleness bound (staleness, read_staleness or write_staleness)",
        "window": f"window={c.window}",
        "hot_rows": "hot_rows",
        "route": "route=",
        "lookahead": "het_tf.lookahead",
        "allocation": "the allocation",
        "evict": "on_full='evict' (or a ttl)",
        "admits": "admit_after",
        "wire_dtype": f"wire_dtype={c.wire_dtype!r}",
    }[setting]


def spell_flag(setting, c):
    """A setting as `het-tf train`'s flags say it."""
    return {
        "embedding": f"--embedding {c.embedding}",
        "mode": f"--mode {c.mode}",
        "workers": f"--workers {c.workers}",
        "cache": "the cache on" if c.cache else "--cache-capacity 0 (or --staleness 0)",
        "sync": f"--sync {c.sync}",
        "scheduler": f"--scheduler {c.scheduler}" if c.scheduler else "no --scheduler",
        "staleness": "--staleness",
        "window": f"--window {c.window}",
        "hot_rows": "--hot-rows / --hot-bytes",
        "route": "a route of one's own",
        "lookahead": "--lookahead" if c.lookahead else "--no-lookahead",
        "allocation": "--allocate-every",
        "evict": "--on-full evict (or --ttl)",
        "admits": "--admit-after",
        "wire_dtype": f"--wire-dtype {c.wire_dtype}",
    }[setting]

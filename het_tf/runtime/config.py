"""Validated settings of a table and of a worker cache.

Everything a user can get wrong is checked here, in Python, so that errors
name the table and say what would be right before any op runs.
"""
import dataclasses
import math
import numbers
import re
import typing
import warnings

import numpy as np

from het_tf.runtime import combinations, row_lifetime
from het_tf.runtime.wire_dtype import check_wire_dtype

OPTIMIZERS = ("sgd", "adagrad", "adam", "ftrl")
# Row constraints the table applies after each update and merge of a row
# (the core's ConstraintKind; Keras' constraints taken over one row).
CONSTRAINTS = ("none", "non_neg", "max_norm", "unit_norm", "min_max_norm")
INITIALIZERS = ("uniform", "normal", "truncated_normal", "constant", "zeros")
POLICIES = ("lru", "lfu", "lfu_opt")
# The protocol: how a cache's training lookups meet the shards (docs/consistency.md).
# "refresh", the shards tell the worker which copies went stale and a hit
# costs no bytes; "check", HET's, every key goes with its clock.
SYNC_MODES = ("refresh", "check")
# The scheduler: what decides when rows move, beside the protocol. None, the
# staleness bounds; "herald", Herald's plan: exact, a sync by refresh with a read
# bound of 0 and no write bound, each rank pushing the rows others read (docs/herald.md).
SCHEDULERS = (None, "herald")
# Slots per row of each optimizer, as the C++ core keeps them.
NUM_SLOTS = {"sgd": 0, "adagrad": 1, "adam": 2, "ftrl": 2}
# The slot of a sum or average of squared gradients, whose part of a cache's
# state delta is never negative (the core's NonNegativeSlot).
SQUARED_GRADIENT_SLOT = {"adagrad": 0, "adam": 1, "ftrl": 0}
UNBOUNDED = -1
# Fixed vocabularies up to this many floats may be made whole at once: a
# Keras initializer evaluated for every row, or an export of every row.
MATERIALIZE_LIMIT = 1 << 27
# staleness="auto": bounds of AUTO_STALENESS updates, but never more than a
# 1/AUTO_STALENESS_RAMP share of this worker's training steps, so that a short
# run is not all inside one bound (docs/consistency.md, "The default bound").
AUTO = "auto"
AUTO_STALENESS = 100
AUTO_STALENESS_RAMP = 10
AUTO_CACHE_FRACTION = 0.1  # cache_capacity="auto"; one process: none (route_choice)

_NAME = re.compile(r"^[A-Za-z0-9_.\-/]+$")


def table_label(name):
    """How an error names a table (the core's TableLabel)."""
    return f"table '{name}'"


def _fail(owner, message):
    raise ValueError(f"{owner}: {message}")


def parse_staleness(value, owner, what="staleness"):
    """A bound as the ops take it: an int >= 0, or UNBOUNDED for None,
    math.inf or "inf". Text from a command line parses the same way."""
    if isinstance(value, str):
        text = value.strip().lower()
        if text in ("inf", "unbounded", "none"):
            return UNBOUNDED
        if text.isdigit():
            return int(text)
    elif value is None or (isinstance(value, float) and math.isinf(value) and value > 0):
        return UNBOUNDED
    elif is_whole(value, at_least=0):
        return int(value)
    auto = "'auto', " if what == "staleness" else ""
    _fail(owner, f"{what} must be {auto}an int >= 0, or None / math.inf / 'inf' for unbounded; "
          f"got {value!r}")


def cache_rows(capacity, vocabulary_size, owner):
    """Rows a cache holds: a fraction in (0, 1) of a known vocabulary, or a row count; 0: none."""
    if isinstance(capacity, str) and capacity == AUTO:
        capacity = AUTO_CACHE_FRACTION
    if (isinstance(capacity, bool) or not isinstance(capacity, numbers.Real) or capacity < 0
            or (isinstance(capacity, float) and capacity == 1)):  # 1.0 meant every row?
        _fail(owner, "cache_capacity must be 'auto', a fraction in (0, 1), an int row count, "
              f"or 0 for no cache; got {capacity!r}")
    if 0 < capacity < 1:
        if vocabulary_size is None:
            _fail(owner, f"cache_capacity={capacity} is a fraction of input_dim, but input_dim "
                  "is None (dynamic keys); give a row count instead")
        return max(1, int(round(capacity * vocabulary_size)))
    if not float(capacity).is_integer():
        _fail(owner, "cache_capacity must be a fraction in (0, 1) or a whole number of rows; "
              f"got {capacity!r}")
    return int(capacity)


def staleness_bounds(owner, staleness=AUTO, read_staleness=None, write_staleness=None):
    """(read bound, write bound, ramp) of a cache: read_staleness and
    write_staleness default to staleness; "auto" is AUTO_STALENESS, ramped."""
    auto = isinstance(staleness, str) and staleness.strip().lower() == AUTO
    both = AUTO_STALENESS if auto else parse_staleness(staleness, owner)
    read = both if read_staleness is None else parse_staleness(read_staleness, owner,
                                                               "read_staleness")
    write = both if write_staleness is None else parse_staleness(write_staleness, owner,
                                                                 "write_staleness")
    return read, write, AUTO_STALENESS_RAMP if auto else 0


@dataclasses.dataclass(frozen=True)
class OptimizerConfig:
    """A server-side sparse optimizer. The learning rate is not part of it:
    it is fed at every push so that schedules work."""

    name: str = "adagrad"
    beta_1: float = 0.9
    beta_2: float = 0.999
    epsilon: float = 1e-7
    initial_accumulator_value: float = 0.1
    l1: float = 0.0
    l2: float = 0.0
    learning_rate_power: float = -0.5
    ftrl_beta: float = 0.0
    # The projection of a row's values after each update and merge
    # (docs/keras_layer.md, "Constraints").
    constraint: str = "none"
    constraint_min_value: float = 0.0  # min_max_norm
    constraint_max_value: float = 0.0  # max_norm, min_max_norm
    constraint_rate: float = 1.0       # min_max_norm

    def validate(self, owner):
        """Checks what the core would refuse; `owner` names the table in errors."""
        if self.name not in OPTIMIZERS:
            _fail(owner, f"unknown optimizer {self.name!r}; expected one of "
                  f"{', '.join(OPTIMIZERS)}")
        if self.constraint not in CONSTRAINTS:
            _fail(owner, f"unknown constraint {self.constraint!r}; expected one of "
                  f"{', '.join(CONSTRAINTS)}")
        low, high, rate = (self.constraint_min_value, self.constraint_max_value,
                           self.constraint_rate)
        if self.constraint in ("max_norm", "min_max_norm") and not (0 <= high < math.inf):
            _fail(owner, f"a {self.constraint} constraint needs a finite max_value >= 0, "
                  f"got {high!r}")
        if self.constraint == "min_max_norm" and not (0 <= low <= high and 0 <= rate <= 1):
            _fail(owner, "a min_max_norm constraint needs 0 <= min_value <= max_value and "
                  f"0 <= rate <= 1; got min_value={low!r}, max_value={high!r}, rate={rate!r}")

    def op_attrs(self):
        return dict(optimizer=self.name, beta_1=self.beta_1, beta_2=self.beta_2,
                    epsilon=self.epsilon,
                    initial_accumulator_value=self.initial_accumulator_value,
                    l1=self.l1, l2=self.l2, learning_rate_power=self.learning_rate_power,
                    ftrl_beta=self.ftrl_beta, constraint=self.constraint,
                    constraint_min_value=self.constraint_min_value,
                    constraint_max_value=self.constraint_max_value,
                    constraint_rate=self.constraint_rate)


@dataclasses.dataclass(frozen=True)
class TableConfig:
    name: str
    dim: int
    vocabulary_size: int = UNBOUNDED  # -1: dynamic int64 keys
    initializer: str = "uniform"
    initializer_a: float = -0.05  # uniform: low; normal: mean; constant: value
    initializer_b: float = 0.05   # uniform: high; normal: stddev
    seed: int = 0
    optimizer: OptimizerConfig = OptimizerConfig()
    # The most rows the table may hold, split over its shards; past it,
    # requests that would create rows fail with ResourceExhausted and change
    # nothing (on_full "refuse"), or first evict the least recently or least
    # often used rows (by `eviction`) that no worker's cache holds
    # (row_lifetime.py). None: no limit.
    max_rows: typing.Optional[int] = None
    on_full: str = "refuse"
    eviction: str = "lru"
    # Seconds after which a row no request used (and no cache holds) is
    # dropped; None: never.
    ttl: typing.Optional[int] = None
    # Training reads an id needs before it becomes a row (row_lifetime.py);
    # until then it reads zeros and its updates are dropped. None: the first.
    admit_after: typing.Optional[int] = None
    # How errors name the table: table 'name' unless the caller (a layer)
    # names it its own way.
    owner: typing.Optional[str] = dataclasses.field(default=None, compare=False, repr=False)

    def __post_init__(self):
        if not isinstance(self.name, str) or not _NAME.match(self.name):
            raise ValueError(f"{self.owner or 'a table'}: table name {self.name!r} must be a "
                             "non-empty string of letters, digits and _ . - /")
        owner = self.label
        if not is_whole(self.dim) or self.dim < 1:
            _fail(owner, f"output dimension must be a positive int, got {self.dim!r}")
        if not is_whole(self.vocabulary_size) or (self.vocabulary_size < 1
                                                  and self.vocabulary_size != UNBOUNDED):
            _fail(owner, "vocabulary size must be a positive int, or None for dynamic "
                  f"int64 keys; got {self.vocabulary_size!r}")
        if self.initializer not in INITIALIZERS:
            _fail(owner, f"unknown initializer {self.initializer!r}; expected one of "
                  f"{', '.join(INITIALIZERS)}")
        self.optimizer.validate(owner)
        if not is_whole(self.seed):
            _fail(owner, f"seed must be an int, got {self.seed!r}")
        row_lifetime.check(owner, self.max_rows, self.on_full, self.eviction, self.ttl,
                           self.admit_after, self.fixed_vocabulary)

    @property
    def label(self):
        """How errors name this table."""
        return self.owner or table_label(self.name)

    @property
    def fixed_vocabulary(self):
        return self.vocabulary_size != UNBOUNDED

    @property
    def num_slots(self):
        return NUM_SLOTS[self.optimizer.name]

    @property
    def state_bytes(self):
        """Bytes of one row's whole state outside the shards: its values and
        optimizer slots, float32, and an 8-byte clock (Adam's step count)."""
        return 4 * self.dim * (1 + self.num_slots) + 8

    def initial_slots(self, rows):
        """The optimizer slots of `rows` new rows, [rows, num_slots, dim]
        float32: Adagrad's and Ftrl's accumulators start at their initial
        value, the rest at 0 (as the shards start them)."""
        slots = np.zeros((rows, self.num_slots, self.dim), np.float32)
        if self.optimizer.name in ("adagrad", "ftrl"):
            slots[:, 0, :] = self.optimizer.initial_accumulator_value
        return slots

    @property
    def evicting(self):
        return self.on_full == "evict"

    def shard_max_rows(self, num_shards, shard=0):
        """Shard `shard`'s share of max_rows (row_lifetime.shard_share)."""
        return row_lifetime.shard_share(self.label, self.max_rows, num_shards, shard)

    def op_attrs(self, num_shards=1, shard=0):
        max_rows = -1 if (m := self.shard_max_rows(num_shards, shard)) is None else m
        return dict(table_name=self.name, dim=self.dim, vocabulary_size=self.vocabulary_size,
                    max_rows=max_rows, on_full=self.on_full, eviction=self.eviction,
                    ttl_seconds=-1 if self.ttl is None else int(self.ttl),
                    admit_after=0 if self.admit_after is None else int(self.admit_after),
                    **self.initializer_attrs(), **self.optimizer.op_attrs())

    def initializer_attrs(self):
        """How the shards make new rows, as the table and cache ops take it."""
        zeros = self.initializer == "zeros"
        return dict(initializer="constant" if zeros else self.initializer, seed=self.seed,
                    initializer_a=0.0 if zeros else self.initializer_a,
                    initializer_b=self.initializer_b)


# A cache keeps 80 staged batches (StagedBatches::kMaxStaged): Herald's
# window, or the lookahead's batches, and the few between pipeline and steps.
MAX_WINDOW = 32
LOOKAHEAD_BATCHES = 64  # het_tf.lookahead's most, and its default (docs/benchmarks.md)


@dataclasses.dataclass(frozen=True)
class CacheConfig:
    capacity: int  # rows
    policy: str = "lfu"
    read_staleness: int = 100   # -1: unbounded
    write_staleness: int = 100  # -1: unbounded
    pin_threshold: int = 100    # lfu_opt: touches after which a row is pinned
    # > 0: the bounds in force are at most this worker's training steps /
    # staleness_ramp, until they reach the bounds above (docs/consistency.md).
    staleness_ramp: int = 0
    sync: str = "refresh"  # the protocol, one of SYNC_MODES
    # Herald's plan: the batches it looks ahead over, the step's own and the
    # window - 1 the input pipeline staged after it (docs/herald.md).
    window: int = 1
    scheduler: typing.Optional[str] = None  # one of SCHEDULERS
    wire_dtype: str = "float32"  # the type rows travel in (wire_dtype.py)

    def __post_init__(self):
        # sync="herald" named the scheduler before it had its own field.
        if self.sync == "herald" and self.scheduler in (None, "herald"):
            warn_renamed("CacheConfig(sync='herald')", "CacheConfig(scheduler='herald')")
            object.__setattr__(self, "sync", "refresh")
            object.__setattr__(self, "scheduler", "herald")

    def validate(self, owner):
        """Checks every field; `owner` names the table or layer in errors."""
        if not is_whole(self.capacity) or self.capacity < 1:
            _fail(owner, f"cache capacity must be a positive number of rows, got {self.capacity!r}")
        if self.policy not in POLICIES:
            _fail(owner, f"unknown cache policy {self.policy!r}; expected one of "
                  f"{', '.join(POLICIES)}")
        for field in ("read_staleness", "write_staleness"):
            value = getattr(self, field)
            if not is_whole(value) or value < UNBOUNDED:
                _fail(owner, f"{field} must be an int >= 0, or {UNBOUNDED} for unbounded; "
                      f"got {value!r}")
        if not is_whole(self.pin_threshold) or self.pin_threshold < 1:
            _fail(owner, f"pin_threshold must be a positive int, got {self.pin_threshold!r}")
        if not is_whole(self.staleness_ramp) or self.staleness_ramp < 0:
            _fail(owner, "staleness_ramp must be an int >= 0 (0: no ramp), got "
                  f"{self.staleness_ramp!r}")
        check_sync(self.sync, self.scheduler, owner)
        if self.scheduler == "herald" and (self.read_staleness, self.write_staleness,
                                           self.staleness_ramp) != (0, UNBOUNDED, 0):
            _fail(owner, "scheduler 'herald' is exact: it reads with a bound of 0 and writes "
                  "with none; give it no staleness")
        check_window(self.window, owner)
        check_wire_dtype(self.wire_dtype, owner)
        combinations.check(combinations.Combination(sync=self.sync, scheduler=self.scheduler,
                                                    window=self.window,
                                                    wire_dtype=self.wire_dtype),
                           combinations.spell_argument, f"{owner}: ")
        return self


def check_window(window, owner):
    """Herald's window: 1 to MAX_WINDOW batches (combinations.py: which sync takes more)."""
    if not is_whole(window) or not 1 <= window <= MAX_WINDOW:
        _fail(owner, f"window must be a number of batches from 1 (the step's own) to "
              f"{MAX_WINDOW}, got {window!r}")


def check_sync(sync, scheduler, owner):
    """The protocol and the scheduler, each alone."""
    if not isinstance(sync, str) or sync not in SYNC_MODES:
        _fail(owner, f"unknown sync {sync!r}; expected one of {', '.join(SYNC_MODES)}")
    if scheduler not in SCHEDULERS:
        _fail(owner, f"unknown scheduler {scheduler!r}; expected None or 'herald'")


def warn_renamed(old, new, stacklevel=4):
    """A setting's old spelling still works for one release, with a warning
    on the user's line: `stacklevel` frames up from here (the default: the
    caller of the function that called the function calling this)."""
    warnings.warn(f"{old} is deprecated and goes in the next release: use {new}",
                  DeprecationWarning, stacklevel=stacklevel)


def parse_stay_bonus(value, owner):
    """Herald's allocation's stay bonus: the rows a sample must gain to leave
    the rank that read it, an int >= 0, or "auto" (None): its own bytes over
    a row's. Text from a command line parses the same way."""
    if value is None or value == "auto":
        return None
    if isinstance(value, str) and value.isdigit():
        value = int(value)
    if not is_whole(value) or value < 0:
        _fail(owner, f"stay_bonus must be 'auto' or a number of rows >= 0, got {value!r}")
    return value


def is_whole(value, at_least=None):
    """True for a whole number (a Python or NumPy int, never a bool) of at
    least `at_least`: the one test of every int setting."""
    return (isinstance(value, numbers.Integral) and not isinstance(value, bool)
            and (at_least is None or value >= at_least))

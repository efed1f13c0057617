"""When a dynamic table makes and drops rows: the training reads an id
needs before it becomes a row (admit_after); the row limit (max_rows),
split over the shards, and what a full shard does with a request for new
rows (on_full), evicting by which rule (eviction); and the seconds after
which a row no one used expires (ttl). The shards keep to it
(cc_ops/embedding/core/row_eviction.h); docs/keras_layer.md says it for
users."""
import numbers

# A shard counts sightings in bytes (row_admission.h).
MAX_ADMIT_AFTER = 255

# What a table at its max_rows does with a request for new rows, and which
# rows it evicts first.
ON_FULL = ("refuse", "evict")
EVICTIONS = ("lru", "lfu")


def check(owner, max_rows, on_full, eviction, ttl, admit_after, fixed_vocabulary):
    """Raises ValueError, naming `owner`, for settings that cannot work."""
    if admit_after is not None and (not isinstance(admit_after, numbers.Integral)
                                    or isinstance(admit_after, bool)
                                    or not 1 <= admit_after <= MAX_ADMIT_AFTER):
        raise ValueError(f"{owner}: admit_after must be a whole number of steps from 1 to "
                         f"{MAX_ADMIT_AFTER}, or None; got {admit_after!r}")
    if admit_after is not None and fixed_vocabulary:
        raise ValueError(f"{owner}: admit_after is for dynamic tables (input_dim=None): a "
                         "fixed-vocabulary table holds every id it may see")
    if ttl is not None and (not isinstance(ttl, numbers.Integral) or isinstance(ttl, bool)
                            or ttl < 1):
        raise ValueError(f"{owner}: ttl must be a positive whole number of seconds or None, "
                         f"got {ttl!r}")
    if ttl is not None and fixed_vocabulary:
        raise ValueError(f"{owner}: ttl is for dynamic tables (input_dim=None): a "
                         "fixed-vocabulary table holds every id it may see")
    if max_rows is not None and (not isinstance(max_rows, numbers.Integral)
                                 or isinstance(max_rows, bool) or max_rows < 1):
        raise ValueError(f"{owner}: max_rows must be a positive int or None, got {max_rows!r}")
    if on_full not in ON_FULL:
        raise ValueError(f"{owner}: on_full must be one of {', '.join(map(repr, ON_FULL))}, "
                         f"got {on_full!r}")
    if eviction not in EVICTIONS:
        raise ValueError(f"{owner}: eviction must be one of {', '.join(map(repr, EVICTIONS))}, "
                         f"got {eviction!r}")
    if on_full == "evict" and max_rows is None:
        raise ValueError(f"{owner}: on_full='evict' needs max_rows, the limit eviction keeps to")
    if on_full == "evict" and fixed_vocabulary:
        raise ValueError(f"{owner}: on_full='evict' is for dynamic tables (input_dim=None): a "
                         "fixed-vocabulary table holds every id it may see")


def shard_share(owner, max_rows, num_shards, shard):
    """Shard `shard`'s share of max_rows, or None for no limit: the shares
    differ by at most one and add up to max_rows, so the table never holds
    more."""
    if max_rows is None:
        return None
    if max_rows < num_shards:
        raise ValueError(f"{owner}: max_rows={max_rows} is less than one row for each of its "
                         f"{num_shards} shards")
    return max_rows // num_shards + (shard < max_rows % num_shards)

"""The Belady floor over the op (cc_ops/embedding/core/belady_floor.h): one
worker's training ids replayed through a cache of the same capacity that
evicts the row used furthest ahead, with each message's bytes as the
protocol encodes them."""
import numpy as np

from het_tf import _op_library


def belady_floor(steps, table, capacity, width, write_staleness=-1, sync="refresh",
                 num_shards=1, refreshes=0, made_keys=(), wire_dtype="float32"):
    """Counts of the replay of `steps` (each a sequence of one step's int64
    ids, repeats allowed), with `refreshes` copies refreshed as the real run
    counted them, the rows of `made_keys` made by the shards for this
    worker's first touch of them, and rows in `wire_dtype` as the run sent
    them: steps, unique_keys, misses, made, passed_through, evictions,
    pushes, flushed, bytes_sent, bytes_received."""
    steps = [np.asarray(s, np.int64).reshape([-1]) for s in steps]
    offsets = np.cumsum([0] + [len(s) for s in steps]).astype(np.int64)
    keys = np.concatenate(steps) if steps else np.zeros([0], np.int64)
    names, values = _op_library.load().het_belady_floor(
        keys, offsets, np.int64(refreshes), np.asarray(made_keys, np.int64).reshape([-1]),
        table_name=table, capacity=int(capacity),
        width=int(width), write_staleness=int(write_staleness), sync=sync,
        num_shards=int(num_shards), wire_dtype=wire_dtype)
    return {n.decode(): int(v) for n, v in zip(names.numpy(), values.numpy())}

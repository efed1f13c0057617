"""The interface every route implements (routes/__init__.py)."""
import numpy as np


class Route:
    """How a layer's rows travel in a step. `lookup` reads a batch's rows,
    `apply` updates them from the optimizer's apply step, `flush` pushes
    whatever is pending, `clear` drops it, `stats` counts the traffic."""

    def __init__(self, table):
        self.table = table
        self.lookahead = False  # het_tf.lookahead stages the next batch

    def lookup(self, ids, training):
        """(rows, unique ids, inverse) of int64 `ids` (any shape): the float32
        rows of the distinct ids, those ids checked against the vocabulary,
        and each id's int32 place among them in the ids' shape
        (unique[inverse] == ids). The layer trusts them: its update hands
        these same unique ids to `apply` without checking them again."""
        raise NotImplementedError

    def apply(self, unique, grads, learning_rate):
        """Updates the rows of the unique, checked `unique` ids by their
        summed `grads` (one update each); returns the ops."""
        raise NotImplementedError

    def flush(self, learning_rate):
        """Pushes every pending update to the table; returns the ops."""
        return []

    def clear(self):
        """Drops every cached row and pending update; returns the ops."""
        return []

    def settle(self, learning_rate):
        """Before a read outside the steps (eager): pushes the pending
        updates that read could not merge itself, so that it sees every
        write; returns the ops. A cache in this process merges its own
        (WorkerCache.lookup): nothing moves for it."""
        return []

    @property
    def hot_keys(self):
        """The hot rows' ids, ascending (none but on a route with hot rows)."""
        return np.zeros([0], np.int64)

    def set_hot_keys(self, ids, keys, flush_and_clear):
        """Makes the checked, unique `keys` (and their `ids` tensor) the hot
        rows; `flush_and_clear()` pushes and drops what the caches hold
        first, where the route needs it (eager)."""
        raise ValueError("this route keeps no hot rows")

    def reload(self):
        """Takes the hot rows from the shards again, after a restore or a
        write (eager)."""

    @property
    def lookahead_active(self):
        """True if training lookups fetch the batch het_tf.lookahead staged."""
        return False

    def stats(self):
        """(counters, embedding bytes on the wire, ids looked up), eager."""
        counters = {f"table_{k}": v for k, v in self.table.stats().items()}
        traffic = counters["table_bytes_sent"] + counters["table_bytes_received"]
        return counters, traffic, counters["table_keys_checked"]

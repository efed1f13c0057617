"""The interface every route implements (routes/__init__.py)."""


class Route:
    """How a layer's rows travel in a step. `lookup` reads a batch's rows,
    `apply` updates them from the optimizer's apply step, `flush` pushes
    whatever is pending, `clear` drops it, `stats` counts the traffic."""

    def __init__(self, table):
        self.table = table
        self.lookahead = False  # het_tf.lookahead stages the next batch

    def lookup(self, ids, training):
        """(rows, unique ids, inverse) of int64 `ids` (any shape): the rows of
        the unique ids, and where each id's row is among them."""
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

    @property
    def lookahead_active(self):
        """True if training lookups fetch the batch het_tf.lookahead staged."""
        return False

    def stats(self):
        """(counters, embedding bytes on the wire, ids looked up), eager."""
        counters = {f"table_{k}": v for k, v in self.table.stats().items()}
        traffic = counters["table_bytes_sent"] + counters["table_bytes_received"]
        return counters, traffic, counters["table_keys_checked"]

"""Routes that take some of a step's rows apart from the cache: the rest go
through it as on the cached route."""
import tensorflow as tf

from het_tf.runtime.routes.cached import CachedRoute


class SplitRoute(CachedRoute):
    """The rows it takes and how it reads and updates them: `choose(unique,
    ids)` says which of a lookup's unique keys (of its flat `ids`) are its,
    `chosen(keys)` which of an update's keys were, `gather(keys)` reads
    them and `keep(keys, grads, learning_rate)` updates them. A subclass's
    `splits(training)` says whether a lookup splits at all."""

    def __init__(self, cache, choose, chosen, gather, keep):
        super().__init__(cache)
        self.choose, self.chosen, self.gather, self.keep = choose, chosen, gather, keep

    def splits(self, training):
        return True

    def lookup(self, ids, training):
        if not self.splits(training):
            return super().lookup(ids, training)
        cache = self.cache
        ids = cache.table.check_ids(ids)
        flat = tf.reshape(ids, [-1])
        unique, inverse = tf.unique(flat, out_idx=tf.int32)
        is_first = self.choose(unique, flat)
        first_at, rest_at = (tf.cast(tf.where(x)[:, 0], tf.int32) for x in (is_first, ~is_first))
        rest_keys = tf.gather(unique, rest_at)

        # A batch with none of the others does not meet the cache at all.
        def rest_rows():
            rows, _, rest_inverse = cache.lookup(rest_keys, training)
            return tf.gather(rows, rest_inverse)

        rest = tf.cond(tf.size(rest_keys) > 0, rest_rows,
                       lambda: tf.zeros([0, cache.dim], tf.float32))
        rows = tf.dynamic_stitch([first_at, rest_at],
                                 [self.gather(tf.gather(unique, first_at)), rest])
        return rows, unique, tf.reshape(inverse, tf.shape(ids))

    def apply(self, unique, grads, learning_rate):
        """This route's rows' gradients to it, the others' to the cache
        (only if there are any)."""
        first = self.chosen(unique)
        update_first = self.keep(tf.boolean_mask(unique, first), tf.boolean_mask(grads, first),
                                 learning_rate)

        def update_rest():
            update = self.cache.apply_gradients(tf.boolean_mask(unique, ~first),
                                                tf.boolean_mask(grads, ~first), learning_rate)
            with tf.control_dependencies(tf.nest.flatten(update)):
                return tf.constant(True)

        rest_update = tf.cond(tf.reduce_any(~first), update_rest, lambda: tf.constant(False))
        return [update_first, rest_update]

    @property
    def lookahead_active(self):
        return False  # the lookahead stages the cache's rows only

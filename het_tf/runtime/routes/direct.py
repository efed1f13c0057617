"""The route with the cache off: every id read from the shards, every
update pushed at once."""
from het_tf.runtime.cache import lookup_without_cache, push_without_cache
from het_tf.runtime.routes.route import Route


class DirectRoute(Route):
    def lookup(self, ids, training):
        return lookup_without_cache(self.table, ids, training)

    def apply(self, unique, grads, learning_rate):
        return push_without_cache(self.table, unique, grads, learning_rate, keys_checked=True)

"""Herald's plan (docs/herald.md): before each training step the Horovod
ranks share the ids they will read; a row several ranks read is read and
written on the shards directly, the rest go through the cache."""
import weakref

import tensorflow as tf

from het_tf.runtime.routes.split import SplitRoute


class HeraldRoute(SplitRoute):
    def __init__(self, cache, plan, owner):
        super().__init__(cache, plan.direct, plan.was_direct, plan.read, plan.keep)
        self.plan = plan
        self._owner = owner
        self._graphs = weakref.WeakSet()  # traced steps that called the plan

    def splits(self, training):
        if training:
            self._check_one_call_a_step()
        return training

    def _check_one_call_a_step(self):
        """The plan shares each step's ids once: a second training call in
        one traced step is refused."""
        graph = tf.compat.v1.get_default_graph()
        if graph in self._graphs and not tf.executing_eagerly():
            raise ValueError(f"{self._owner}: scheduler='herald' plans one lookup a step, and the "
                             "layer is called more than once in a training step; use "
                             "no scheduler for a layer called several times")
        self._graphs.add(graph)

    def flush(self, learning_rate):
        # The direct rows' gradients kept for the next step go first.
        return [self.plan.flush()] + super().flush(learning_rate)

    def clear(self):
        self.plan.clear()
        return super().clear()

    def stats(self):
        counters, traffic, lookups = super().stats()
        counters.update(self.plan.stats())
        return counters, traffic + counters["plan_bytes"] + counters["plan_direct_bytes"], lookups

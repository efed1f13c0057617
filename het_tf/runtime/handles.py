"""One resource handle per traced function and resource.

TensorFlow orders the stateful ops of a function that take the same
resource tensor in the order they were traced (automatic control
dependencies). A handle made once per function, and captured by its
branches and loops, therefore puts every op of one cache or shard in a step
in program order: the lookups of a layer called twice, the prefetch, and
the update that the optimizer's apply step traces after them, though no
data flows between them. Eagerly, ops run as they are called.
"""
import weakref

import tensorflow as tf

_FuncGraph = tf.__internal__.FuncGraph


def _outermost(graph):
    while isinstance(getattr(graph, "outer_graph", None), _FuncGraph):
        graph = graph.outer_graph
    return graph


class FunctionHandles:
    """`get(key, make)`: the handle `make()` built for `key` in the
    outermost function being traced (built there on first use), or a new
    one eagerly."""

    def __init__(self):
        # By name: a tensor would keep its graph, the key, alive.
        self._names = weakref.WeakKeyDictionary()

    def get(self, key, make):
        if tf.executing_eagerly():
            return make()
        graph = _outermost(tf.compat.v1.get_default_graph())
        names = self._names.setdefault(graph, {})
        if key not in names:
            with graph.as_default(), tf.control_dependencies(None):
                names[key] = make().name
        return graph.get_tensor_by_name(names[key])

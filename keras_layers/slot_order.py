"""The dense optimizer's slots in the order files hold them.

tf_keras' optimizers make their slots in the order of the first
apply_gradients call's variables, and Keras files and checkpoints hold them
by position (`optimizer/vars/N`, `optimizer/_variables/N`). Keras' train
step and hybrid mode's both apply gradients in `model.trainable_variables`
order, so a file loads onto any model built the same way. Hybrid mode
before this release applied the dense variables first and the tables'
anchors last: its files would put one variable's slots on another, or
leave them at zero. Such a file is recognised by its slots' shapes, and
read in the order it was written, so each slot lands on its own variable.

Where each slot of an order goes is learnt from the optimizer itself: a
copy of it (from its config) is built on the variables in that order,
recording which variable and slot each of its variables is made for, so
any optimizer that makes its slots with add_variable_from_reference is
placed (Adam's blocks, RMSprop's lists a slot kind each, EMA's averages).
A file whose shapes fit both orders is read in the model's: the two orders
then differ only between variables of the same shapes, which no file can
tell apart."""
import contextlib

import tensorflow as tf
import tf_keras

from het_tf.keras_layers.het_embedding import het_embedding_layers
from het_tf.keras_layers.table_gradients import is_anchor


def _made_for(optimizer, variables):
    """[(index of the variable in `variables`, slot name) or (None, name)]
    of each variable a copy of `optimizer` makes when built on
    `variables`, in the order it makes them; None where it cannot be
    copied."""
    try:
        copy = type(optimizer).from_config(optimizer.get_config())
    except Exception:  # noqa: BLE001 - an optimizer Keras cannot copy: not placed
        return None
    index = {id(v): i for i, v in enumerate(variables)}
    made = []
    by_reference, plain = copy.add_variable_from_reference, copy.add_variable

    def from_reference(model_variable, variable_name, *args, **kwargs):
        made.append((index.get(id(model_variable)), variable_name))
        return by_reference(model_variable, variable_name, *args, **kwargs)

    def add_variable(shape, *args, **kwargs):
        made.append((None, tuple(shape)))
        return plain(shape, *args, **kwargs)

    copy.add_variable_from_reference, copy.add_variable = from_reference, add_variable
    with tf.init_scope():
        copy.build(variables)
    return made


def _layouts(model):
    """(the model's layout, the earlier hybrid order's) as _made_for gives
    them, with each entry's index a position in model.trainable_variables;
    None where the orders are the same or the optimizer cannot be placed."""
    optimizer = getattr(model, "optimizer", None)
    trainable = model.trainable_variables
    if (not isinstance(optimizer, tf_keras.optimizers.Optimizer)
            or not hasattr(optimizer, "_variables") or not het_embedding_layers(model)):
        return None  # a LossScaleOptimizer, which hybrid mode never took: no such file
    earlier = ([v for v in trainable if not is_anchor(v)]
               + [v for v in trainable if is_anchor(v)])
    if [id(v) for v in earlier] == [id(v) for v in trainable]:
        return None
    mine = _made_for(optimizer, trainable)
    theirs = _made_for(optimizer, earlier)
    if mine is None or theirs is None:
        return None
    position = {id(v): i for i, v in enumerate(trainable)}
    theirs = [(None if i is None else position[id(earlier[i])], kind) for i, kind in theirs]
    return mine, theirs


def _shapes(model, layout):
    trainable = model.trainable_variables
    return [kind if i is None else tuple(trainable[i].shape) for i, kind in layout]


def file_order(model, shapes):
    """Given the shapes of a file's optimizer variables by position (every
    one but the first, the step count), how to read them: the earlier
    hybrid order's layout where the file holds that and not the model's,
    else None (the optimizer's own order)."""
    # The anchors' scalar slots come last in the earlier order: only then
    # is it worth building the copies that place them.
    layouts = _layouts(model) if shapes and tuple(shapes[-1]) == () else None
    if layouts is None:
        return None
    mine, theirs = layouts
    shapes = [tuple(s) for s in shapes]
    if shapes == _shapes(model, mine) or shapes != _shapes(model, theirs):
        return None
    return layouts


@contextlib.contextmanager
def read_in_order(model, layouts):
    """Within the block the model's optimizer lists its variables in the
    file's order (file_order's layouts), so that a Keras file or a
    checkpoint, read by position, puts each value on its own variable;
    then the optimizer's own list is back. The optimizer is built first,
    as Keras' train step would build it."""
    if layouts is None:
        yield
        return
    mine, theirs = layouts
    optimizer = model.optimizer
    optimizer.build(model.trainable_variables)
    own = optimizer._variables
    slots = own[1:]
    if len(slots) != len(mine) or len(set(mine)) != len(mine):
        raise ValueError(f"{optimizer.name}: this file holds its slots in the order hybrid mode "
                         "wrote before (dense variables first, the tables' anchors last), and "
                         "this optimizer's variables cannot be matched to it; load it with "
                         "compile=False and compile again (a fresh optimizer)")
    where = {entry: slot for entry, slot in zip(mine, slots)}
    tf.get_logger().warning(
        f"{optimizer.name}: this file holds its slots in the order hybrid mode wrote before "
        "(dense variables first, the tables' anchors last); they are read in that order, "
        "each onto its own variable. Saving again writes the model's order.")
    # tf_keras caches the children a checkpoint sees: drop it on both sides.
    optimizer.__dict__.pop("_coalesced_children", None)
    optimizer._variables = [own[0]] + [where[entry] for entry in theirs]
    try:
        yield
    finally:
        optimizer.__dict__.pop("_coalesced_children", None)
        optimizer._variables = own

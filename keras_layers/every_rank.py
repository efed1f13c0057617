"""Reads that need every Horovod rank's updates (hybrid mode).

Each rank's cache holds updates no other rank sees until it pushes them,
and with the cache off another rank's last step may still be pushing. A
read on one rank merges its own (evaluation.py), not the others': its
answer would be that rank's alone, and differ from rank to rank. So a read
that answers for the whole model (`evaluate`, `predict`, fit's validation,
an eager `layer(ids)`, `get_weights`, a Keras file, an export) is refused on
a rank whose model has trained since every rank last pushed together; the
refusal names het_tf.hybrid's collective call that does it, on every rank.
Ranks train in step (every step's allreduce waits for all of them), so a
rank that has not trained since that push knows no other rank has either.
Reads through the caches as they stand (evaluation.as_the_caches_stand)
are not refused: they ask for each rank's own view. The check runs where
a read starts eagerly; a model called inside the user's own tf.function
is not checked."""
import tensorflow as tf

from het_tf.distribute import horovod
from het_tf.runtime.cache import evaluating_as_cached
from het_tf.runtime.counters import counter


def add_training_counter(layer):
    """In hybrid mode, a count of the layer's training calls, kept out of
    Keras' weights and files: a restore or set_weights must not move it
    back to a count a flush was marked at."""
    if horovod.num_ps() is not None:
        with tf.init_scope():
            object.__setattr__(layer, "_training_calls", counter("het_training_calls"))


def count_training_call(layer):
    if getattr(layer, "_training_calls", None) is not None:
        layer._training_calls.assign_add(1)


def _trained(layer):
    return int(layer._training_calls.numpy())


def flushed(layers, cleared=False):
    """Every rank has pushed these layers' pending updates and none trains
    on until this rank does (called on every rank, after the barrier);
    `cleared`: this rank's caches were emptied after, so that its reads
    through them fetch every row anew."""
    for layer in layers:
        if getattr(layer, "_training_calls", None) is not None:
            layer._het_every_rank_flushed = _trained(layer)
            if cleared:
                layer._het_caches_fresh = _trained(layer)


def check_flushed(layer, what, instead, through_cache=False):
    """Refuses `what` on this rank while other ranks may hold updates of the
    layer's table it cannot see (eager): `through_cache`, a read through
    this rank's caches, whose copies may lack the other ranks' updates up
    to the staleness bound even once they are pushed; else a read of the
    shards. `instead` is the collective call that works."""
    if (getattr(layer, "_training_calls", None) is None
            or (through_cache and evaluating_as_cached())):
        return
    marker = "_het_caches_fresh" if through_cache else "_het_every_rank_flushed"
    if _trained(layer) != getattr(layer, marker, 0):
        raise ValueError(
            f"{layer._owner}: {what} on one rank in hybrid mode would miss the updates the "
            f"other ranks' caches have not pushed, and answer differently on each rank; "
            f"call {instead} on every rank, which pushes every rank's updates first (or "
            "het_tf.hybrid.flush_and_clear(model) on every rank before reading)")

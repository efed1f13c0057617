"""Hybrid mode: Horovod allreduce for dense weights, PS shards for embeddings.

Every Horovod rank runs its own `model.fit`. Each connects to the PS tasks as
a client of its own, so all ranks share the tables there (shards are found by
name), while each keeps its own cache. Dense gradients never go through the
PS: they are averaged with Horovod's allreduce, so dense weights stay the
same on every rank.

    import het_tf.hybrid as hybrid
    hybrid.init()                          # first, like hvd.init(): before any model
    model = build_model()                  # a plain tf_keras model with HetEmbedding
    hybrid.distribute(model)               # before compile
    model.compile(tf_keras.optimizers.Adam(0.001 * hybrid.size()), ...)
    model.fit(dataset.shard(hybrid.size(), hybrid.rank()), callbacks=[hybrid.Checkpoint(dir)])
    hybrid.evaluate(model, held_out)       # on every rank: every rank's updates pushed first

Reads that answer for the whole model (evaluate, predict, get_weights, a
Keras file, an export) are refused on one rank while other ranks' updates
are pending; evaluate, predict, export_saved_model, save and
flush_and_clear here are the collective calls that work (docs/hybrid.md).

The PS addresses come from `HET_TF_PS` ("host:port,host:port") or from the
"ps" job of `TF_CONFIG`.
"""
from het_tf.distribute.horovod import (
                                       CLIENT_HOST_ENV,
                                       PS_ENV,
                                       allreduce_sum,
                                       barrier,
                                       init,
                                       num_ps,
                                       ps_addresses,
                                       rank,
                                       size,
)
from het_tf.training.hybrid_reads import evaluate, export_saved_model, flush_and_clear, predict
from het_tf.training.hybrid_training import (
    Checkpoint,
    allreduce_skipped_steps,
    distribute,
    het_allocation,
    restore,
    save,
)

__all__ = ["CLIENT_HOST_ENV", "PS_ENV", "Checkpoint", "allreduce_skipped_steps", "allreduce_sum",
           "barrier", "distribute", "evaluate", "export_saved_model", "flush_and_clear",
           "het_allocation", "init", "num_ps", "ps_addresses", "predict", "rank", "restore",
           "save", "size"]

"""Train a HetEmbedding model in hybrid mode: Horovod ranks for the dense
weights, PS shards for the embeddings.

Run it as every Horovod rank:
    het-tf launch --hybrid --ps 2 --workers 2 -- python examples/hybrid_train.py
or with horovodrun yourself, with HET_TF_PS=host:port,... naming PS tasks
started by `het-tf server`.
"""
import argparse
import hashlib
import json
import os
import signal

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import tf_keras  # noqa: E402
from toy_model import (  # noqa: E402
    add_arguments,
    build_model,
    export_probe,
    serving_inputs,
    skewed_data,
    version_exports,
)

import het_tf  # noqa: E402
from het_tf import hybrid  # noqa: E402
from het_tf.models import trace_steps_as_written  # noqa: E402


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_arguments(p)
    p.add_argument("--samples", type=int, default=2048, help="samples per rank and epoch")
    p.add_argument("--result-dir", help="each rank writes rank<N>.json here")
    p.add_argument("--allocate-every", type=int, default=0,
                   help="Herald's location-aware allocation: share the caches' summaries "
                   "every this many steps (0: off; docs/herald.md)")
    p.add_argument("--summary-rows", type=int, default=65536,
                   help="the most used keys of each cache that the allocation shares, as a "
                   "Bloom filter of 10 bits a key")
    p.add_argument("--stay-bonus", default="auto",
                   help="the cached rows a sample must gain to leave its rank ('auto': its "
                   "bytes' worth)")
    p.add_argument("--allreduce-dtype", default="float32",
                   help="the type the dense gradients cross the allreduce in: float32 or "
                   "float16 (half the bytes, with a loss scale)")
    p.add_argument("--overflow-at", type=int, nargs=2, metavar=("RANK", "STEP"),
                   help="a fault drill: RANK weighs the samples of step STEP of each epoch "
                   "a million times, so that its dense gradients overflow float16")
    p.add_argument("--lose-rank-at", type=int, nargs=2, metavar=("RANK", "STEP"),
                   help="a fault drill: RANK kills itself (SIGKILL) as it begins training "
                   "step STEP (counted over the epochs from 0), while the others are in it")
    return p.parse_args()


def dense_digest(model):
    dense = [w for name in ("hidden", "score") for w in model.get_layer(name).get_weights()]
    return hashlib.sha256(b"".join(w.tobytes() for w in dense)).hexdigest()


def digest(arrays):
    return hashlib.sha256(b"".join(np.ascontiguousarray(a).tobytes() for a in arrays)).hexdigest()


def main():
    args = parse_args()
    hybrid.init()  # first, like hvd.init(): before any model is built
    model, layer = build_model(args)
    hybrid.distribute(model, allocate_every=args.allocate_every,
                      summary_rows=args.summary_rows, stay_bonus=args.stay_bonus,
                      allreduce_dtype=args.allreduce_dtype)  # before compile
    # Horovod's convention: scale the learning rate with the number of ranks.
    model.compile(tf_keras.optimizers.Adam(0.005 * hybrid.size()), "binary_crossentropy")
    trace_steps_as_written(model)  # a first step in seconds: nothing branches on a tensor
    rank = hybrid.rank()
    result = {"rank": rank, "size": hybrid.size(), "num_ps": hybrid.num_ps()}

    callbacks = []
    if args.checkpoint_dir:
        latest = tf.train.latest_checkpoint(args.checkpoint_dir)
        if latest:
            hybrid.restore(model, latest)
            result["resumed_from"] = latest
            result["restored_rows"] = int(layer.table.stats()["rows"])
        callbacks.append(hybrid.Checkpoint(args.checkpoint_dir))

    # Each rank reads its own part of the data.
    ids, labels = skewed_data(1000 + rank, args.samples, args)
    hot = layer.hot_block
    if args.hot_rows:
        # Every rank profiles its own data; all take rank 0's hot set.
        profile = het_tf.profile_hot_rows(
            model, tf.data.Dataset.from_tensor_slices(ids).batch(args.batch_size), share=0.5)
        het_tf.use_hot_rows(model, profile)
        result["hot_keys"] = layer.hot_keys.tolist()
        result["hot_clocks_loaded"] = int(hot.state()[3].sum())

    step_digests, hot_digests, assignments, trained_on = [], [], [], []
    allocation = hybrid.het_allocation(model)

    def after_step(batch, logs):
        step_digests.append(dense_digest(model))
        if hot is not None:
            hot_digests.append(digest(hot.state()))
        if allocation is not None:
            workers, samples = allocation.last_step()
            assignments.append(workers.tolist())
            # Each sample as its ids and label, to check none was lost or doubled.
            trained_on.append([[*map(int, ids_), float(label)]
                               for ids_, label in zip(samples[0], samples[1].ravel())])

    if args.lose_rank_at and args.lose_rank_at[0] == rank:
        lost_at, steps_begun = args.lose_rank_at[1], []

        def lose_this_rank(batch, logs):
            if len(steps_begun) == lost_at:
                os.kill(os.getpid(), signal.SIGKILL)
            steps_begun.append(batch)

        callbacks.append(tf_keras.callbacks.LambdaCallback(on_train_batch_begin=lose_this_rank))
    if args.result_dir:  # the weights after every step, to compare the ranks
        callbacks.append(tf_keras.callbacks.LambdaCallback(on_train_batch_end=after_step))
    version_scores = {}
    if args.export_every:
        callbacks += version_exports(args, model, version_scores, hybrid.flush_and_clear, rank)
    fit_data = dict(x=ids, y=labels, batch_size=args.batch_size, shuffle=False)
    if args.overflow_at and args.overflow_at[0] == rank:
        weights = np.ones(len(labels), np.float32)
        step = args.overflow_at[1]
        weights[step * args.batch_size:(step + 1) * args.batch_size] = 1e6
        fit_data["sample_weight"] = weights
    if args.window > 1:
        # Herald's window: the pipeline stages the batches ahead of each step.
        fit_data = dict(x=het_tf.lookahead(tf.data.Dataset.from_tensor_slices(
            (ids, labels)).batch(args.batch_size), model))
    result["initial_digest"] = dense_digest(model)
    history = model.fit(**fit_data, epochs=args.epochs, verbose=2 if rank == 0 else 0,
                        callbacks=callbacks)

    hybrid.flush_and_clear(model)  # on every rank: every rank's updates are on the shards now
    keys, values, _, clocks, _ = (t.numpy() for t in layer.table.export_all())
    stats = layer.het_stats()
    if hot is not None:
        block = hot.state()
        on_shards = [t.numpy() for t in layer.table.read_rows(tf.constant(block[0]))]
        result.update(hot_digests=hot_digests, hot_digest=digest(block),
                      hot_on_shards_digest=digest([block[0], *on_shards]),
                      hot_clocks=int(block[3].sum()),
                      hot_bytes_exchanged=stats["hot_bytes_exchanged"],
                      cache_lookups=stats["cache_lookups"])
    if allocation is not None:
        result.update(assignments=assignments, trained_on=trained_on,
                      read=[[*map(int, i), float(lab)] for i, lab in zip(ids, labels)],
                      **allocation.stats())
    if layer.scheduler == "herald":
        result.update(plan_bytes=stats.get("plan_bytes", 0),
                      plan_direct_keys=stats.get("plan_direct_keys", 0),
                      plan_ahead_keys=stats.get("plan_ahead_keys", 0),
                      cache_rows_pushed=stats["cache_rows_pushed"])
    result.update(
        losses=history.history.get("loss", []),
        allreduce_skipped_steps=hybrid.allreduce_skipped_steps(model),
        dense_digest=dense_digest(model), step_digests=step_digests,
        cache_updates_pushed=stats["cache_updates_pushed"], hit_rate=stats["hit_rate"],
        table_updates_applied=stats["table_updates_applied"], clock_sum=int(clocks.sum()),
        table_rows=len(keys), record_workers=stats["table_record_workers"],
        padding_clock=int(clocks[keys == 0].sum()),
        updated_rows_max_norm=float(np.linalg.norm(values[clocks > 0], axis=1).max(initial=0)))
    if args.export_every:
        result.update(export_inputs=serving_inputs(export_probe(args)),
                      version_scores=version_scores)
    elif args.export_dir:
        hybrid.export_saved_model(model, args.export_dir)  # on every rank; rank 0 writes
    if args.export_dir and not args.export_every and rank == 0:
        probe = export_probe(args)
        result["export_inputs"] = serving_inputs(probe)
        result["export_scores"] = model.predict(probe, verbose=0).ravel().tolist()
    hybrid.barrier()
    if args.result_dir:
        with open(os.path.join(args.result_dir, f"rank{rank}.json"), "w") as f:
            json.dump(result, f)
    print(f"rank {rank}: losses {[round(v, 4) for v in result['losses']]}, hit rate "
          f"{stats['hit_rate']:.3f}", flush=True)


if __name__ == "__main__":
    main()

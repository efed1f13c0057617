"""Rows in 16 bits on the cache's exchange (wire_dtype): what users see.

The oracle is the data. The model's loss is the sum of its rows times
fixed weights, so each row's gradient is those weights whatever the row
holds, and with SGD every row ends at its initial value minus the learning
rate times the weights summed over its occurrences: a 16-bit run must end
there once flushed (the rounding of each push stays on the worker and
joins the next, evicted rows and flushes go in float32), as the float32
run does. A checkpoint written by either type restores into the other.
The rule against the NumPy model, with lost answers and restarts, is in
test_ops_reference.py; the wire's bytes in wire_type_test.cc."""
import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from het_tf.keras_layers import HetEmbedding

VOCAB, DIM, IDS, BATCH, LR = 64, 8, 4, 16, 0.25
_RNG = np.random.default_rng(3)
INIT = _RNG.uniform(-0.5, 0.5, (VOCAB, DIM)).astype(np.float32)
# The loss's weights on each of a sample's rows: gradients of every size,
# so that pushes round in 16 bits (a weight of 1e-3 is below bfloat16's
# precision next to a row of 0.5).
WEIGHTS = (_RNG.choice([1.0, 1e-1, 1e-2, 1e-3], (IDS, DIM)) *
           _RNG.choice([-1.0, 1.0], (IDS, DIM))).astype(np.float32)
X = _RNG.zipf(1.3, (BATCH * 24, IDS)).clip(max=VOCAB) - 1


def model_of(wire, name, cache_capacity=12, optimizer="sgd"):
    """ids -> the sum of the rows times WEIGHTS: each row's gradient is its
    slot's weights over the batch size, whatever the row holds."""
    ids = tf_keras.Input((IDS,), dtype="int64")
    layer = HetEmbedding(VOCAB, DIM, weights=[INIT], optimizer=tf_keras.optimizers.get(
        {"class_name": optimizer, "config": {"learning_rate": LR}}), staleness=3,
        cache_capacity=cache_capacity, wire_dtype=wire, name=name)
    rows = layer(ids)
    score = tf_keras.layers.Lambda(lambda r: tf.reduce_sum(r * WEIGHTS, axis=[1, 2]))(rows)
    model = tf_keras.Model(ids, score)
    model.compile(tf_keras.optimizers.SGD(LR), lambda y, p: p)
    return model, layer


def trained(wire, name, optimizer="sgd", epochs=2):
    model, layer = model_of(wire, name, optimizer=optimizer)
    model.fit(X, np.zeros(len(X), np.float32), batch_size=BATCH, epochs=epochs, shuffle=False,
              verbose=0)
    return model, layer


def expected_rows(epochs=2):
    """SGD's rows from the data: each occurrence of id k in slot j of a
    sample moves row k by -LR * WEIGHTS[j] / BATCH."""
    rows = INIT.astype(np.float64).copy()
    for _ in range(epochs):
        for start in range(0, len(X), BATCH):
            for sample in X[start:start + BATCH]:
                for j, k in enumerate(sample):
                    rows[k] -= LR * WEIGHTS[j] / BATCH
    return rows


@pytest.mark.parametrize("wire", ["bfloat16", "float16"])
def test_a_16_bit_run_ends_at_the_data_as_the_float32_run_does(unique_name, wire):
    """A training step's rows are one rounding off the shards', but once
    flushed every update is in the table: the 16-bit run's
    rows are the data's and the float32 run's to float32 rounding, far
    inside one 16-bit rounding (2^-9 of 0.5 in bfloat16). The 16-bit
    cache's counted bytes are fewer."""
    oracle = expected_rows()
    _, exact = trained("float32", unique_name("f32"))
    _, layer = trained(wire, unique_name(wire))
    exact_rows, rows = exact.get_weights()[0], layer.get_weights()[0]
    np.testing.assert_allclose(exact_rows, oracle, rtol=0, atol=2e-6)
    np.testing.assert_allclose(rows, oracle, rtol=0, atol=2e-6)
    sixteen, thirty_two = (c.cache.stats() for c in (layer, exact))
    assert sixteen["rows_pushed"] > 0 and sixteen["bytes_sent"] < thirty_two["bytes_sent"]
    assert sixteen["bytes_received"] < thirty_two["bytes_received"]


@pytest.mark.parametrize("written, read", [("bfloat16", "float32"), ("float32", "bfloat16")])
def test_a_checkpoint_restores_across_wire_types(unique_name, tmp_path, written, read):
    """The checkpoint holds float32 rows and slots whatever the wire (its
    flush pushes in float32): Adagrad's table restores bit for bit into a
    model of the other type, which trains on."""
    model, layer = trained(written, unique_name("w"), optimizer="adagrad", epochs=1)
    path = tf.train.Checkpoint(model=model).write(str(tmp_path / "ckpt"))
    written_table = [t.numpy() for t in layer.table.export_all()]
    fresh, fresh_layer = model_of(read, unique_name("r"), optimizer="adagrad")
    tf.train.Checkpoint(model=fresh).read(path).assert_existing_objects_matched()
    read_table = [t.numpy() for t in fresh_layer.table.export_all()]
    order_w, order_r = np.argsort(written_table[0]), np.argsort(read_table[0])
    for w, r in zip(written_table, read_table):
        np.testing.assert_array_equal(w[order_w], r[order_r])
    fresh.fit(X[:BATCH * 4], np.zeros(BATCH * 4, np.float32), batch_size=BATCH, verbose=0)
    assert np.isfinite(fresh_layer.get_weights()[0]).all()


def test_a_16_bit_wire_needs_the_cache_and_sync_by_refresh():
    with pytest.raises(ValueError, match=r"HetEmbedding 'e'.*wire_dtype='bfloat16' with the "
                                         r"cache off"):
        HetEmbedding(VOCAB, DIM, cache_capacity=0, wire_dtype="bfloat16", name="e")
    with pytest.raises(ValueError, match=r"wire_dtype='float16' with sync='check'"):
        HetEmbedding(VOCAB, DIM, sync="check", wire_dtype="float16", name="e")
    with pytest.raises(ValueError, match="wire_dtype must be one of float32, bfloat16, float16"):
        HetEmbedding(VOCAB, DIM, wire_dtype="float64", name="e")


@pytest.mark.parametrize("op", ["gather", "pull", "push", "push_deltas", "read", "read_held"])
def test_every_op_that_carries_rows_refuses_another_wire_version(unique_name, op):
    """A worker and a parameter server of different builds refuse each
    other by name on every op that carries rows (the exchange's messages
    carry the version in their header, exchange_wire_test.cc), before the
    table changes."""
    import het_tf
    from het_tf import _op_library

    table = het_tf.ShardedTable(het_tf.TableConfig(unique_name(), DIM), [None])
    ops, handle, slots = _op_library.load(), table.handle(0), table.config.num_slots
    keys = tf.constant([1, 2], tf.int64)
    calls = {
        "gather": lambda **v: ops.het_table_gather(handle, keys, dim=DIM, **v),
        "pull": lambda **v: ops.het_table_pull(handle, keys, tf.constant([-1, -1], tf.int64),
                                               tf.constant(0, tf.int64), dim=DIM, **v),
        "push": lambda **v: ops.het_table_push(handle, keys, tf.ones([2, DIM]),
                                               tf.ones([2], tf.int64), 0.1, dim=DIM, **v),
        "push_deltas": lambda **v: ops.het_table_push_deltas(
            handle, keys, tf.zeros([2, DIM * (1 + slots)]), tf.ones([2], tf.int64), 0.1,
            tf.zeros([2], tf.int64), tf.zeros([4], tf.int64), tf.constant(0, tf.int64), dim=DIM,
            num_slots=slots, **v),
        "read": lambda **v: ops.het_table_read(handle, keys, dim=DIM, num_slots=slots, **v),
        "read_held": lambda **v: ops.het_table_read_held(handle, keys, dim=DIM, num_slots=slots,
                                                         **v),
    }
    now = _op_library.WIRE_VERSION
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=rf"table '{table.config.name}': a request of wire version "
                             rf"{now + 1}, but this parameter server speaks version {now}"):
        calls[op](wire_version=now + 1)
    with pytest.raises(tf.errors.InvalidArgumentError, match="before its ops carried one"):
        calls[op]()
    assert table.stats()["rows"] == 0  # refused before the table changed
    calls[op](wire_version=now)  # this build's own goes through

"""HetEmbedding in a plain tf_keras model: fit, evaluate, save, export.

Run: python examples/keras_quickstart.py [OUTPUT_DIR]
"""
import sys

import numpy as np
import tf_keras

import het_tf
from het_tf.keras_layers import HetEmbedding, HetMetricsCallback

out_dir = sys.argv[1] if len(sys.argv) > 1 else "/tmp/het_tf_quickstart"
rng = np.random.default_rng(0)
ids = (rng.zipf(1.2, size=(20_000, 4)) % 50_000).astype(np.int64)  # skewed, like real ids
labels = ((ids[:, 0] + ids[:, 1]) % 3 == 0).astype(np.float32)

inputs = tf_keras.Input(shape=(4,), dtype="int64", name="ids")
x = HetEmbedding(50_000, 16, cache_capacity=0.1, staleness="auto", name="items")(inputs)
x = tf_keras.layers.Dense(32, activation="relu")(tf_keras.layers.Flatten()(x))
model = tf_keras.Model(inputs, tf_keras.layers.Dense(1, activation="sigmoid", name="score")(x))
model.compile("adam", "binary_crossentropy", metrics=[tf_keras.metrics.AUC()])
model.fit(ids, labels, batch_size=256, epochs=3, callbacks=[HetMetricsCallback()], verbose=2)
model.save(f"{out_dir}/model.keras")                     # rows, slots and clocks too
model = tf_keras.models.load_model(f"{out_dir}/model.keras")  # no custom_objects needed
model.save_weights(f"{out_dir}/checkpoint/weights")      # chunked checkpoints, any size
het_tf.export_saved_model(model, f"{out_dir}/saved_model")  # stock TF ops only
print("exported to", f"{out_dir}/saved_model")

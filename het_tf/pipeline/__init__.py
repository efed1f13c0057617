"""Dataset transforms around a model with HetEmbedding layers, above the
Keras layer: the lookahead that stages the next batch's ids in the caches
(`lookahead.py`, het_tf.lookahead), FAE's hot-row profile and hot/cold
batches (`hot_rows.py`), and Herald's allocation, which moves samples
between Horovod ranks (`allocation.py`). `layer_inputs.py` finds the ids a
model's layers look up from a batch, outside the model's step."""

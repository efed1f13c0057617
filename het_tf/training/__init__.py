"""Training steps above the Keras layer: hybrid mode's step, which averages
dense gradients over the Horovod ranks, and its checkpoints
(`hybrid_training.py`; het_tf.hybrid is its public face)."""

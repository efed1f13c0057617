"""The runtime over the ops, with no Keras: table and cache settings, sharded
tables, worker caches and table checkpoints."""

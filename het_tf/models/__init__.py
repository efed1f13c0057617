"""CTR models over Criteo-shaped inputs, built from HetEmbedding (or from
tf_keras.layers.Embedding, for baselines)."""
from het_tf.models.ctr_models import (
                                      MODELS,
                                      CrossLayer,
                                      FactorizationMachine,
                                      build_model,
                                      dcn,
                                      deepfm,
                                      wdl,
)
from het_tf.models.embeddings import EmbeddingSpec, FieldIndices
from het_tf.models.tracing import trace_steps_as_written

__all__ = ["MODELS", "CrossLayer", "EmbeddingSpec", "FactorizationMachine", "FieldIndices",
           "build_model", "dcn", "deepfm", "trace_steps_as_written", "wdl"]

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

__all__ = ["MODELS", "CrossLayer", "EmbeddingSpec", "FactorizationMachine", "FieldIndices",
           "build_model", "dcn", "deepfm", "wdl"]

// Shape functions shared by the table and cache ops.
#ifndef HET_TF_OPS_SHAPE_FNS_H_
#define HET_TF_OPS_SHAPE_FNS_H_

#include "tensorflow/core/framework/shape_inference.h"

// The table optimizer's attrs, shared by HetTableShard and HetCache (whose
// local steps follow the same optimizer).
#define HET_OPTIMIZER_ATTRS                          \
  Attr("optimizer: string = 'adagrad'")              \
      .Attr("beta_1: float = 0.9")                   \
      .Attr("beta_2: float = 0.999")                 \
      .Attr("epsilon: float = 1e-7")                 \
      .Attr("initial_accumulator_value: float = 0.1") \
      .Attr("l1: float = 0.0")                       \
      .Attr("l2: float = 0.0")                       \
      .Attr("learning_rate_power: float = -0.5")     \
      .Attr("ftrl_beta: float = 0.0")

namespace het {

// A row's state (values then num_slots slots) as a dimension: dim * (1 + num_slots).
inline tensorflow::Status StateWidthAttr(tensorflow::shape_inference::InferenceContext* c,
                                         tensorflow::shape_inference::DimensionHandle* out) {
  int64_t dim = 0, num_slots = 0;
  TF_RETURN_IF_ERROR(c->GetAttr("dim", &dim));
  TF_RETURN_IF_ERROR(c->GetAttr("num_slots", &num_slots));
  *out = c->MakeDim(dim * (1 + num_slots));
  return tensorflow::OkStatus();
}

// The `dim` (or another int) attr as a dimension.
inline tensorflow::Status DimAttr(tensorflow::shape_inference::InferenceContext* c,
                                  const char* attr,
                                  tensorflow::shape_inference::DimensionHandle* out) {
  int64_t dim = 0;
  TF_RETURN_IF_ERROR(c->GetAttr(attr, &dim));
  *out = c->MakeDim(dim);
  return tensorflow::OkStatus();
}

// Ops that answer one row per key: input 1 holds the keys (rank 1) and
// output 0 is [number of keys, dim].
inline tensorflow::Status RowPerKeyShape(tensorflow::shape_inference::InferenceContext* c) {
  tensorflow::shape_inference::ShapeHandle keys;
  TF_RETURN_IF_ERROR(c->WithRank(c->input(1), 1, &keys));
  tensorflow::shape_inference::DimensionHandle dim;
  TF_RETURN_IF_ERROR(DimAttr(c, "dim", &dim));
  c->set_output(0, c->Matrix(c->Dim(keys, 0), dim));
  return tensorflow::OkStatus();
}

// Stats ops: a vector of names and a vector of values.
inline tensorflow::Status StatsShape(tensorflow::shape_inference::InferenceContext* c) {
  c->set_output(0, c->Vector(c->UnknownDim()));
  c->set_output(1, c->Vector(c->UnknownDim()));
  return tensorflow::OkStatus();
}

}  // namespace het

#endif  // HET_TF_OPS_SHAPE_FNS_H_

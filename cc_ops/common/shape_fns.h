// Shape functions shared by the ops of every area.
#ifndef HET_TF_COMMON_SHAPE_FNS_H_
#define HET_TF_COMMON_SHAPE_FNS_H_

#include "tensorflow/core/framework/shape_inference.h"

namespace het {

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

// Ops whose every output is a vector of a length known only when they run
// (the stats ops' names and values, a list of keys, a request per shard).
inline tensorflow::Status VectorsShape(tensorflow::shape_inference::InferenceContext* c) {
  for (int i = 0; i < c->num_outputs(); ++i) c->set_output(i, c->Vector(c->UnknownDim()));
  return tensorflow::OkStatus();
}

}  // namespace het

#endif  // HET_TF_COMMON_SHAPE_FNS_H_

// Shape functions shared by the table and cache ops.
#ifndef HET_TF_OPS_SHAPE_FNS_H_
#define HET_TF_OPS_SHAPE_FNS_H_

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

// Stats ops: a vector of names and a vector of values.
inline tensorflow::Status StatsShape(tensorflow::shape_inference::InferenceContext* c) {
  c->set_output(0, c->Vector(c->UnknownDim()));
  c->set_output(1, c->Vector(c->UnknownDim()));
  return tensorflow::OkStatus();
}

}  // namespace het

#endif  // HET_TF_OPS_SHAPE_FNS_H_

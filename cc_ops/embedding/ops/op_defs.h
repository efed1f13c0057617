// Attrs and shapes shared by the table and cache ops.
#ifndef HET_TF_EMBEDDING_OPS_OP_DEFS_H_
#define HET_TF_EMBEDDING_OPS_OP_DEFS_H_

#include "cc_ops/common/shape_fns.h"
#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/shape_inference.h"

// The table optimizer's attrs, with the row constraint it applies, shared by
// HetTableShard and HetCache (whose local steps follow the same optimizer).
#define HET_OPTIMIZER_ATTRS()                         \
  Attr("optimizer: string = 'adagrad'")               \
      .Attr("beta_1: float = 0.9")                    \
      .Attr("beta_2: float = 0.999")                  \
      .Attr("epsilon: float = 1e-7")                  \
      .Attr("initial_accumulator_value: float = 0.1") \
      .Attr("l1: float = 0.0")                        \
      .Attr("l2: float = 0.0")                        \
      .Attr("learning_rate_power: float = -0.5")      \
      .Attr("ftrl_beta: float = 0.0")                 \
      .Attr("constraint: string = 'none'")            \
      .Attr("constraint_min_value: float = 0.0")      \
      .Attr("constraint_max_value: float = 0.0")      \
      .Attr("constraint_rate: float = 1.0")

// How a table makes new rows (row_initializer.h): its shards, and a cache
// that makes the rows made for it (initial_state.h).
#define HET_INITIALIZER_ATTRS()             \
  Attr("initializer: string = 'uniform'")   \
      .Attr("initializer_a: float = -0.05") \
      .Attr("initializer_b: float = 0.05")  \
      .Attr("seed: int = 0")

// The tail of an op that makes, or finds by shared_name on its device, a
// het resource, and outputs its handle.
#define HET_SHARED_RESOURCE()           \
  Attr("container: string = ''")        \
      .Attr("shared_name: string = ''") \
      .SetIsStateful()                  \
      .SetShapeFn(tensorflow::shape_inference::ScalarShape)

// The wire version of an op that carries rows between a worker and a shard:
// the worker's build sets it, the shard's kernel refuses another
// (exchange_wire.h kWireVersion); 0 is a build before ops carried one.
#define HET_WIRE_VERSION() Attr("wire_version: int = 0")

// Rows' whole states as outputs (RowStatesShape gives their shapes).
#define HET_ROW_STATE_OUTPUTS()    \
  Output("values: float")          \
      .Output("slots: float")      \
      .Output("row_clocks: int64") \
      .Output("steps: int64")      \
      .Attr("dim: int >= 1")       \
      .Attr("num_slots: int >= 0")

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

}  // namespace het

#endif  // HET_TF_EMBEDDING_OPS_OP_DEFS_H_

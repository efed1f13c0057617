// Ops of Herald's embedding scheduling (docs/herald.md): where each sample
// of a global batch trains.
#include "cc_ops/common/shape_fns.h"
#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/shape_inference.h"

namespace het {

using tensorflow::shape_inference::InferenceContext;
using tensorflow::shape_inference::ShapeHandle;

REGISTER_OP("HetAssignSamples")
    .Input("scores: int32")
    .Input("sizes: int64")
    .Output("workers: int32")
    .Attr("stay_bonus: int >= 0 = 0")
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle scores, sizes;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 2, &scores));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(1), 1, &sizes));
      c->set_output(0, c->Vector(c->Dim(scores, 0)));
      return tensorflow::OkStatus();
    })
    .Doc(R"doc(
Location-aware allocation: scores[i, w] is how many of sample i's rows
worker w's cache holds, sizes[w] how many samples worker w read (the batch
holds worker 0's first, in rank order). Each sample gets the worker it
trains on, every worker keeping its count; the answer depends only on the
inputs, so every worker computes the same one. stay_bonus is added to a
sample's score at the worker that read it.
)doc");

REGISTER_OP("HetKeySummary")
    .Input("keys: int64")
    .Output("summary: int64")
    .SetShapeFn(VectorsShape)
    .Doc(R"doc(
A Bloom filter of keys (10 bits a key, 7 probes, about 1% false positives):
what a rank shares of its cache for Herald's allocation. Empty for no keys.
)doc");

REGISTER_OP("HetKeySummaryHolds")
    .Input("summary: int64")
    .Input("keys: int64")
    .Output("held: bool")
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle summary;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 1, &summary));
      c->set_output(0, c->input(1));
      return tensorflow::OkStatus();
    })
    .Doc(R"doc(
Whether each key may be in a HetKeySummary (false only for keys it was not
built from; an empty summary holds nothing). held has the keys' shape.
)doc");

}  // namespace het

// Between a lookup's ids and its distinct rows (core/row_slices.h): the
// distinct ids, each id's row from theirs, and each id's gradient slices
// summed back into one row. Each gives what a TensorFlow op gives (Unique,
// GatherV2, UnsortedSegmentSum), faster, for any table.
#include "cc_ops/embedding/ops/op_defs.h"
#include "tensorflow/core/framework/op.h"

namespace het {

using tensorflow::shape_inference::DimensionHandle;
using tensorflow::shape_inference::InferenceContext;
using tensorflow::shape_inference::ShapeHandle;

REGISTER_OP("HetUnique")
    .Input("ids: int64")
    .Output("unique: int64")
    .Output("inverse: int32")
    .Attr("label: string = 'a table'")
    .SetShapeFn([](InferenceContext* c) {
      c->set_output(0, c->Vector(c->UnknownDim()));
      c->set_output(1, c->input(0));
      return tensorflow::OkStatus();
    })
    .Doc(R"doc(
The distinct `ids` (any shape) in order of first appearance, and each id's
place among them in the ids' shape: tf.unique's answer for the flat ids.
)doc");

REGISTER_OP("HetExpandRows")
    .Input("rows: float")
    .Input("at: int32")
    .Output("out: float")
    .Attr("label: string = 'a table'")
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle rows, out;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 2, &rows));
      TF_RETURN_IF_ERROR(c->Concatenate(c->input(1), c->Vector(c->Dim(rows, 1)), &out));
      c->set_output(0, out);
      return tensorflow::OkStatus();
    })
    .Doc(R"doc(
Each place's row of `rows` (the distinct ids'), in the places' shape plus the
rows' width: tf.gather(rows, at). Every place must lie among the rows.
`label` names the table in errors.
)doc");

REGISTER_OP("HetSumSlices")
    .Input("values: float")
    .Input("at: int32")
    .Input("count: int32")
    .Output("sums: float")
    .Output("finite: bool")
    .Attr("label: string = 'a table'")
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle values, at, unused;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 2, &values));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(1), 1, &at));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(2), 0, &unused));
      DimensionHandle n, count;
      TF_RETURN_IF_ERROR(c->Merge(c->Dim(values, 0), c->Dim(at, 0), &n));
      TF_RETURN_IF_ERROR(c->MakeDimForScalarInput(2, &count));
      c->set_output(0, c->Matrix(count, c->Dim(values, 1)));
      c->set_output(1, c->Scalar());
      return tensorflow::OkStatus();
    })
    .Doc(R"doc(
Row `j` of `sums` adds the `values` slices whose `at` is `j`, in their order
from zero (as UnsortedSegmentSum adds them): each id's gradient slices as one.
`finite`: whether every sum is. Every place must lie in [0, count). `label`
names the table in errors.
)doc");

}  // namespace het

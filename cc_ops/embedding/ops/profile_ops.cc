// Ops of FAE's profiling pass: exact access counts per key of a table, over
// a sample of the training input, and the most accessed keys.
#include "cc_ops/embedding/ops/op_defs.h"
#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/shape_inference.h"

namespace het {

REGISTER_OP("HetAccessCounter")
    .Output("handle: resource")
    .Attr("table_name: string")
    .Attr("vocabulary_size: int = -1")
    .HET_SHARED_RESOURCE()
    .Doc(R"doc(
Creates, or finds by shared_name on this device, exact access counts per id
of table `table_name`; ids must be in [0, vocabulary_size) (-1: any int64).
)doc");

REGISTER_OP("HetCountAccesses")
    .Input("counter: resource")
    .Input("ids: int64")
    .SetShapeFn(tensorflow::shape_inference::NoOutputs)
    .Doc("Counts one access of each id (any shape; repeats count again). A bad id counts nothing.");

REGISTER_OP("HetHottestKeys")
    .Input("counter: resource")
    .Input("k: int64")
    .Output("keys: int64")
    .Output("counts: int64")
    .Output("total: int64")
    .Output("distinct: int64")
    .SetShapeFn([](tensorflow::shape_inference::InferenceContext* c) {
      c->set_output(0, c->Vector(c->UnknownDim()));
      c->set_output(1, c->Vector(c->UnknownDim()));
      c->set_output(2, c->Scalar());
      c->set_output(3, c->Scalar());
      return tensorflow::OkStatus();
    })
    .Doc(R"doc(
The k most accessed ids (all if fewer), most first, equal counts in ascending
id order; with the accesses counted in all and the distinct ids among them.
)doc");

}  // namespace het

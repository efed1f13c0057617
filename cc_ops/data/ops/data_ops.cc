// Ops of the input pipeline: parsing Criteo TSV lines into labels, dense
// features and field-salted int64 keys.
#include "cc_ops/common/shape_fns.h"
#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/shape_inference.h"

namespace het {

using tensorflow::shape_inference::InferenceContext;
using tensorflow::shape_inference::ShapeHandle;

// labels [n], dense [n, 13], keys [n, 26] and a per-row vector [n].
tensorflow::Status CriteoBatchShape(InferenceContext* c,
                                    tensorflow::shape_inference::DimensionHandle n) {
  c->set_output(0, c->Vector(n));
  c->set_output(1, c->Matrix(n, 13));
  c->set_output(2, c->Matrix(n, 26));
  c->set_output(3, c->Vector(n));
  return tensorflow::OkStatus();
}

REGISTER_OP("HetParseCriteo")
    .Input("lines: string")
    .Input("first_line: int64")
    .Input("source: string")
    .Output("labels: float")
    .Output("dense: float")
    .Output("keys: int64")
    .Output("valid: bool")
    .Attr("has_label: bool = true")
    .Attr("skip_malformed: bool = true")
    .Attr("counter: string = ''")
    // Counts lines into the process-wide counter named by `counter`.
    .SetIsStateful()
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle lines, scalar;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 1, &lines));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(1), 0, &scalar));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(2), 0, &scalar));
      return CriteoBatchShape(c, c->Dim(lines, 0));
    })
    .Doc(R"doc(
Parses Criteo TSV lines. `first_line` is the 1-based line number of lines[0]
in `source`, both used only in error messages. A malformed line either fails
the op with its file, line number and reason (skip_malformed false) or comes
out with valid false and zeros (skip_malformed true); either way it is counted
under `counter` (see HetParseStats).
)doc");

REGISTER_OP("HetParseStats")
    .Output("names: string")
    .Output("values: int64")
    .Attr("counter: string")
    .SetIsStateful()
    .SetShapeFn(VectorsShape)
    .Doc("Records read and records found malformed under `counter` in this process.");

}  // namespace het

namespace het {

#define HET_SYNTHETIC_ATTRS               \
  Attr("seed: int = 0")                   \
      .Attr("scale: float = 1.0")         \
      .Attr("zipf_exponent: float = 1.1") \
      .Attr("drift: float = 0.0")
// The row ops draw every row as at `position` when it is >= 0.
#define HET_SYNTHETIC_ROW_ATTRS HET_SYNTHETIC_ATTRS.Attr("position: int = -1")

REGISTER_OP("HetSyntheticCriteo")
    .Input("stream: int64")
    .Input("first_row: int64")
    .Input("num_rows: int64")
    .Output("labels: float")
    .Output("dense: float")
    .Output("keys: int64")
    .Output("logits: float")
    .HET_SYNTHETIC_ROW_ATTRS
    .SetShapeFn([](InferenceContext* c) { return CriteoBatchShape(c, c->UnknownDim()); })
    .Doc(R"doc(
Rows first_row .. first_row + num_rows - 1 of a stream of synthetic
Criteo-like samples, as HetParseCriteo would read them from the TSV that
HetSyntheticCriteoLines writes. `logits` are the hidden model's, the best any
model can score. Deterministic in (seed, scale, zipf_exponent, drift, stream,
row, position). With drift R > 0, each large field's popularity moves R ids
a row: at position t the id of Zipf rank k is (k - floor(R t)) mod n. A
row's position is its index in the stream, or `position` when >= 0 (held-out
rows drawn as the stream stands there).
)doc");

REGISTER_OP("HetSyntheticCriteoLines")
    .Input("stream: int64")
    .Input("first_row: int64")
    .Input("num_rows: int64")
    .Output("lines: string")
    .HET_SYNTHETIC_ROW_ATTRS
    // A comment here keeps clang-format from joining the macro to the next call.
    .SetShapeFn(VectorsShape)
    .Doc("The same rows as HetSyntheticCriteo, as Criteo TSV lines without newlines.");

REGISTER_OP("HetSyntheticCriteoCardinalities")
    .Output("cardinalities: int64")
    .HET_SYNTHETIC_ATTRS
    .SetShapeFn([](InferenceContext* c) {
      c->set_output(0, c->Vector(26));
      return tensorflow::OkStatus();
    })
    .Doc("Each categorical field's number of ids under these settings.");

#undef HET_SYNTHETIC_ROW_ATTRS
#undef HET_SYNTHETIC_ATTRS

}  // namespace het

namespace het {

REGISTER_OP("HetCountRecords")
    .Input("valid: bool")
    .Output("valid_out: bool")
    .Attr("counter: string")
    .SetIsStateful()
    .SetShapeFn(tensorflow::shape_inference::UnchangedShape)
    .Doc(R"doc(
Adds a batch's records and its invalid ones to the counter HetParseStats
reads, for readers whose records are checked outside HetParseCriteo. Passes
`valid` through, so that the count sits on the pipeline's data path.
)doc");

}  // namespace het

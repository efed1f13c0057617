// Ops on a table shard, which lives in the ResourceMgr of the device it is
// made on (normally a PS task), found by its shared name by every client.
#include "cc_ops/embedding/ops/op_defs.h"
#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/shape_inference.h"

namespace het {

using tensorflow::shape_inference::DimensionHandle;
using tensorflow::shape_inference::InferenceContext;
using tensorflow::shape_inference::ShapeHandle;

namespace {

// A push's inputs after the handle: keys [n], values [n, width], counts [n], a rate.
tensorflow::Status PushInputShapes(InferenceContext* c, ShapeHandle* keys) {
  ShapeHandle unused;
  TF_RETURN_IF_ERROR(c->WithRank(c->input(1), 1, keys));
  TF_RETURN_IF_ERROR(c->WithRank(c->input(2), 2, &unused));
  TF_RETURN_IF_ERROR(c->WithRank(c->input(3), 1, &unused));
  return c->WithRank(c->input(4), 0, &unused);
}

// Outputs values, slots, clocks and steps of rows from `first` on.
tensorflow::Status RowStatesShape(InferenceContext* c, int first, DimensionHandle n) {
  DimensionHandle dim, slots;
  TF_RETURN_IF_ERROR(DimAttr(c, "dim", &dim));
  TF_RETURN_IF_ERROR(DimAttr(c, "num_slots", &slots));
  c->set_output(first, c->Matrix(n, dim));
  c->set_output(first + 1, c->MakeShape({n, slots, dim}));
  c->set_output(first + 2, c->Vector(n));
  c->set_output(first + 3, c->Vector(n));
  return tensorflow::OkStatus();
}

}  // namespace

REGISTER_OP("HetTableShard")
    .Output("handle: resource")
    .Attr("table_name: string")
    .Attr("dim: int >= 1")
    .Attr("vocabulary_size: int = -1")
    .Attr("max_rows: int = -1")
    .Attr("on_full: {'refuse', 'evict'} = 'refuse'")
    .Attr("eviction: {'lru', 'lfu'} = 'lru'")
    .Attr("ttl_seconds: int = -1")
    .Attr("admit_after: int = 0")
    .HET_INITIALIZER_ATTRS()
    .HET_OPTIMIZER_ATTRS()
    .HET_SHARED_RESOURCE()
    .Doc(R"doc(
Creates, or finds by shared_name on this device, one shard of an embedding
table, which maps int64 keys to rows of `dim` floats made on first touch, with
optimizer slots and a per-row clock of applied updates. With max_rows > 0, a
request that would take the shard past max_rows rows fails with
ResourceExhausted and changes nothing (on_full='refuse'), or first evicts the
least recently (eviction='lru') or least often ('lfu') used rows that no
worker's cache holds (on_full='evict'). With ttl_seconds > 0, rows no
request used for longer than that (and no cache holds) are dropped. With
admit_after = K > 0, an id becomes a row at its K-th training read; until
then reads give zeros and pushes of it are dropped.
)doc");

REGISTER_OP("HetTableGather")
    .Input("table: resource")
    .HET_WIRE_VERSION()
    .Input("keys: int64")
    .Output("values: float")
    .Attr("dim: int >= 1")
    .Attr("training: bool = true")
    .SetShapeFn(RowPerKeyShape)
    .Doc(R"doc(
Rows of `keys`, created on first touch: the no-cache read. A table that admits
ids creates only the admitted ids of a training read; other ids read zeros.
)doc");

REGISTER_OP("HetTablePull")
    .Input("table: resource")
    .HET_WIRE_VERSION()
    .Input("keys: int64")
    .Input("clocks: int64")
    .Input("read_staleness: int64")
    .Output("positions: int32")
    .Output("values: float")
    .Output("row_clocks: int64")
    .Output("epoch: int64")
    .Attr("dim: int >= 1")
    .Attr("num_slots: int >= 0 = 0")
    .Attr("training: bool = true")
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle unused;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(1), 1, &unused));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(2), 1, &unused));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(3), 0, &unused));
      DimensionHandle width;
      TF_RETURN_IF_ERROR(StateWidthAttr(c, &width));
      c->set_output(0, c->Vector(c->UnknownDim()));
      c->set_output(1, c->Matrix(c->UnknownDim(), width));
      c->set_output(2, c->Vector(c->UnknownDim()));
      c->set_output(3, c->Scalar());
      return tensorflow::OkStatus();
    })
    .Doc(R"doc(
The clock-checked read. `clocks` holds the local clock of the caller's cached
copy of each key, or -1 for none. Returns, at ascending positions, only the
rows that are missing or whose server clock exceeds the caller's by more than
read_staleness (negative: unbounded), with their server clocks. With
num_slots 0 each row is its dim values; with the table's number of slots it
is the row's whole state, values then slots, for a training cache. `epoch`
is the shard's as the pull began (HetTableExchange's answers carry it too).
)doc");

REGISTER_OP("HetTableExchange")
    .Input("table: resource")
    .Input("request: uint8")
    .Output("answer: uint8")
    .Attr("dim: int >= 1")
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle unused;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(1), 1, &unused));
      c->set_output(0, c->Vector(c->UnknownDim()));
      return tensorflow::OkStatus();
    })
    .Doc(R"doc(
A worker cache's exchange with this shard, one a training step (sync
'refresh'), in which a hit costs no bytes. The request (HetCacheBeginExchange)
names the cache's worker and generation (a new generation starts a new
record) and carries its pushes due, the keys it evicted since its last
exchange and the keys it does not hold. The shard merges the pushes, then
answers with the pushed rows, the misses' whole states (values then slots)
and clocks in request order, the fresh states and clocks of the worker's
copies that other writers moved past its read bound since it took them, and
the shard's epoch, which changes when the shard is made or cleared. A
malformed or refused request changes nothing.
)doc");

REGISTER_OP("HetTablePushDeltas")
    .Input("table: resource")
    .HET_WIRE_VERSION()
    .Input("keys: int64")
    .Input("deltas: float")
    .Input("counts: int64")
    .Input("learning_rate: float")
    .Input("base_clocks: int64")
    .Input("sender: int64")
    .Input("unanswered: int64")
    .Output("states: float")
    .Output("row_clocks: int64")
    .Output("epoch: int64")
    .Output("lean: bool")
    .Output("refused: int64")
    .Attr("dim: int >= 1")
    .Attr("num_slots: int >= 0")
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle keys, unused;
      TF_RETURN_IF_ERROR(PushInputShapes(c, &keys));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(5), 1, &unused));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(6), 1, &unused));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(7), 0, &unused));
      DimensionHandle width;
      TF_RETURN_IF_ERROR(StateWidthAttr(c, &width));
      DimensionHandle answered = c->UnknownDim();
      c->set_output(0, c->Matrix(c->UnknownDim(), width));
      c->set_output(1, c->Vector(answered));
      c->set_output(2, c->Scalar());
      c->set_output(3, c->Vector(answered));
      c->set_output(4, c->Vector(c->UnknownDim()));
      return tensorflow::OkStatus();
    })
    .Doc(R"doc(
A worker cache's push: each key's state delta (what `counts` local optimizer
steps changed in its values and slots) is merged into the row and its clock
advances by the count. `base_clocks` are the row clocks the cache's copies
were taken at: the updates since are other writers', and with Adam they set
the share of the values' change the merge keeps. All keys and values are
checked before any row changes. The rows' clocks after the merge come back
for the cache to take, and their states but for the rows `lean` flags: a
row no other writer reached since its base clock, whose merge the cache
computes itself (acknowledged by its clock alone). `worker` and
`generation` name the sender (HetCacheAccumulate gives them; 0 for none):
its recorded copies take the merged rows, and other workers' copies may be
queued as stale. The first `unanswered` keys (rows the cache evicted) get
no answer: the outputs hold the others', in order. In a numbered round
(the sender's sequence > 0), an update that would make a row non-finite is
refused alone: the row keeps its state and clock (an answered one comes
back whole) and its key is in `refused`.
)doc");

REGISTER_OP("HetTablePush")
    .Input("table: resource")
    .HET_WIRE_VERSION()
    .Input("keys: int64")
    .Input("grads: float")
    .Input("counts: int64")
    .Input("learning_rate: float")
    .Output("values: float")
    .Output("row_clocks: int64")
    .Attr("dim: int >= 1")
    .Attr("return_rows: bool = true")
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle keys;
      TF_RETURN_IF_ERROR(PushInputShapes(c, &keys));
      bool return_rows;
      TF_RETURN_IF_ERROR(c->GetAttr("return_rows", &return_rows));
      DimensionHandle dim;
      TF_RETURN_IF_ERROR(DimAttr(c, "dim", &dim));
      DimensionHandle n = return_rows ? c->Dim(keys, 0) : c->MakeDim(0);
      c->set_output(0, c->Matrix(n, dim));
      c->set_output(1, c->Vector(n));
      return tensorflow::OkStatus();
    })
    .Doc(R"doc(
Applies each key's gradient sum with the table's optimizer and advances its
clock by the count. All keys are checked before any row changes. With
return_rows the updated rows and clocks come back for the caller's cache.
)doc");

REGISTER_OP("HetTableExport")
    .Input("table: resource")
    .Input("offset: int64")
    .Input("limit: int64")
    .Output("keys: int64")
    .HET_ROW_STATE_OUTPUTS()
    .SetShapeFn([](InferenceContext* c) {
      DimensionHandle n = c->UnknownDim();
      c->set_output(0, c->Vector(n));
      return RowStatesShape(c, 1, n);
    })
    .Doc("Rows [offset, offset + limit) of the shard, for checkpoints of any size.");

REGISTER_OP("HetTableRead")
    .Input("table: resource")
    .HET_WIRE_VERSION()
    .Input("keys: int64")
    .HET_ROW_STATE_OUTPUTS()
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle keys;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(1), 1, &keys));
      return RowStatesShape(c, 0, c->Dim(keys, 0));
    })
    .Doc(R"doc(
The whole state of each key's row (values, optimizer slots, clock, step
count), in key order, rows created on first touch: a hot block's load.
)doc");

REGISTER_OP("HetTableImport")
    .Input("table: resource")
    .Input("keys: int64")
    .Input("values: float")
    .Input("slots: float")
    .Input("row_clocks: int64")
    .Input("steps: int64")
    .SetShapeFn(tensorflow::shape_inference::NoOutputs)
    .Doc("Inserts or overwrites rows; nothing changes if any input is invalid.");

REGISTER_OP("HetTableClear")
    .Input("table: resource")
    .SetShapeFn(tensorflow::shape_inference::NoOutputs)
    .Doc("Drops every row of the shard, as before restoring a checkpoint.");

REGISTER_OP("HetTableSketch")
    .Input("table: resource")
    .Output("counts: uint8")
    .SetShapeFn([](InferenceContext* c) {
      c->set_output(0, c->Vector(c->UnknownDim()));
      return tensorflow::OkStatus();
    })
    .Doc(R"doc(
The counters of the shard's admission sketch (empty when it admits every
id): the sightings of ids not admitted yet, which a checkpoint keeps.
)doc");

REGISTER_OP("HetTableMergeSketch")
    .Input("table: resource")
    .Input("counts: uint8")
    .SetShapeFn(tensorflow::shape_inference::NoOutputs)
    .Doc(R"doc(
Takes a checkpoint's admission sketch back, each counter the larger of the
shard's and the checkpoint's. A shard that admits every id ignores it;
counters of another size are refused, changing nothing.
)doc");

REGISTER_OP("HetTableForgetChanges")
    .Input("table: resource")
    .SetShapeFn(tensorflow::shape_inference::NoOutputs)
    .Doc(R"doc(
Starts tracking the shard's changes for incremental checkpoints, or drops
those tracked: the cut of a full checkpoint or of a restore.
)doc");

REGISTER_OP("HetTableTakeChanges")
    .Input("table: resource")
    .Input("kept: bool")
    .Output("tracked: bool")
    .Output("changed: int64")
    .Output("dropped: int64")
    .SetShapeFn([](InferenceContext* c) {
      c->set_output(0, c->Scalar());
      c->set_output(1, c->Vector(c->UnknownDim()));
      c->set_output(2, c->Vector(c->UnknownDim()));
      return tensorflow::OkStatus();
    })
    .Doc(R"doc(
The keys of the rows created or written since the last ForgetChanges or
kept Take (those held now), and of the rows dropped since (not held now),
for an incremental checkpoint. kept: whether the checkpoint of the last
Take was kept; if not, its changes come again. tracked is false, and the
keys empty, when the shard tracks no changes: the checkpoint must be full.
)doc");

REGISTER_OP("HetTableReadHeld")
    .Input("table: resource")
    .HET_WIRE_VERSION()
    .Input("keys: int64")
    .Output("held: int64")
    .Output("absent: int64")
    .HET_ROW_STATE_OUTPUTS()
    .SetShapeFn([](InferenceContext* c) {
      DimensionHandle n = c->UnknownDim();
      c->set_output(0, c->Vector(n));
      c->set_output(1, c->Vector(c->UnknownDim()));
      return RowStatesShape(c, 2, n);
    })
    .Doc(R"doc(
The whole state of each key's row the shard holds, with its key (held), and
the keys it does not hold (absent); creates no row.
)doc");

REGISTER_OP("HetTableErase")
    .Input("table: resource")
    .Input("keys: int64")
    .SetShapeFn(tensorflow::shape_inference::NoOutputs)
    .Doc("Drops the rows of the keys the shard holds: a restored chain's dropped rows.");

REGISTER_OP("HetTableStats")
    .Input("table: resource")
    .Output("names: string")
    .Output("values: int64")
    .SetShapeFn(VectorsShape)
    .Doc("Rows held, bytes per row, memory and traffic counters of the shard.");

REGISTER_OP("HetShardIndex")
    .Input("keys: int64")
    .Output("shards: int32")
    .Attr("num_shards: int >= 1")
    .Attr("vocabulary_size: int = -1")
    .Attr("table_name: string = ''")
    .SetShapeFn(tensorflow::shape_inference::UnchangedShape)
    .Doc(R"doc(
The shard of each key, a stable hash of the key alone. With a vocabulary size
it first checks every key, so that a bad id fails before any shard is asked.
)doc");

REGISTER_OP("HetBuildInfo")
    .Output("tensorflow_version: string")
    .SetShapeFn(tensorflow::shape_inference::ScalarShape)
    .Doc("The TensorFlow version this op library was compiled against.");

}  // namespace het

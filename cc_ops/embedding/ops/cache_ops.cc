// Ops on a worker's row cache. A cache lives on the worker's own device; the
// tensors that pass between these ops and the table ops are the only
// traffic between a worker and the parameter servers.
#include "cc_ops/embedding/ops/op_defs.h"
#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/shape_inference.h"

namespace het {

using tensorflow::shape_inference::DimensionHandle;
using tensorflow::shape_inference::InferenceContext;
using tensorflow::shape_inference::ShapeHandle;

namespace {

tensorflow::Status PushListShape(InferenceContext* c) {
  DimensionHandle n = c->UnknownDim();
  c->set_output(0, c->Vector(n));
  // State deltas: dim values and the optimizer's slots, as wide as the state.
  c->set_output(1, c->Matrix(n, c->UnknownDim()));
  c->set_output(2, c->Vector(n));
  c->set_output(3, c->Vector(n));
  c->set_output(4, c->Scalar());
  c->set_output(5, c->Matrix(c->UnknownDim(), 4));
  return tensorflow::OkStatus();
}

// The pushes, then the places of the keys not cached.
tensorflow::Status AccumulateShape(InferenceContext* c) {
  TF_RETURN_IF_ERROR(PushListShape(c));
  c->set_output(6, c->Vector(c->UnknownDim()));
  return tensorflow::OkStatus();
}

}  // namespace

// The pushes a cache hands out (HetCacheAccumulate, HetCacheFlush): keys,
// state deltas, update counts and the server clocks the deltas started
// from; how many leading ones are rows the cache evicted (it wants no state
// back for them); and, for each shard, the sender to push them with
// (worker id, generation, the round's sequence number, the epoch seen).
#define HET_PUSH_OUTPUTS()               \
  Output("push_keys: int64")             \
      .Output("push_deltas: float")      \
      .Output("push_counts: int64")      \
      .Output("push_base_clocks: int64") \
      .Output("push_evicted: int64")     \
      .Output("senders: int64")          \
      .Attr("dim: int >= 1")
#define HET_PUSH_LIST() HET_PUSH_OUTPUTS().SetShapeFn(PushListShape)

REGISTER_OP("HetCache")
    .Output("handle: resource")
    .Attr("table_name: string")
    .Attr("dim: int >= 1")
    .Attr("capacity: int >= 1")
    .Attr("vocabulary_size: int = -1")
    .Attr("policy: string = 'lfu'")
    .Attr("pin_threshold: int >= 1 = 100")
    .Attr("read_staleness: int = 100")
    .Attr("write_staleness: int = 100")
    .Attr("staleness_ramp: int = 0")
    .Attr("sync: string = 'refresh'")
    .Attr("num_shards: int >= 1 = 1")
    .Attr("rows_leave: bool = false")
    .Attr("rebuild_rows: bool = false")
    .Attr("wire_dtype: string = 'float32'")
    .HET_INITIALIZER_ATTRS()
    .HET_OPTIMIZER_ATTRS()
    .HET_SHARED_RESOURCE()
    .Doc(R"doc(
Creates, or finds by shared_name on this device, a worker cache of `capacity`
rows with LRU, LFU or LFU-opt eviction and HET's per-row clocks. Negative
staleness bounds are unbounded. With staleness_ramp > 0 the bounds in force
are at most the cache's training steps / staleness_ramp. The optimizer attrs
must be the table's: the cache takes its local steps with them. `sync` is how
training lookups sync, 'refresh' (HetCacheBeginExchange, HetTableExchange and
HetCacheEndExchange, one request to each shard a step that also carries the
pushes; hits cost no bytes) or 'check' (HetCachePrepare, HetTablePull and
HetCacheComplete; every key goes with its clock, as in HET).
`num_shards` is the table's. `rows_leave`: the table's shards may evict or
expire rows, and the cache reports a copy's eviction only once its updates
have gone out. `rebuild_rows`: the initializer attrs are the table's, and the
cache makes a row a shard made for its miss (sync 'refresh'), which then
sends the row's clock alone. `wire_dtype` ('float32', 'bfloat16' or
'float16', sync 'refresh' only): the type the exchange's rows travel in; a
push's rounding stays in the cache and joins the row's next push.
)doc");

REGISTER_OP("HetCachePrepare")
    .Input("cache: resource")
    .Input("ids: int64")
    .Output("unique_keys: int64")
    .Output("inverse: int32")
    .Output("clocks: int64")
    .Output("read_staleness: int64")
    .SetShapeFn([](InferenceContext* c) {
      c->set_output(0, c->Vector(c->UnknownDim()));
      c->set_output(1, c->input(1));
      c->set_output(2, c->Vector(c->UnknownDim()));
      c->set_output(3, c->Scalar());
      return tensorflow::OkStatus();
    })
    .Doc(R"doc(
First half of a cached lookup: the batch's unique keys, where each id went,
the local clock of each key's cached copy (-1 if none) and the read bound in
force, to send to the table shards' HetTablePull.
)doc");

REGISTER_OP("HetCacheBeginExchange")
    .Input("cache: resource")
    .Input("ids: int64")
    .Output("unique_keys: int64")
    .Output("inverse: int32")
    .Output("requests: num_shards * uint8")
    .Attr("num_shards: int >= 1")
    .Attr("carry_updates: bool = true")
    .SetShapeFn([](InferenceContext* c) {
      c->set_output(0, c->Vector(c->UnknownDim()));
      c->set_output(1, c->input(1));
      for (int s = 2; s < c->num_outputs(); ++s) c->set_output(s, c->Vector(c->UnknownDim()));
      return tensorflow::OkStatus();
    })
    .Doc(R"doc(
First half of a training lookup of a cache with sync 'refresh': the batch's
unique keys, where each id went, and one request for each table shard's
HetTableExchange. A request carries the pushes the last HetCacheAccumulate
made due, the evictions since the last completed exchange and the keys not
cached, as bytes. With carry_updates false only the keys not cached go: the
step's HetCacheBeginPrefetch carries the rest.
)doc");

REGISTER_OP("HetCacheStage")
    .Input("cache: resource")
    .Input("ids: int64")
    .SetShapeFn(tensorflow::shape_inference::NoOutputs)
    .Doc(R"doc(
The lookahead's input side: stages the ids of a batch that a training step
will look up soon (any shape, flattened), in the order the steps will take
them. The input pipeline runs it before it hands over the batch before.
)doc");

REGISTER_OP("HetCacheBeginPrefetch")
    .Input("cache: resource")
    .Input("ids: int64")
    .Output("unique_keys: int64")
    .Output("requests: num_shards * uint8")
    .Attr("num_shards: int >= 1")
    .SetShapeFn(VectorsShape)
    .Doc(R"doc(
The prefetch of a training step whose lookup of `ids` is done: the unique
keys of the batch staged after `ids` (none if there is none) and one request
for each shard's HetTableExchange with the pushes due, the evictions and that
batch's keys not cached.
)doc");

REGISTER_OP("HetCacheEndPrefetch")
    .Input("cache: resource")
    .Input("unique_keys: int64")
    .Input("answers: num_shards * uint8")
    .Attr("num_shards: int >= 1")
    .SetShapeFn(tensorflow::shape_inference::NoOutputs)
    .Doc(R"doc(
Takes each shard's answer to HetCacheBeginPrefetch (in shard order): the
pushed rows, stale copies' fresh states, and the next batch's missing rows,
inserted without evicting the step's own batch. Run the step's
HetCacheAccumulate after it.
)doc");

REGISTER_OP("HetCacheEndExchange")
    .Input("cache: resource")
    .Input("unique_keys: int64")
    .Input("answers: num_shards * uint8")
    .Output("rows: float")
    .Attr("num_shards: int >= 1")
    .Attr("dim: int >= 1")
    .SetShapeFn(RowPerKeyShape)
    .Doc(R"doc(
Second half of a training lookup with sync 'refresh': takes each shard's
answer (in shard order) and gives the rows of all unique keys. Fails with
Aborted, changing nothing, when a shard's epoch changed: it lost its record of
the cache's copies, and the next lookup clears the cache.
)doc");

REGISTER_OP("HetCacheComplete")
    .Input("cache: resource")
    .Input("unique_keys: int64")
    .Input("positions: int32")
    .Input("values: float")
    .Input("row_clocks: int64")
    .Input("epochs: int64")
    .Output("rows: float")
    .Attr("dim: int >= 1")
    .Attr("training: bool = true")
    .SetShapeFn(RowPerKeyShape)
    .Doc(R"doc(
Second half of a cached lookup: takes the missing and stale rows the shards
returned (whole states in training, bare rows otherwise) and gives the rows
of all unique keys. In training it inserts and refreshes entries
(re-applying their own pending deltas); otherwise it changes nothing.
`epochs`: each shard's as its HetTablePull answered (or empty); one changed
since the cache's copies were taken (a restore this cache missed) fails the
lookup with Aborted, and the cache's next lookup starts empty.
)doc");

REGISTER_OP("HetCacheAccumulate")
    .Input("cache: resource")
    .Input("keys: int64")
    .Input("grads: float")
    .Input("learning_rate: float")
    .HET_PUSH_OUTPUTS()
    .Output("uncached: int64")
    .SetShapeFn(AccumulateShape)
    .Doc(R"doc(
Takes one local step of the table's optimizer per unique key cached (or
passed through by the last lookup) and, with sync 'check', returns the
pushes that are now due, as state deltas with their update counts and the
server clocks they started from: rows past the write bound and rows evicted
with pending updates. With sync 'refresh' it returns none: they go with the
next HetCacheBeginExchange. `uncached`: the places among `keys` of those
neither cached nor passed through, which took no step: the caller pushes
their gradients to the shards.
)doc");

REGISTER_OP("HetCacheAckPush")
    .Input("cache: resource")
    .Input("keys: int64")
    .Input("counts: int64")
    .Input("values: float")
    .Input("row_clocks: int64")
    .Input("epochs: int64")
    .Input("lean: bool")
    .Input("refused: int64")
    .SetShapeFn(tensorflow::shape_inference::NoOutputs)
    .Doc(R"doc(
Marks pushes as delivered. With the clocks HetTablePushDeltas returned
(`values` a matrix, `row_clocks` one for each pushed key after the evicted
ones that lead the push), the entries become the server's rows: `values`
holds the states of those `lean` does not flag (empty `lean`: none is), in
order; a lean row's state is the cache's own already. `epochs`, one per
shard as HetTablePushDeltas returned them (or empty), tell a shard restarted
or restored since the cache's copies were taken: the acknowledgement then
fails with Aborted and the cache's next lookup starts empty. `refused`: the
keys whose update the shards refused (HetTablePushDeltas'); the push is
acknowledged all the same, and then fails once, naming them.
)doc");

REGISTER_OP("HetCacheFlush")
    .Input("cache: resource")
    .HET_PUSH_LIST()
    .Doc("Every pending update, to push before a checkpoint, an export or the end.");

REGISTER_OP("HetCacheClear")
    .Input("cache: resource")
    .SetShapeFn(tensorflow::shape_inference::NoOutputs)
    .Doc("Drops every entry and pending update, as after restoring a checkpoint.");

REGISTER_OP("HetCachePin")
    .Input("cache: resource")
    .Input("keys: int64")
    .SetShapeFn(tensorflow::shape_inference::NoOutputs)
    .Doc(R"doc(
Makes `keys` the pinned rows, replacing the last set: once cached, a pinned
row is never evicted (FAE's hot rows under ParameterServerStrategy). The set
outlives HetCacheClear.
)doc");

REGISTER_OP("HetCacheDrop")
    .Input("cache: resource")
    .Input("keys: int64")
    .Output("outbox: int64")
    .SetShapeFn(tensorflow::shape_inference::ScalarShape)
    .Doc(R"doc(
Herald's plan: drops the cached copies of `keys`, the rows other workers read
next (they read and write them on the shards directly); pending updates join
the outbox. `outbox` is how many rows the next exchange will push: 0 when it
need not run.
)doc");

REGISTER_OP("HetCacheStaged")
    .Input("cache: resource")
    .Input("ids: int64")
    .Attr("batches: int >= 0")
    .Output("keys: int64")
    .SetShapeFn(VectorsShape)
    .Doc(R"doc(
Herald's window: the distinct ids, ascending, of up to `batches` batches the
input pipeline staged after the step's batch of `ids` (or, if that batch was
not staged as such, after the oldest staged batch no step took).
)doc");

REGISTER_OP("HetCacheMostUsed")
    .Input("cache: resource")
    .Input("count: int64")
    .Output("keys: int64")
    .SetShapeFn(VectorsShape)
    .Doc(R"doc(
Up to `count` cached keys, the most touched first: the summary of the cache
that location-aware allocation shares.
)doc");

REGISTER_OP("HetCacheStats")
    .Input("cache: resource")
    .Output("names: string")
    .Output("values: int64")
    .SetShapeFn(VectorsShape)
    .Doc("Lookup, hit, miss, eviction and traffic counters of the cache.");

}  // namespace het

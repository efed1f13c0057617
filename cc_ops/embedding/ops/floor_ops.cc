// The benchmark's reference for a cached table's traffic: the Belady floor
// (core/belady_floor.h), computed where the wire's sizes are known.
#include "cc_ops/embedding/ops/op_defs.h"
#include "tensorflow/core/framework/op.h"

namespace het {

REGISTER_OP("HetBeladyFloor")
    .Input("keys: int64")
    .Input("offsets: int64")
    .Input("refreshes: int64")
    .Input("made_keys: int64")
    .Output("names: string")
    .Output("values: int64")
    .Attr("table_name: string")
    .Attr("capacity: int")
    .Attr("width: int")
    .Attr("write_staleness: int = -1")
    .Attr("sync: string = 'refresh'")
    .Attr("num_shards: int = 1")
    .Attr("wire_dtype: string = 'float32'")
    .SetShapeFn(VectorsShape)
    .Doc(R"doc(
Replays one worker's training ids through a cache of `capacity` rows that
evicts by Belady's rule: step t looked up keys[offsets[t]:offsets[t + 1]].
Counts its misses, evictions and pushes, and the bytes the protocol `sync`
would move for them with `num_shards` shards, rows of `width` floats, plus
`refreshes` copies refreshed (the real run's count: other workers cause them).
`made_keys`: the keys whose first touch by this worker makes their row (no
worker touched them before): under 'refresh' each costs only its clock.
)doc");

}  // namespace het

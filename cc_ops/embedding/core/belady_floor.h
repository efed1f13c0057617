// A reference for a cached table's training traffic: the ids one worker
// trained, replayed step by step through a cache of the same capacity that
// evicts by Belady's rule (the row whose next use is furthest away), with
// each message's bytes as the protocol measured encodes them (wire_sizes.h,
// exchange_wire.h). `het-tf bench` reports each cached run's traffic against
// it.
//
// The replay knows the future, so no cache of that capacity misses less
// under this model of a step: every id of a step must be cached for it
// (only a step with more unique ids than the capacity passes some through,
// as the real cache does), and a miss inserts. It is a reference, not a
// proof of optimality: it keeps the measured protocol's messages (one
// exchange a step with each shard, every fetched row pushed back once when
// it leaves or at the final flush, the write bound's pushes), and counts
// none of what other workers cause (their pushes make copies stale: the
// caller adds the refreshes the real run made).
#ifndef HET_TF_EMBEDDING_CORE_BELADY_FLOOR_H_
#define HET_TF_EMBEDDING_CORE_BELADY_FLOOR_H_

#include <cstdint>

#include "cc_ops/common/status.h"
#include "cc_ops/embedding/core/cache_config.h"

namespace het {

struct FloorConfig {
  int64_t capacity = 0;  // rows
  int width = 0;         // floats of a row's state
  // A cached row is pushed once it holds more local updates than this
  // (each step that uses it adds one); negative: never.
  int64_t write_staleness = -1;
  SyncMode sync = SyncMode::kRefresh;
  int num_shards = 1;
  // The type the exchange's rows travel in (row_codec.h), as the real run's.
  RowType row_type = RowType::kFloat32;
  // Copies the shards refreshed in the real run because other workers'
  // pushes took them past the read bound: the floor pays for them as the
  // protocol does (a refresh's key, clock and state).
  int64_t refreshes = 0;
};

struct FloorCounts {
  int64_t steps = 0;
  int64_t unique_keys = 0;     // summed over the steps
  int64_t misses = 0;          // rows fetched (first touches among them)
  int64_t made = 0;            // of those, first touches the shard sent as a clock alone
  int64_t passed_through = 0;  // misses with no room: a step held more rows than the capacity
  int64_t evictions = 0;
  int64_t pushes = 0;   // rows pushed: evicted or passed through with updates, bound, flush
  int64_t flushed = 0;  // rows the final flush pushed
  uint64_t bytes_sent = 0;
  uint64_t bytes_received = 0;
};

// Replays `steps` steps: step t looked up keys[offsets[t] .. offsets[t + 1])
// (repeats allowed; offsets has steps + 1 entries, ascending, from 0), and
// ends with a flush of every row still holding updates. `made_keys` are
// the keys whose row the shard makes for this worker's first touch (no
// other worker touched them before): under "refresh" their first miss
// costs a clock and a bit. Refuses a bad setting or offsets.
Status ReplayBelady(const int64_t* keys, const int64_t* offsets, int64_t steps,
                    const int64_t* made_keys, int64_t num_made, const FloorConfig& config,
                    FloorCounts* out);

}  // namespace het

#endif  // HET_TF_EMBEDDING_CORE_BELADY_FLOOR_H_

// A worker cache's settings, as the HetCache op's attributes carry them,
// with the table's name, dim, vocabulary and optimizer copied in: a cache
// kernel is built from attributes alone.
#ifndef HET_TF_EMBEDDING_CORE_CACHE_CONFIG_H_
#define HET_TF_EMBEDDING_CORE_CACHE_CONFIG_H_

#include <cstdint>
#include <string>

#include "cc_ops/common/status.h"
#include "cc_ops/embedding/core/eviction_order.h"
#include "cc_ops/embedding/core/row_codec.h"
#include "cc_ops/embedding/core/row_initializer.h"
#include "cc_ops/embedding/core/sparse_optimizer.h"

namespace het {

// How a training lookup syncs with the shards (worker_cache.h).
enum class SyncMode { kRefresh, kCheck };

// Accepts "refresh" and "check".
Status ParseSyncMode(const std::string& name, SyncMode* mode);

struct CacheConfig {
  std::string table_name = "table";
  int dim = 0;
  int64_t capacity = 0;          // rows
  int64_t vocabulary_size = -1;  // as the table's; ids are checked before sending
  OptimizerConfig optimizer;     // as the table's: local steps follow it
  CachePolicy policy = CachePolicy::kLFU;
  uint64_t pin_threshold = 100;  // LFU-opt only
  // A cached copy is valid while c_g <= c_c + read_staleness; pending updates
  // are pushed once c_c - c_s > write_staleness. Negative means unbounded.
  int64_t read_staleness = 100;
  int64_t write_staleness = 100;
  // > 0: the bounds in force grow with this cache's training steps, at most
  // steps / staleness_ramp each until they reach the bounds above, so that
  // no bound spans more than a 1/staleness_ramp share of the training done
  // (docs/consistency.md). 0: the bounds above from the first step.
  int64_t staleness_ramp = 0;
  SyncMode sync = SyncMode::kRefresh;
  // The table's shards: each exchange sends every shard a request.
  int64_t num_shards = 1;
  // Names this worker to the shards' copy records; stable across restarts
  // of the same worker (the kernel derives it from the device and the
  // cache's shared name). 0: drawn at random.
  uint64_t worker_id = 0;
  // The table's shards may evict or expire rows (row_eviction.h): a shard
  // keeps a row while it records this cache's copy, so the eviction of a
  // copy is reported only once its updates have gone out.
  bool rows_leave = false;
  // The table's initializer, for rows this cache may make itself: a shard
  // whose initial states match (initial_state.h) sends a row it made for a
  // miss as its clock alone. Off: every missing row comes whole.
  bool rebuilds_rows = false;
  InitializerConfig initializer;
  // The type a sync by refresh sends rows and updates in (row_codec.h);
  // its rounding stays on the worker and joins the row's next push.
  RowType wire_type = RowType::kFloat32;
};

Status ValidateCacheConfig(const CacheConfig& config);

}  // namespace het

#endif  // HET_TF_EMBEDDING_CORE_CACHE_CONFIG_H_

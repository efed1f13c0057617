// Reading and checking a cache's settings: the kernel builds them from
// attributes any client may set, so they are checked before a cache is made.
#include "cc_ops/embedding/core/cache_config.h"

#include "cc_ops/common/named_choice.h"
#include "cc_ops/embedding/core/memory_budget.h"

namespace het {

Status ParseSyncMode(const std::string& name, SyncMode* mode) {
  static constexpr NamedChoice<SyncMode> kChoices[] = {{"refresh", SyncMode::kRefresh},
                                                       {"check", SyncMode::kCheck}};
  return ParseNamedChoice("sync", name, kChoices, mode);
}

Status ValidateCacheConfig(const CacheConfig& c) {
  const std::string name = TableLabel(c.table_name);
  HET_RETURN_IF_ERROR(CheckDim(name, c.dim));
  if (c.capacity <= 0 || c.capacity >= (int64_t{1} << 31)) {
    return Status::InvalidArgument(name +
                                   ": cache capacity must be between 1 and 2^31-1 rows, got " +
                                   std::to_string(c.capacity));
  }
  if (c.policy == CachePolicy::kLFUOpt && c.pin_threshold == 0) {
    return Status::InvalidArgument(name + ": the pin threshold must be at least 1");
  }
  if (c.num_shards < 1 || c.num_shards > (int64_t{1} << 31) - 1) {
    return Status::InvalidArgument(name + ": the table's shards must number 1 to 2^31-1, got " +
                                   std::to_string(c.num_shards));
  }
  if (c.staleness_ramp < 0) {
    return Status::InvalidArgument(name + ": the staleness ramp must be >= 0 steps, got " +
                                   std::to_string(c.staleness_ramp));
  }
  if (c.wire_type != RowType::kFloat32 && c.sync != SyncMode::kRefresh) {
    return Status::InvalidArgument(name + ": rows travel in " + RowTypeName(c.wire_type) +
                                   " on the exchange of a sync by refresh; sync 'check' "
                                   "sends float32");
  }
  Status s = ValidateOptimizer(c.optimizer);
  if (!s.ok()) return Status::InvalidArgument(name + ": " + s.message());
  // What the cache holds once full (it takes memory as it fills): each row's
  // state (values and slots) and its pending delta, three 8-byte fields, and
  // about 56 bytes of index and eviction order (measured: docs/memory.md).
  const double bytes = double(c.capacity) * (8.0 * StateWidth(c.optimizer.kind, c.dim) + 24 + 56);
  return CheckFitsInMemory(name, "a cache of " + std::to_string(c.capacity) + " rows", bytes);
}

}  // namespace het

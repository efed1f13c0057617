// What a shard checks before a request changes anything. Pushes reach a
// shard from any caller, so it trusts none of their contents.
#include <algorithm>
#include <cmath>

#include "cc_ops/embedding/core/key_checks.h"
#include "cc_ops/embedding/core/memory_budget.h"
#include "cc_ops/embedding/core/table_shard.h"

namespace het {

Status ValidateTableConfig(const TableConfig& c) {
  HET_RETURN_IF_ERROR(CheckDim(TableLabel(c.name), c.dim));
  if (c.vocabulary_size == 0 || c.vocabulary_size < -1) {
    return Status::InvalidArgument(TableLabel(c.name) +
                                   ": vocabulary size must be positive, or -1 for dynamic keys");
  }
  if (c.max_rows == 0 || c.max_rows < -1) {
    return Status::InvalidArgument(TableLabel(c.name) +
                                   ": max_rows must be positive, or -1 for no limit");
  }
  if (c.on_full == OnFull::kEvict && c.max_rows < 0) {
    return Status::InvalidArgument(TableLabel(c.name) +
                                   ": on_full=\"evict\" needs max_rows, the limit it keeps to");
  }
  if (c.ttl_seconds == 0 || c.ttl_seconds < -1) {
    return Status::InvalidArgument(TableLabel(c.name) +
                                   ": ttl must be a positive number of seconds, or -1 for none");
  }
  if (c.admit_after < 0 || c.admit_after > kMaxAdmitAfter) {
    return Status::InvalidArgument(TableLabel(c.name) + ": admit_after must be between 1 and " +
                                   std::to_string(kMaxAdmitAfter) + ", or 0 for no admission");
  }
  if ((c.on_full == OnFull::kEvict || c.ttl_seconds > 0 || c.admit_after > 0) &&
      c.vocabulary_size > 0) {
    return Status::InvalidArgument(
        TableLabel(c.name) +
        ": a fixed-vocabulary table holds every id it may see; eviction, ttl and "
        "admission are for dynamic tables");
  }
  Status s = ValidateOptimizer(c.optimizer);
  if (!s.ok()) return Status::InvalidArgument(TableLabel(c.name) + ": " + s.message());
  return Status::Ok();
}

Status TableShard::CheckPush(const int64_t* keys, const float* values, int width,
                             const int64_t* counts, int64_t n, float learning_rate,
                             const char* what, int64_t least_count) const {
  HET_RETURN_IF_ERROR(CheckKeys(config_.name, config_.vocabulary_size, keys, n));
  const std::string name = TableLabel(config_.name);
  HET_RETURN_IF_ERROR(CheckLearningRate(name, config_.optimizer, learning_rate));
  for (int64_t i = 0; i < n; ++i) {
    if (counts[i] < least_count || counts[i] > kMaxUpdatesPerPush) {
      return Status::InvalidArgument(
          name + ": update counts must be between " + std::to_string(least_count) + " and " +
          std::to_string(kMaxUpdatesPerPush) + ", got " + std::to_string(counts[i]) + " for id " +
          std::to_string(keys[i]));
    }
  }
  if (AllFinite(values, size_t(n) * width)) return Status::Ok();
  const int64_t i =
      std::find_if(values, values + n * width, [](float v) { return !std::isfinite(v); }) - values;
  return Status::InvalidArgument(name + ": non-finite " + what + " for id " +
                                 std::to_string(keys[i / width]) + "; nothing was applied");
}

Status TableShard::CheckDeltaPush(const int64_t* keys, const float* deltas,
                                  const int64_t* base_clocks, int64_t n) const {
  for (int64_t i = 0; i < n; ++i) {
    if (base_clocks[i] < 0) {
      return Status::InvalidArgument(TableLabel(config_.name) + ": negative base clock " +
                                     std::to_string(base_clocks[i]) + " for id " +
                                     std::to_string(keys[i]) + "; nothing was applied");
    }
  }
  // What a run of updates adds to a sum or average of squared gradients is
  // never negative: a negative one could only come from a corrupt push, and
  // would end in the square root of a negative number.
  const OptimizerKind kind = config_.optimizer.kind;
  const int width = state_width();
  if (NonNegativeSlot(kind) >= 0) {
    const int64_t at = config_.dim * (1 + NonNegativeSlot(kind));
    for (int64_t i = 0; i < n; ++i) {
      for (int j = 0; j < config_.dim; ++j) {
        if (deltas[i * width + at + j] < 0) {
          return Status::InvalidArgument(TableLabel(config_.name) +
                                         ": negative squared-gradient change for id " +
                                         std::to_string(keys[i]) + "; nothing was applied");
        }
      }
    }
  }
  return Status::Ok();
}

}  // namespace het

// A table shard's settings: its rows, initializer and optimizer, and when
// rows are made and dropped (row_admission.h, row_eviction.h).
#ifndef HET_TF_EMBEDDING_CORE_TABLE_CONFIG_H_
#define HET_TF_EMBEDDING_CORE_TABLE_CONFIG_H_

#include <cstdint>
#include <string>

#include "cc_ops/common/status.h"
#include "cc_ops/embedding/core/row_eviction.h"
#include "cc_ops/embedding/core/row_initializer.h"
#include "cc_ops/embedding/core/sparse_optimizer.h"

namespace het {

struct TableConfig {
  std::string name = "table";
  int dim = 0;
  // Fixed vocabulary: keys must lie in [0, vocabulary_size). -1: any int64.
  int64_t vocabulary_size = -1;
  // The most rows this shard may hold. -1: no limit. Past it a request that
  // would create more either fails with ResourceExhausted, changing nothing
  // (on_full = kRefuse), or first evicts as many rows as it needs
  // (kEvict, row_eviction.h).
  int64_t max_rows = -1;
  OnFull on_full = OnFull::kRefuse;
  EvictionPolicy eviction = EvictionPolicy::kLRU;
  // Rows unused for longer than this many seconds are dropped, as evicted
  // rows are (row_eviction.h). -1: never.
  int64_t ttl_seconds = -1;
  // Ids become rows at their admit_after-th training read (row_admission.h);
  // other reads create nothing, and pushes of ids not held are dropped.
  // 0: every read and push creates the rows it needs.
  int64_t admit_after = 0;
  // The shard's clock in whole seconds; null: a steady clock (tests pass
  // their own).
  int64_t (*seconds)() = nullptr;
  InitializerConfig initializer;
  OptimizerConfig optimizer;
};

Status ValidateTableConfig(const TableConfig& config);

}  // namespace het

#endif  // HET_TF_EMBEDDING_CORE_TABLE_CONFIG_H_

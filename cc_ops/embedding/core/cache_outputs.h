// What a worker cache's calls hand back to their caller: the plans of a
// lookup's first half, the pushes due, and the counters. The kernels turn
// them into tensors; the cache keeps Pushes for its own outbox and ledger.
#ifndef HET_TF_EMBEDDING_CORE_CACHE_OUTPUTS_H_
#define HET_TF_EMBEDDING_CORE_CACHE_OUTPUTS_H_

#include <cstddef>
#include <cstdint>
#include <vector>

namespace het {

struct LookupPlan {
  std::vector<int64_t> unique_keys;  // in order of first appearance
  std::vector<int32_t> inverse;      // ids[i] == unique_keys[inverse[i]]
  std::vector<int64_t> clocks;       // c_c of the cached copy, -1 if none
  int64_t read_staleness = 0;        // the read bound in force, for the shards
};

// A training lookup's first half under SyncMode::kRefresh.
struct ExchangePlan {
  std::vector<int64_t> unique_keys;            // in order of first appearance
  std::vector<int32_t> inverse;                // ids[i] == unique_keys[inverse[i]]
  std::vector<std::vector<uint8_t>> requests;  // one for each shard
  int64_t read_staleness = 0;                  // the read bound in force, as sent
};

// Outputs of this type are replaced, not appended to.
struct Pushes {
  std::vector<int64_t> keys;
  std::vector<float> deltas;         // keys.size() * StateWidth: each row's state delta
  std::vector<int64_t> counts;       // local updates each delta holds
  std::vector<int64_t> base_clocks;  // c_s: the server clock the delta started from
  // The leading entries that were evicted: the cache holds them no more and
  // wants no state back for them.
  int64_t evicted = 0;
  void Add(int64_t key, const float* delta, int width, int64_t count, int64_t base_clock);
  // Removes the entries i with removed[i] set; the rest keep their order.
  void Remove(const std::vector<uint8_t>& removed, int width);
  size_t size() const { return keys.size(); }
};

struct CacheCounters {
  uint64_t lookups = 0;          // ids looked up, duplicates included
  uint64_t unique_keys = 0;      // after per-batch deduplication
  uint64_t hits = 0;             // cached and within the read bound
  uint64_t misses = 0;           // not cached
  uint64_t stale_refreshes = 0;  // cached but past the read bound, refreshed
  uint64_t evictions_reported = 0;
  uint64_t evictions = 0;
  uint64_t dirty_evictions = 0;  // evicted with pending updates, which are pushed
  uint64_t passed_through = 0;   // missing rows a full batch left no room for
  uint64_t rows_pulled = 0;
  uint64_t rows_rebuilt = 0;      // of those, made here from their initial state (first touches)
  uint64_t rows_pushed = 0;       // acknowledged pushes
  uint64_t rows_pushed_lean = 0;  // of those, acknowledged by their clocks alone
  uint64_t updates_pushed = 0;
  uint64_t bytes_sent = 0;
  uint64_t bytes_received = 0;
  uint64_t steps = 0;              // training updates (Accumulate calls)
  uint64_t prefetched = 0;         // rows a prefetch inserted
  uint64_t prefetch_hits = 0;      // unique keys served by a row the last prefetch inserted
  uint64_t rounds_resent = 0;      // rounds sent again after an answer that never came
  uint64_t pushed_uncached = 0;    // gradients of keys not cached, for the caller to push
  uint64_t not_admitted = 0;       // ids read as the default row (row_admission.h)
  uint64_t gradients_dropped = 0;  // their gradients, which no shard takes
  // Pushed rows whose update a shard refused (it would have made the row
  // non-finite): the copy took the shard's row instead.
  uint64_t rows_refused = 0;
};

}  // namespace het

#endif  // HET_TF_EMBEDDING_CORE_CACHE_OUTPUTS_H_

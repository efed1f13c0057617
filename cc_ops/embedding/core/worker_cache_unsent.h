// The rows of a worker cache's updates that no shard has merged yet and
// its entries lack, as its reads and fills find them (worker_cache_unsent.cc).
// Only the cache's own sources include this header.
#ifndef HET_TF_EMBEDDING_CORE_WORKER_CACHE_UNSENT_H_
#define HET_TF_EMBEDDING_CORE_WORKER_CACHE_UNSENT_H_

#include <cstdint>
#include <vector>

#include "cc_ops/embedding/core/worker_cache.h"

namespace het {

// The rows of some push lists, each key's chained in list order: where
// a key's rows are, in the order pushes carry them.
struct WorkerCache::PushChains {
  explicit PushChains(std::vector<const Pushes*> lists);
  struct Row {
    const Pushes* list;
    size_t i;
  };
  int64_t First(int64_t key) const;  // -1: `key` has no rows
  std::vector<Row> rows;
  std::vector<int64_t> next;  // the next row of the same key, -1 at the end

 private:
  KeyIndex first_;  // key -> its first row
};

// This worker's updates that no shard has merged and that its entries
// lack: the outbox (rows evicted, or passed through) and a round in
// flight. An evaluation read merges them into the row it reads, as the
// shards will (every read sees every write), without sending them.
class WorkerCache::UnsentRows {
 public:
  // The round in flight's rows (`ledger`), the outbox's, or both.
  UnsentRows(const WorkerCache& cache, bool ledger, bool outbox);
  // Merges the rows of `key` into `out`, read at shard clock `clock`: a
  // whole state (a training read's), or dim values (an evaluation's).
  // Returns the updates merged.
  int64_t MergeInto(int64_t key, int64_t clock, float* out, bool whole_state) const;

 private:
  const WorkerCache& cache_;
  PushChains chains_;
};

// The outbox's rows as a fill starts (the first of each key), for
// Reclaim; Finish removes those it took.
struct WorkerCache::OutboxRows {
  explicit OutboxRows(const Pushes& outbox);
  void Finish(Pushes* outbox, int width);
  PushChains chains;
  std::vector<uint8_t> taken;
};

}  // namespace het

#endif  // HET_TF_EMBEDDING_CORE_WORKER_CACHE_UNSENT_H_

// What a full shard does, and which of its rows go first.
//
// A shard with a row limit either refuses a request that would pass it
// (kRefuse) or first evicts as many rows as the request needs (kEvict). An
// evicting shard keeps 16 bytes of use after each row: the shard's request
// count at the row's last use, how often it was used, and whether it is
// pinned. The victims are the least recently (LRU) or least often (LFU)
// used of a sample of the evictable rows, every row when the shard holds
// few: sampling keeps the cost of a step's evictions in proportion to the
// rows it needs, as Redis' approximate LRU does, instead of a list touched
// on every read.
#ifndef HET_TF_EMBEDDING_CORE_ROW_EVICTION_H_
#define HET_TF_EMBEDDING_CORE_ROW_EVICTION_H_

#include <cstdint>
#include <string>
#include <vector>

#include "cc_ops/common/status.h"

namespace het {

enum class OnFull { kRefuse, kEvict };
enum class EvictionPolicy { kLRU, kLFU };

// "refuse" or "evict"; "lru" or "lfu".
Status ParseOnFull(const std::string& name, OnFull* out);
Status ParseEvictionPolicy(const std::string& name, EvictionPolicy* out);

// Kept after the rows of a shard that evicts or expires them.
struct RowUse {
  static constexpr uint32_t kMaxCount = (1u << 31) - 1;
  int64_t last = 0;     // the shard's request count at the last use
  uint32_t count : 31;  // uses, saturating
  uint32_t pinned : 1;  // a hot block's row (docs/fae.md): never dropped
  uint32_t second = 0;  // the shard's second at the last use
  RowUse() : count(0), pinned(0) {}
};
static_assert(sizeof(RowUse) == 16, "RowUse is the 16 bytes a row reserves for it");

inline void Touch(RowUse* use, int64_t now, uint32_t second) {
  use->last = now;
  use->second = second;
  if (use->count != RowUse::kMaxCount) ++use->count;
}

// How often a shard with a ttl looks for expired rows: a quarter of the
// ttl, and not more than once a second, so a row goes at most a quarter
// late and the sweeps (each looks at every row) cost little.
inline int64_t ExpiryInterval(int64_t ttl_seconds) {
  return ttl_seconds / 4 > 1 ? ttl_seconds / 4 : 1;
}

// A row that may be evicted, where it lives, and its use.
struct EvictionCandidate {
  int stripe;
  uint32_t slot;
  int64_t last;
  uint32_t count;
};

// How many evictable rows a shard looks at for each row it must evict
// (at least kMinSample): more make the choice closer to exact LRU or LFU.
constexpr int64_t kSamplePerVictim = 8;
constexpr int64_t kMinSample = 256;

// Leaves the `need` candidates to evict first at the front, in order:
// by policy (the least recently or least often used), ties to the less
// recently used. Duplicates (a sample may draw a row twice) are dropped
// first; returns the candidates left, which may be fewer than `need`.
size_t ChooseVictims(EvictionPolicy policy, size_t need, std::vector<EvictionCandidate>* c);

}  // namespace het

#endif  // HET_TF_EMBEDDING_CORE_ROW_EVICTION_H_

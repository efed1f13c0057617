// What a full shard does, and which of its rows go first.
//
// A shard with a row limit either refuses a request that would pass it
// (kRefuse) or first evicts as many rows as the request needs (kEvict). An
// evicting shard keeps 8 bytes of use after each row: the shard's request
// count (its tick) at the row's last use, how often it was used, and
// whether it is pinned. The victims are the least recently (LRU) or least often (LFU)
// used of a sample of the evictable rows, every row when the shard holds
// few: sampling keeps the cost of a step's evictions in proportion to the
// rows it needs, as Redis' approximate LRU does, instead of a list touched
// on every read.
#ifndef HET_TF_EMBEDDING_CORE_ROW_EVICTION_H_
#define HET_TF_EMBEDDING_CORE_ROW_EVICTION_H_

#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "cc_ops/common/status.h"

namespace het {

enum class OnFull { kRefuse, kEvict };
enum class EvictionPolicy { kLRU, kLFU };

// "refuse" or "evict"; "lru" or "lfu".
Status ParseOnFull(const std::string& name, OnFull* out);
Status ParseEvictionPolicy(const std::string& name, EvictionPolicy* out);

// Kept after the rows of a shard that evicts or expires them, in 8 bytes:
// 40 bits of tick last a trillion requests (years at ten thousand a
// second) and are compared modulo 2^40; 23 bits of count tell rows apart
// until they are used 8 million times, far past any row eviction would
// consider.
struct RowUse {
  static constexpr int kTickBits = 40;
  static constexpr uint64_t kTickMask = (uint64_t{1} << kTickBits) - 1;
  static constexpr uint64_t kMaxCount = (uint64_t{1} << 23) - 1;
  uint64_t last : 40;   // the shard's tick at the last use, modulo 2^40
  uint64_t count : 23;  // uses, saturating
  uint64_t pinned : 1;  // a hot block's row (docs/fae.md): never dropped
  RowUse() : last(0), count(0), pinned(0) {}
};
static_assert(sizeof(RowUse) == 8, "RowUse is the 8 bytes a row reserves for it");

inline void Touch(RowUse* use, int64_t tick) {
  use->last = static_cast<uint64_t>(tick) & RowUse::kTickMask;
  if (use->count != RowUse::kMaxCount) ++use->count;
}

// The tick of a row's last use, as a full tick no later than `now`.
inline int64_t LastTick(const RowUse& use, int64_t now) {
  return now - static_cast<int64_t>((static_cast<uint64_t>(now) - use.last) & RowUse::kTickMask);
}

// How often a shard with a ttl looks for expired rows: a quarter of the
// ttl, and not more than once a second, so that the sweeps (each looks at
// every row) cost little.
inline int64_t ExpiryInterval(int64_t ttl_seconds) {
  return ttl_seconds / 4 > 1 ? ttl_seconds / 4 : 1;
}

// When rows were last used, in seconds, for a ttl, without a second in
// every row. A row keeps the tick of its last use; a row's use is counted
// from the moment its request took its tick. Each request, once it has
// its tick, reads the clock and marks it: every tick up to its own was
// taken at or before that second. The newest mark takes every request of
// its second, and moves on until it is a sixteenth of the ttl (at least a
// second) past the mark before it, so a shard keeps about 40 marks
// whatever the ttl. A row expires never early; late by up to that
// sixteenth and a second, and up to a quarter of the ttl for the sweep
// (ExpiryInterval).
class ExpiryMarks {
 public:
  explicit ExpiryMarks(int64_t ttl_seconds)
      : ttl_(ttl_seconds), spacing_(ttl_seconds / 16 > 1 ? ttl_seconds / 16 : 1) {}
  // A request that took `tick` and then read `second`.
  void Request(int64_t tick, int64_t second);
  // The tick below which every row is unused for longer than the ttl at
  // `second` (0: none known); forgets the marks older than it.
  int64_t ExpiredBelow(int64_t second);

 private:
  const int64_t ttl_, spacing_;
  std::mutex mu_;
  // (second, tick): every tick below `tick` was taken at or before
  // `second`; both ascending.
  std::deque<std::pair<int64_t, int64_t>> marks_;
};

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

// The order in which a worker cache gives up rows.
//
// Slots live in buckets, each a list in least-recently-touched order; the
// victim is the head of the lowest non-empty bucket. LRU keeps one bucket,
// LFU buckets by touch count (ties go to the least recently touched), and
// LFU-opt moves rows that reach the pin threshold into a top bucket that is
// only drawn on when nothing else is left: HET's hot rows stay put.
#ifndef HET_TF_EMBEDDING_CORE_EVICTION_ORDER_H_
#define HET_TF_EMBEDDING_CORE_EVICTION_ORDER_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "cc_ops/common/status.h"

namespace het {

enum class CachePolicy { kLRU, kLFU, kLFUPinned };

// Accepts "lru", "lfu" and "lfu_opt" (also "lfu-opt") in any case.
Status ParseCachePolicy(const std::string& name, CachePolicy* policy);

class EvictionOrder {
 public:
  static constexpr int32_t kNone = -1;

  EvictionOrder(CachePolicy policy, int64_t capacity, uint64_t pin_threshold);

  // Adds a detached slot with the given touch count at the most recent end.
  void Attach(int32_t slot, uint64_t touches);
  void Detach(int32_t slot);
  bool attached(int32_t slot) const { return bucket_[slot] != kDetached; }
  uint64_t touches(int32_t slot) const { return touches_[slot]; }
  bool pinned(int32_t slot) const { return bucket_[slot] == kPinnedBucket; }
  // The slot to evict next, or kNone when no slot is attached.
  int32_t Victim() const;

 private:
  static constexpr uint64_t kDetached = ~uint64_t{0};
  static constexpr uint64_t kPinnedBucket = ~uint64_t{0} - 1;
  struct List {
    int32_t head = kNone;
    int32_t tail = kNone;
  };
  uint64_t BucketFor(uint64_t touches) const;

  CachePolicy policy_;
  uint64_t pin_threshold_;
  std::vector<int32_t> prev_, next_;
  std::vector<uint64_t> touches_, bucket_;
  std::map<uint64_t, List> buckets_;  // only non-empty buckets
};

}  // namespace het

#endif  // HET_TF_EMBEDDING_CORE_EVICTION_ORDER_H_

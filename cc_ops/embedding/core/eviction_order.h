// The order in which a worker cache gives up rows.
//
// Slots live in buckets, each a list in least-recently-touched order; the
// victim is the head of the lowest non-empty bucket. LRU keeps one bucket,
// LFU buckets by touch count (ties go to the least recently touched), and
// LFU-opt moves rows that reach the pin threshold into a top bucket that is
// only drawn on when nothing else is left: HET's hot rows stay put. Under
// any policy a slot can be attached held, above them all: a held slot is
// never a victim (FAE's hot rows, pinned by key). A slot attached with a
// next read (a batch the lookahead staged reads it) goes above every
// touch count, below the pinned rows: such rows go only when no other row
// can, the one read furthest ahead first.
#ifndef HET_TF_EMBEDDING_CORE_EVICTION_ORDER_H_
#define HET_TF_EMBEDDING_CORE_EVICTION_ORDER_H_

#include <cstdint>
#include <map>
#include <string>

#include "cc_ops/common/status.h"
#include "cc_ops/embedding/core/zeroed_array.h"

namespace het {

enum class CachePolicy { kLRU, kLFU, kLFUOpt };

// Accepts "lru", "lfu" and "lfu_opt" (also "lfu-opt") in any case.
Status ParseCachePolicy(const std::string& name, CachePolicy* policy);

class EvictionOrder {
 public:
  static constexpr int32_t kNone = -1;
  // A slot that no staged batch reads.
  static constexpr uint64_t kNotRead = ~uint64_t{0};

  EvictionOrder(CachePolicy policy, int64_t capacity, uint64_t pin_threshold);
  // Slots hold iterators into this object's own map.
  EvictionOrder(const EvictionOrder&) = delete;
  EvictionOrder& operator=(const EvictionOrder&) = delete;

  // Adds a detached slot with the given touch count at the most recent end
  // of its bucket: the held one if `held`, else, unless its touches pin it,
  // that of its next read (a staged batch's number, below 2^32) if any.
  void Attach(int32_t slot, uint64_t touches, bool held = false, uint64_t next_read = kNotRead);
  // Adds a detached slot to the top bucket below the held one (LFU-opt's
  // pinned rows'): a victim only when nothing else is left, the least
  // recently attached first.
  void AttachLastResort(int32_t slot, uint64_t touches);
  void Detach(int32_t slot);
  bool attached(int32_t slot) const { return nodes_[slot].attached; }
  uint64_t touches(int32_t slot) const { return nodes_[slot].touches; }
  // In the last-resort bucket (LFU-opt's pinned rows, or AttachLastResort).
  bool pinned(int32_t slot) const {
    return attached(slot) && nodes_[slot].bucket->first == kPinnedBucket;
  }
  bool held(int32_t slot) const {
    return attached(slot) && nodes_[slot].bucket->first == kHeldBucket;
  }
  // The slot to evict next, or kNone when every attached slot is held.
  int32_t Victim() const;
  // Bytes each slot's place in the order takes once used.
  static constexpr size_t NodeBytes() { return sizeof(Node); }
  // Starts loading a slot's links, ahead of a batch loop that moves it.
  void HintLoad(int32_t slot) const { __builtin_prefetch(&nodes_[slot]); }

 private:
  static constexpr uint64_t kHeldBucket = ~uint64_t{0};
  static constexpr uint64_t kPinnedBucket = kHeldBucket - 1;
  struct List {
    int32_t head = kNone;
    int32_t tail = kNone;
  };
  using Buckets = std::map<uint64_t, List>;
  // A slot's place in the order, in one cache line: its bucket (so that a
  // detach needs no search; only meaningful while attached), its
  // neighbours in the bucket's list and its touch count. All zero bytes is a
  // detached slot never touched: the nodes of slots not yet used take no
  // memory (ZeroedArray).
  struct Node {
    Buckets::iterator bucket;
    uint64_t touches;
    int32_t prev;
    int32_t next;
    bool attached;
  };
  uint64_t BucketFor(uint64_t touches) const;
  void AttachTo(int32_t slot, uint64_t touches, uint64_t bucket);

  CachePolicy policy_;
  uint64_t pin_threshold_;
  Buckets buckets_;  // only non-empty buckets
  // The bucket the last attach went to, if it is still there: a batch's
  // rows mostly go to one (a staged batch's, or a touch count).
  Buckets::iterator last_ = buckets_.end();
  ZeroedArray<Node> nodes_;
};

}  // namespace het

#endif  // HET_TF_EMBEDDING_CORE_EVICTION_ORDER_H_

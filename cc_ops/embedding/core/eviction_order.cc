#include "cc_ops/embedding/core/eviction_order.h"

#include "cc_ops/common/named_choice.h"

namespace het {

Status ParseCachePolicy(const std::string& name, CachePolicy* policy) {
  static constexpr NamedChoice<CachePolicy> kChoices[] = {
      {"lru", CachePolicy::kLRU}, {"lfu", CachePolicy::kLFU}, {"lfu_opt", CachePolicy::kLFUOpt}};
  return ParseNamedChoice("cache policy", name, kChoices, policy);
}

EvictionOrder::EvictionOrder(CachePolicy policy, int64_t capacity, uint64_t pin_threshold)
    : policy_(policy), pin_threshold_(pin_threshold), nodes_(static_cast<size_t>(capacity)) {}

uint64_t EvictionOrder::BucketFor(uint64_t touches) const {
  switch (policy_) {
    case CachePolicy::kLRU:
      return 0;
    case CachePolicy::kLFU:
      return touches;
    case CachePolicy::kLFUOpt:
      return touches >= pin_threshold_ ? kPinnedBucket : touches;
  }
  return 0;
}

void EvictionOrder::Attach(int32_t slot, uint64_t touches, bool held, uint64_t next_read) {
  uint64_t bucket = held ? kHeldBucket : BucketFor(touches);
  // Below the pinned bucket, above any touch count: the furthest read
  // (the largest number) in the lowest bucket.
  if (bucket < kPinnedBucket && next_read != kNotRead) bucket = kPinnedBucket - 1 - next_read;
  AttachTo(slot, touches, bucket);
}

void EvictionOrder::AttachLastResort(int32_t slot, uint64_t touches) {
  AttachTo(slot, touches, kPinnedBucket);
}

void EvictionOrder::AttachTo(int32_t slot, uint64_t touches, uint64_t bucket) {
  Node& node = nodes_[slot];
  node.touches = touches;
  node.attached = true;
  if (last_ == buckets_.end() || last_->first != bucket) last_ = buckets_.try_emplace(bucket).first;
  node.bucket = last_;
  List& list = node.bucket->second;
  node.prev = list.tail;
  node.next = kNone;
  if (list.tail != kNone) {
    nodes_[list.tail].next = slot;
  } else {
    list.head = slot;
  }
  list.tail = slot;
}

void EvictionOrder::Detach(int32_t slot) {
  Node& node = nodes_[slot];
  List& list = node.bucket->second;
  if (node.prev != kNone) {
    nodes_[node.prev].next = node.next;
  } else {
    list.head = node.next;
  }
  if (node.next != kNone) {
    nodes_[node.next].prev = node.prev;
  } else {
    list.tail = node.prev;
  }
  if (list.head == kNone) {
    if (last_ == node.bucket) last_ = buckets_.end();
    buckets_.erase(node.bucket);
  }
  node.prev = node.next = kNone;
  node.attached = false;
}

int32_t EvictionOrder::Victim() const {
  if (buckets_.empty() || buckets_.begin()->first == kHeldBucket) return kNone;
  return buckets_.begin()->second.head;
}

}  // namespace het

#include "cc_ops/embedding/core/eviction_order.h"

#include <algorithm>
#include <cctype>

namespace het {

Status ParseCachePolicy(const std::string& name, CachePolicy* policy) {
  std::string lower(name);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (lower == "lru") {
    *policy = CachePolicy::kLRU;
  } else if (lower == "lfu") {
    *policy = CachePolicy::kLFU;
  } else if (lower == "lfu_opt" || lower == "lfu-opt") {
    *policy = CachePolicy::kLFUPinned;
  } else {
    return Status::InvalidArgument("unknown cache policy '" + name +
                                   "'; expected lru, lfu or lfu_opt");
  }
  return Status::Ok();
}

EvictionOrder::EvictionOrder(CachePolicy policy, int64_t capacity, uint64_t pin_threshold)
    : policy_(policy),
      pin_threshold_(pin_threshold),
      prev_(capacity, kNone),
      next_(capacity, kNone),
      touches_(capacity, 0),
      bucket_(capacity, buckets_.end()) {}

uint64_t EvictionOrder::BucketFor(uint64_t touches) const {
  switch (policy_) {
    case CachePolicy::kLRU:
      return 0;
    case CachePolicy::kLFU:
      return touches;
    case CachePolicy::kLFUPinned:
      return touches >= pin_threshold_ ? kPinnedBucket : touches;
  }
  return 0;
}

void EvictionOrder::Attach(int32_t slot, uint64_t touches) {
  touches_[slot] = touches;
  bucket_[slot] = buckets_.try_emplace(BucketFor(touches)).first;
  List& list = bucket_[slot]->second;
  prev_[slot] = list.tail;
  next_[slot] = kNone;
  if (list.tail != kNone) {
    next_[list.tail] = slot;
  } else {
    list.head = slot;
  }
  list.tail = slot;
}

void EvictionOrder::Detach(int32_t slot) {
  const Buckets::iterator it = bucket_[slot];
  List& list = it->second;
  if (prev_[slot] != kNone) {
    next_[prev_[slot]] = next_[slot];
  } else {
    list.head = next_[slot];
  }
  if (next_[slot] != kNone) {
    prev_[next_[slot]] = prev_[slot];
  } else {
    list.tail = prev_[slot];
  }
  if (list.head == kNone) buckets_.erase(it);
  prev_[slot] = next_[slot] = kNone;
  bucket_[slot] = buckets_.end();
}

int32_t EvictionOrder::Victim() const {
  return buckets_.empty() ? kNone : buckets_.begin()->second.head;
}

}  // namespace het

#include "cc_ops/embedding/core/row_eviction.h"

#include <algorithm>
#include <tuple>

namespace het {

Status ParseOnFull(const std::string& name, OnFull* out) {
  if (name == "refuse") {
    *out = OnFull::kRefuse;
  } else if (name == "evict") {
    *out = OnFull::kEvict;
  } else {
    return Status::InvalidArgument("on_full must be \"refuse\" or \"evict\", got \"" + name + "\"");
  }
  return Status::Ok();
}

Status ParseEvictionPolicy(const std::string& name, EvictionPolicy* out) {
  if (name == "lru") {
    *out = EvictionPolicy::kLRU;
  } else if (name == "lfu") {
    *out = EvictionPolicy::kLFU;
  } else {
    return Status::InvalidArgument("eviction must be \"lru\" or \"lfu\", got \"" + name + "\"");
  }
  return Status::Ok();
}

size_t ChooseVictims(EvictionPolicy policy, size_t need, std::vector<EvictionCandidate>* c) {
  auto where = [](const EvictionCandidate& a) { return std::make_tuple(a.stripe, a.slot); };
  std::sort(c->begin(), c->end(), [&](const EvictionCandidate& a, const EvictionCandidate& b) {
    return where(a) < where(b);
  });
  c->erase(std::unique(c->begin(), c->end(),
                       [&](const EvictionCandidate& a, const EvictionCandidate& b) {
                         return where(a) == where(b);
                       }),
           c->end());
  auto first = [policy](const EvictionCandidate& a, const EvictionCandidate& b) {
    if (policy == EvictionPolicy::kLFU && a.count != b.count) return a.count < b.count;
    return a.last < b.last;
  };
  const size_t k = std::min(need, c->size());
  std::partial_sort(c->begin(), c->begin() + k, c->end(), first);
  return c->size();
}

}  // namespace het

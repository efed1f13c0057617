#include "cc_ops/embedding/core/row_eviction.h"

#include <algorithm>
#include <tuple>

#include "cc_ops/common/named_choice.h"

namespace het {

Status ParseOnFull(const std::string& name, OnFull* out) {
  static constexpr NamedChoice<OnFull> kChoices[] = {{"refuse", OnFull::kRefuse},
                                                     {"evict", OnFull::kEvict}};
  return ParseNamedChoice("on_full", name, kChoices, out);
}

Status ParseEvictionPolicy(const std::string& name, EvictionPolicy* out) {
  static constexpr NamedChoice<EvictionPolicy> kChoices[] = {{"lru", EvictionPolicy::kLRU},
                                                             {"lfu", EvictionPolicy::kLFU}};
  return ParseNamedChoice("eviction", name, kChoices, out);
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

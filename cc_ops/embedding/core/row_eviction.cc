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

void ExpiryMarks::Request(int64_t tick, int64_t second) {
  // Every tick up to this one was taken before `second` was read.
  std::lock_guard<std::mutex> lock(mu_);
  const size_t n = marks_.size();
  if (n > 0 && second <= marks_.back().first) {
    marks_.back().second = std::max(marks_.back().second, tick + 1);
  } else if (n >= 2 && second - marks_[n - 2].first < spacing_) {
    // The newest mark moves on until it is a spacing past the one before.
    marks_.back() = {second, std::max(marks_.back().second, tick + 1)};
  } else {
    marks_.emplace_back(second, n > 0 ? std::max(marks_.back().second, tick + 1) : tick + 1);
  }
}

int64_t ExpiryMarks::ExpiredBelow(int64_t second) {
  std::lock_guard<std::mutex> lock(mu_);
  // The newest mark whose second is more than the ttl ago.
  size_t newest = 0;
  while (newest < marks_.size() && second - marks_[newest].first > ttl_) ++newest;
  if (newest == 0) return 0;
  marks_.erase(marks_.begin(), marks_.begin() + static_cast<std::ptrdiff_t>(newest - 1));
  return marks_.front().second;
}

}  // namespace het

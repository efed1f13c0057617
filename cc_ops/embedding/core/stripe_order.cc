#include "cc_ops/embedding/core/stripe_order.h"

namespace het {

StripeOrder::StripeOrder(const std::vector<uint8_t>& stripe_of, int stripes)
    : starts_(stripes + 1, 0), order_(stripe_of.size()) {
  for (uint8_t s : stripe_of) ++starts_[s + 1];
  for (int s = 0; s < stripes; ++s) starts_[s + 1] += starts_[s];
  std::vector<int32_t> next(starts_.begin(), starts_.end() - 1);
  for (size_t i = 0; i < stripe_of.size(); ++i) {
    order_[next[stripe_of[i]]++] = static_cast<int32_t>(i);
  }
}

std::vector<int> StripeOrder::Split(int parts) const {
  const int stripes = static_cast<int>(starts_.size()) - 1;
  const int64_t n = starts_.back();
  std::vector<int> first{0};
  // Run r ends at the first stripe bound at or past r/parts of the positions.
  for (int r = 1; r < parts; ++r) {
    const int64_t want = n * r / parts;
    int s = first.back();
    while (s < stripes && starts_[s] < want) ++s;
    if (s > first.back() && s < stripes) first.push_back(s);
  }
  first.push_back(stripes);
  return first;
}

}  // namespace het

// A request's positions grouped by the lock stripes of their keys, for
// TableShard::ForEachByStripe: each stripe is then locked once a request,
// and runs of stripes can go to different threads.
#ifndef HET_TF_EMBEDDING_CORE_STRIPE_ORDER_H_
#define HET_TF_EMBEDDING_CORE_STRIPE_ORDER_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "cc_ops/common/parallel.h"

namespace het {

class StripeOrder {
 public:
  // stripe_of[i] is the stripe of position i, below `stripes`.
  StripeOrder(const std::vector<uint8_t>& stripe_of, int stripes);

  // Stripe s's positions are at(begin(s)) ... at(end(s) - 1), in request order.
  int32_t begin(int s) const { return starts_[s]; }
  int32_t end(int s) const { return starts_[s + 1]; }
  int32_t at(int32_t k) const { return order_[k]; }

  // Splits the stripes into at most `parts` runs of consecutive stripes with
  // about as many positions each: run r is stripes [first[r], first[r + 1]).
  std::vector<int> Split(int parts) const;

  // Calls visit(s) for every stripe s with positions; with `parallel`, runs
  // of stripes (Split) at once on its threads, but for a small request:
  // below a few thousand positions, handing work to another thread costs
  // about what it saves.
  template <typename VisitStripe>
  void ForEach(const Parallel* parallel, VisitStripe visit) const {
    constexpr int32_t kLeastParallel = 2048;
    const int stripes = static_cast<int>(starts_.size()) - 1;
    auto visit_run = [&](int first, int last) {
      for (int s = first; s < last; ++s) {
        if (begin(s) != end(s)) visit(s);
      }
    };
    if (parallel == nullptr || parallel->threads < 2 || starts_.back() < kLeastParallel) {
      visit_run(0, stripes);
      return;
    }
    const std::vector<int> first = Split(parallel->threads);
    parallel->run(static_cast<int64_t>(first.size()) - 1, [&](int64_t from, int64_t to) {
      for (int64_t r = from; r < to; ++r) visit_run(first[r], first[r + 1]);
    });
  }

 private:
  std::vector<int32_t> starts_;  // stripes + 1 bounds into order_
  std::vector<int32_t> order_;
};

}  // namespace het

#endif  // HET_TF_EMBEDDING_CORE_STRIPE_ORDER_H_

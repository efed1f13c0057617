#include "cc_ops/embedding/core/access_counter.h"

#include <algorithm>
#include <numeric>

#include "cc_ops/embedding/core/key_checks.h"

namespace het {

Status AccessCounter::Create(const AccessCounterConfig& config,
                             std::unique_ptr<AccessCounter>* out) {
  if (config.vocabulary_size == 0 || config.vocabulary_size < -1) {
    return Status::InvalidArgument(TableLabel(config.table_name) +
                                   ": vocabulary_size must be positive or -1 (any int64 id), got " +
                                   std::to_string(config.vocabulary_size));
  }
  out->reset(new AccessCounter(config));
  return Status::Ok();
}

Status AccessCounter::Add(const int64_t* ids, int64_t n) {
  HET_RETURN_IF_ERROR(CheckKeys(config_.table_name, config_.vocabulary_size, ids, n));
  std::lock_guard<std::mutex> lock(mu_);
  for (int64_t i = 0; i < n; ++i) {
    if (i + kHintAhead < n) index_.HintLoad(ids[i + kHintAhead]);
    const uint32_t next = static_cast<uint32_t>(keys_.size());
    const uint32_t place = index_.Insert(ids[i], next);
    if (place == next) {
      keys_.push_back(ids[i]);
      counts_.push_back(0);
    }
    ++counts_[place];
  }
  total_ += n;
  return Status::Ok();
}

void AccessCounter::Hottest(int64_t k, std::vector<int64_t>* keys,
                            std::vector<int64_t>* counts) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<uint32_t> order(keys_.size());
  std::iota(order.begin(), order.end(), 0u);
  const size_t take = std::min(order.size(), static_cast<size_t>(std::max<int64_t>(k, 0)));
  auto hotter = [this](uint32_t a, uint32_t b) {
    return counts_[a] != counts_[b] ? counts_[a] > counts_[b] : keys_[a] < keys_[b];
  };
  std::partial_sort(order.begin(), order.begin() + take, order.end(), hotter);
  keys->resize(take);
  counts->resize(take);
  for (size_t i = 0; i < take; ++i) {
    (*keys)[i] = keys_[order[i]];
    (*counts)[i] = counts_[order[i]];
  }
}

int64_t AccessCounter::distinct() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int64_t>(keys_.size());
}

int64_t AccessCounter::total() const {
  std::lock_guard<std::mutex> lock(mu_);
  return total_;
}

void AccessCounter::Clear() {
  std::lock_guard<std::mutex> lock(mu_);
  index_ = KeyIndex();
  keys_ = {};
  counts_ = {};
  total_ = 0;
}

size_t AccessCounter::MemoryBytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return sizeof(*this) + index_.MemoryBytes() +
         (keys_.capacity() + counts_.capacity()) * sizeof(int64_t);
}

}  // namespace het

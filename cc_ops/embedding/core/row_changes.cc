#include "cc_ops/embedding/core/row_changes.h"

#include <algorithm>

namespace het {

void RowChanges::Set(std::vector<uint64_t>* bits, uint32_t slot) {
  const size_t word = slot / 64;
  if (word >= bits->size()) bits->resize(std::max(word + 1, bits->size() * 2));
  (*bits)[word] |= uint64_t{1} << (slot % 64);
}

void RowChanges::Unset(std::vector<uint64_t>* bits, uint32_t slot) {
  const size_t word = slot / 64;
  if (word < bits->size()) (*bits)[word] &= ~(uint64_t{1} << (slot % 64));
}

void RowChanges::Dropped(uint32_t slot, int64_t key, size_t limit) {
  Unset(&changed_, slot);
  Unset(&taken_, slot);
  if (overflowed_) return;
  if (drops_.size() >= limit) {
    overflowed_ = true;
    std::vector<int64_t>().swap(drops_);
    return;
  }
  drops_.push_back(key);
}

void RowChanges::Take(bool kept) {
  if (kept) {
    std::fill(taken_.begin(), taken_.end(), 0);
    taken_drops_.clear();
  }
  if (taken_.size() < changed_.size()) taken_.resize(changed_.size());
  for (size_t w = 0; w < changed_.size(); ++w) taken_[w] |= changed_[w];
  std::fill(changed_.begin(), changed_.end(), 0);
  taken_drops_.insert(taken_drops_.end(), drops_.begin(), drops_.end());
  drops_.clear();
}

void RowChanges::Forget() { *this = RowChanges(); }

size_t RowChanges::MemoryBytes() const {
  return (changed_.capacity() + taken_.capacity()) * sizeof(uint64_t) +
         (drops_.capacity() + taken_drops_.capacity()) * sizeof(int64_t);
}

}  // namespace het

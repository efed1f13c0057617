#include "cc_ops/embedding/core/staged_batches.h"

#include <algorithm>

#include "cc_ops/embedding/core/deduplicate.h"

namespace het {

bool StagedBatches::Batch::Holds(const int64_t* ids, int64_t n) const {
  if (inverse.size() != static_cast<size_t>(n)) return false;
  for (int64_t i = 0; i < n; ++i) {
    if (keys[inverse[i]] != ids[i]) return false;
  }
  return true;
}

size_t StagedBatches::Untaken() const {
  return !batches_.empty() && batches_.front().taken ? 1 : 0;
}

bool StagedBatches::Next(const int64_t* ids, int64_t n, std::vector<int64_t>* keys,
                         std::vector<int32_t>* inverse) const {
  const size_t next = Untaken();
  if (next == batches_.size() || !batches_[next].Holds(ids, n)) return false;
  *keys = batches_[next].keys;
  *inverse = batches_[next].inverse;
  return true;
}

void StagedBatches::Add(const int64_t* ids, int64_t n, std::vector<int64_t>* moved) {
  if (batches_.size() == kMaxStaged) Forget(moved);
  Batch batch;
  batch.number = numbers_;
  numbers_ = (numbers_ + 1) & kNumbers;
  const size_t last_distinct = batches_.empty() ? 0 : batches_.back().keys.size();
  Deduplicate(ids, n, last_distinct, &seen_, &batch.keys, &batch.inverse);
  batch.next.assign(batch.keys.size(), kNoRead);
  const uint32_t front = batches_.empty() ? batch.number : batches_.front().number;
  for (size_t i = 0; i < batch.keys.size(); ++i) {
    const int64_t key = batch.keys[i];
    const uint32_t last = last_number_.Find(key);
    if (last != KeyIndex::kAbsent) {
      batches_[(last - front) & kNumbers].next[last_place_.Find(key)] = batch.number;
    }
    last_number_.Set(key, batch.number);
    last_place_.Set(key, static_cast<uint32_t>(i));
    if (next_read_.Find(key) == kNoRead) {
      next_read_.Insert(key, batch.number);
      moved->push_back(key);
    }
  }
  batches_.push_back(std::move(batch));
}

void StagedBatches::Pass(const Batch& batch, std::vector<int64_t>* moved) {
  for (size_t i = 0; i < batch.keys.size(); ++i) {
    const int64_t key = batch.keys[i];
    if (next_read_.Find(key) != batch.number) continue;
    if (batch.next[i] == kNoRead) {
      next_read_.Erase(key);
    } else {
      next_read_.Set(key, batch.next[i]);
    }
    moved->push_back(key);
  }
}

void StagedBatches::Forget(std::vector<int64_t>* moved) {
  const Batch& oldest = batches_.front();
  Pass(oldest, moved);
  for (size_t i = 0; i < oldest.keys.size(); ++i) {
    if (oldest.next[i] != kNoRead) continue;  // read again later: linked there
    last_number_.Erase(oldest.keys[i]);
    last_place_.Erase(oldest.keys[i]);
  }
  batches_.pop_front();
}

std::vector<int64_t> StagedBatches::Take(const int64_t* current, int64_t n, int64_t batches,
                                         bool by_position, std::vector<int64_t>* moved) {
  // `current` stays at the front, marked taken: the next step's search
  // starts after it, so that two equal batches in a row are told apart.
  auto from = batches_.begin() + Untaken();
  auto found = std::find_if(from, batches_.end(),
                            [current, n](const Batch& b) { return b.Holds(current, n); });
  if (found == batches_.end() && by_position) found = from;
  std::vector<int64_t> after;
  if (found == batches_.end()) return after;
  for (auto drop = found - batches_.begin(); drop > 0; --drop) Forget(moved);
  Batch& taken = batches_.front();
  if (!taken.taken) {
    taken.taken = true;
    Pass(taken, moved);
  }
  for (size_t i = 1; i < batches_.size() && static_cast<int64_t>(i) <= batches; ++i) {
    after.insert(after.end(), batches_[i].keys.begin(), batches_[i].keys.end());
  }
  return after;
}

size_t StagedBatches::MemoryBytes() const {
  size_t bytes = next_read_.MemoryBytes() + last_number_.MemoryBytes() + last_place_.MemoryBytes() +
                 seen_.MemoryBytes();
  for (const Batch& b : batches_) {
    bytes += sizeof(b) + b.keys.capacity() * sizeof(int64_t) +
             b.next.capacity() * sizeof(uint32_t) + b.inverse.capacity() * sizeof(int32_t);
  }
  return bytes;
}

}  // namespace het

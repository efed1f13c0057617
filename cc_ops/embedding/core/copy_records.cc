#include "cc_ops/embedding/core/copy_records.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <random>

#include "cc_ops/common/hashing.h"

namespace het {

uint64_t DrawId() {
  std::random_device device;
  const uint64_t seed =
      (uint64_t{device()} << 32) ^ device() ^
      static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  const uint64_t id = Mix64(seed);
  return id == Sender::kNoWorker ? 1 : id;
}

uint64_t NextGeneration() {
  static std::atomic<uint64_t> last{0};
  const uint64_t now =
      static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(
                                std::chrono::system_clock::now().time_since_epoch())
                                .count());
  uint64_t seen = last.load();
  uint64_t next;
  do {
    next = std::max(now, seen + 1);
  } while (!last.compare_exchange_weak(seen, next));
  return next;
}

size_t CopyRecord::MemoryBytes() const {
  return sizeof(*this) + index_.MemoryBytes() + clock_.capacity() * sizeof(int64_t) +
         queued_.capacity() + free_.capacity() * sizeof(uint32_t) +
         queue_.capacity() * sizeof(int64_t);
}

void CopyRecord::Hold(int64_t key, int64_t clock) {
  uint32_t slot = index_.Find(key);
  if (slot == KeyIndex::kAbsent) {
    if (free_.empty()) {
      slot = static_cast<uint32_t>(clock_.size());
      clock_.push_back(0);
      queued_.push_back(0);
    } else {
      slot = free_.back();
      free_.pop_back();
    }
    index_.Insert(key, slot);
  }
  clock_[slot] = clock;
  queued_[slot] = 0;  // a stale entry left in queue_ is skipped when taken
}

void CopyRecord::Acknowledged(int64_t key, int64_t clock) {
  const uint32_t slot = index_.Find(key);
  if (slot == KeyIndex::kAbsent) return;
  clock_[slot] = clock;
  queued_[slot] = 0;
}

void CopyRecord::Drop(int64_t key) {
  const uint32_t slot = index_.Find(key);
  if (slot == KeyIndex::kAbsent) return;
  index_.Erase(key);
  queued_[slot] = 0;
  free_.push_back(slot);
}

void CopyRecord::Moved(int64_t key, int64_t clock) {
  if (read_bound_ < 0) return;
  const uint32_t slot = index_.Find(key);
  if (slot == KeyIndex::kAbsent || queued_[slot]) return;
  if (clock - clock_[slot] > read_bound_) {
    queued_[slot] = 1;
    queue_.push_back(key);
  }
}

void CopyRecord::Requeue(int64_t key) {
  const uint32_t slot = index_.Find(key);
  if (slot == KeyIndex::kAbsent || queued_[slot]) return;
  queued_[slot] = 1;
  queue_.push_back(key);
}

std::vector<int64_t> CopyRecord::TakeQueued() {
  std::vector<int64_t> out;
  for (int64_t key : queue_) {
    const uint32_t slot = index_.Find(key);
    if (slot == KeyIndex::kAbsent || !queued_[slot]) continue;
    queued_[slot] = 0;  // each key once, however often it was queued
    out.push_back(key);
  }
  queue_.clear();
  return out;
}

CopyRecord* CopyRecords::Begin(const Sender& sender, int64_t read_bound) {
  std::unique_ptr<CopyRecord>& record = records_[sender.worker];
  if (record == nullptr || record->generation() != sender.generation) {
    record.reset(new CopyRecord(sender.generation, read_bound));
  }
  record->set_read_bound(read_bound);
  return record.get();
}

void CopyRecords::Pushed(const Sender& sender, int64_t key, int64_t clock) {
  for (auto& entry : records_) {
    CopyRecord& record = *entry.second;
    if (entry.first == sender.worker && record.generation() == sender.generation) {
      // The sender takes the pushed row as the shard now holds it; a key
      // it no longer holds (pushed from its outbox) is not recorded again.
      record.Acknowledged(key, clock);
    } else {
      // Another worker, or another incarnation of the sender (whose next
      // sync replaces this record): its copy may have gone stale.
      record.Moved(key, clock);
    }
  }
}

void CopyRecords::Requeue(const Sender& sender, int64_t key) {
  const auto it = records_.find(sender.worker);
  if (it != records_.end() && it->second->generation() == sender.generation) {
    it->second->Requeue(key);
  }
}

void CopyRecords::Forget(const Sender& sender, int64_t key) {
  const auto it = records_.find(sender.worker);
  if (it != records_.end() && it->second->generation() == sender.generation) {
    it->second->Drop(key);
  }
}

bool CopyRecords::Holds(int64_t key) const {
  for (const auto& r : records_) {
    if (r.second->Holds(key)) return true;
  }
  return false;
}

size_t CopyRecords::copies() const {
  size_t total = 0;
  for (const auto& r : records_) total += r.second->size();
  return total;
}

size_t CopyRecords::MemoryBytes() const {
  size_t total = sizeof(*this);
  for (const auto& r : records_) total += r.second->MemoryBytes() + 64;  // map node
  return total;
}

}  // namespace het

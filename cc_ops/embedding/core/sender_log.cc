#include "cc_ops/embedding/core/sender_log.h"

namespace het {

const std::vector<int64_t>& SenderLog::Turn::lost_refreshes() const {
  static const std::vector<int64_t> kNone;
  return repeat_ ? entry_->refreshed : kNone;
}

const std::vector<int64_t>& SenderLog::Turn::lost_misses() const {
  static const std::vector<int64_t> kNone;
  return repeat_ ? entry_->served : kNone;
}

const std::vector<int64_t>& SenderLog::Turn::refused() const {
  static const std::vector<int64_t> kNone;
  return repeat_ ? entry_->refused : kNone;
}

void SenderLog::Turn::Done(std::vector<int64_t> refreshed, std::vector<int64_t> served,
                           std::vector<int64_t> refused) {
  if (entry_ == nullptr) return;
  entry_->sequence = sequence_;
  auto bytes = [](const std::vector<int64_t>& a, const std::vector<int64_t>& b,
                  const std::vector<int64_t>& c) {
    return sizeof(int64_t) * (a.capacity() + b.capacity() + c.capacity());
  };
  log_->keys_bytes_ += bytes(refreshed, served, refused);
  log_->keys_bytes_ -= bytes(entry_->refreshed, entry_->served, entry_->refused);
  entry_->refreshed = std::move(refreshed);
  entry_->served = std::move(served);
  entry_->refused = std::move(refused);
}

Status SenderLog::Admit(const std::string& table, const Sender& sender, Turn* turn) {
  Entry* entry;
  {
    std::lock_guard<std::mutex> lock(mu_);
    std::unique_ptr<Entry>& slot = entries_[sender.worker];
    if (slot == nullptr) slot.reset(new Entry);
    entry = slot.get();
  }
  std::unique_lock<std::mutex> lock(entry->mu);
  const std::string who = TableLabel(table) + ": worker " + std::to_string(sender.worker);
  if (sender.generation < entry->generation) {
    stale_generations_.fetch_add(1);
    return Status::FailedPrecondition(
        who + " sent round " + std::to_string(sender.sequence) + " of generation " +
        std::to_string(sender.generation) + ", older than its generation " +
        std::to_string(entry->generation) +
        " that this shard already serves (a late message from an earlier incarnation of the "
        "worker's cache); refused, nothing was changed");
  }
  if (sender.generation > entry->generation) {
    entry->generation = sender.generation;
    entry->sequence = kNone;
    entry->refreshed.clear();
    entry->served.clear();
    entry->refused.clear();
  }
  const bool repeat = sender.sequence == entry->sequence;
  if (!repeat && entry->sequence != kNone && sender.sequence != entry->sequence + 1) {
    out_of_order_.fetch_add(1);
    return Status::FailedPrecondition(
        who + " sent round " + std::to_string(sender.sequence) + " after round " +
        std::to_string(entry->sequence) + " of its generation " +
        std::to_string(sender.generation) +
        "; a cache sends its rounds in order and repeats only the last, so this one is "
        "refused and nothing was changed");
  }
  if (repeat) repeats_.fetch_add(1);
  turn->lock_ = std::move(lock);
  turn->log_ = this;
  turn->entry_ = entry;
  turn->sequence_ = sender.sequence;
  turn->repeat_ = repeat;
  return Status::Ok();
}

void SenderLog::Clear() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& e : entries_) {
    std::lock_guard<std::mutex> entry_lock(e.second->mu);
    e.second->sequence = kNone;
    e.second->refreshed.clear();
    e.second->served.clear();
    e.second->refused.clear();
  }
}

uint64_t SenderLog::senders() const {
  std::lock_guard<std::mutex> lock(mu_);
  return entries_.size();
}

size_t SenderLog::MemoryBytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  // Not under the entries' locks: a round holds its entry's for its whole
  // length, and a memory report must not wait for it.
  return sizeof(*this) + entries_.size() * (sizeof(Entry) + 64) + keys_bytes_.load();
}

}  // namespace het

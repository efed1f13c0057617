// An evicting shard's room (row_eviction.h): with the room lock held alone,
// a request that would pass max_rows evicts the rows it needs first.
//
// A row a worker holds a copy of is never evicted: its pending updates and
// its clock live on in the cache, and the shard's record of the copy is
// how its refreshes reach it. A cache reports a copy it let go once the
// copy's updates are out (WorkerCache::ReportableEvictions), so a row
// becomes evictable only after its last update has landed. Pinned rows (a
// hot block's) and the request's own rows stay too.
#include <algorithm>
#include <string>

#include "cc_ops/embedding/core/table_shard.h"

namespace het {
namespace {

// SplitMix64: the sampler draws one slot per call.
uint64_t NextRandom(uint64_t* state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// The request's own keys, which neither eviction nor expiry may take.
KeyIndex OwnKeys(const int64_t* keys, int64_t n) {
  KeyIndex own(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) own.Insert(keys[i], 0);
  return own;
}

}  // namespace

bool TableShard::Evictable(const Stripe& stripe, uint32_t slot, const KeyIndex& own) const {
  char* p = RowAt(stripe, slot);
  if (*Clock(p) == kFreeSlot || Use(p)->pinned) return false;
  const int64_t key = *Key(p);
  return own.Find(key) == KeyIndex::kAbsent && !stripe.records.Holds(key);
}

void TableShard::FindCandidates(const KeyIndex& own, int64_t want,
                                std::vector<EvictionCandidate>* out) {
  const int64_t now = tick_.load(std::memory_order_relaxed);
  auto add = [&](int s, uint32_t slot) {
    const RowUse& use = *Use(RowAt(stripes_[s], slot));
    out->push_back({s, slot, LastTick(use, now), static_cast<uint32_t>(use.count)});
  };
  out->clear();
  if (want < Size()) {
    // Stripes hold about equal shares of the rows (keys are hashed), so a
    // stripe drawn evenly, then a slot in it, is close to an even draw.
    for (int64_t draw = 0; draw < 4 * want && static_cast<int64_t>(out->size()) < want; ++draw) {
      const int s = static_cast<int>(NextRandom(&sample_state_) % kStripes);
      Stripe& stripe = stripes_[s];
      std::lock_guard<std::mutex> lock(stripe.mu);
      if (stripe.slots == 0) continue;
      const uint32_t slot = static_cast<uint32_t>(NextRandom(&sample_state_) % stripe.slots);
      if (Evictable(stripe, slot, own)) add(s, slot);
    }
    if (static_cast<int64_t>(out->size()) >= want) return;
    out->clear();  // too few evictable rows to sample: look at them all
  }
  for (int s = 0; s < kStripes; ++s) {
    Stripe& stripe = stripes_[s];
    std::lock_guard<std::mutex> lock(stripe.mu);
    for (uint32_t slot = 0; slot < stripe.slots; ++slot) {
      if (Evictable(stripe, slot, own)) add(s, slot);
    }
  }
}

void TableShard::EvictRow(Stripe& stripe, uint32_t slot, std::atomic<uint64_t>* counter) {
  char* p = RowAt(stripe, slot);
  stripe.index.Erase(*Key(p));
  stripe.free.push_back(slot);
  ++stripe.drops;
  // A stripe keeps at most as many dropped keys as it has slots (8 bytes a
  // row) before its changes overflow and the next checkpoint is full.
  if (tracking_.load(std::memory_order_relaxed)) {
    stripe.changes.Dropped(slot, *Key(p), std::max<size_t>(stripe.slots, 1024));
  }
  if (*Clock(p) > clock_floor_.load()) clock_floor_.store(*Clock(p));
  *Clock(p) = kFreeSlot;
  rows_.fetch_sub(1);
  if (counter != nullptr) counter->fetch_add(1, std::memory_order_relaxed);
}

bool TableShard::ExpiryDue() {
  if (config_.ttl_seconds <= 0) return false;
  const int64_t now = start_second_ + Second();
  int64_t due = next_expiry_.load();
  // One request a sweep: the one that moves the next sweep on.
  return now >= due &&
         next_expiry_.compare_exchange_strong(due, now + ExpiryInterval(config_.ttl_seconds));
}

void TableShard::Expire(const int64_t* keys, int64_t n) {
  const int64_t below = marks_->ExpiredBelow(Second());
  if (below == 0) return;
  const KeyIndex own = OwnKeys(keys, n);
  const int64_t now = tick_.load(std::memory_order_relaxed);
  for (Stripe& stripe : stripes_) {
    std::lock_guard<std::mutex> lock(stripe.mu);
    for (uint32_t slot = 0; slot < stripe.slots; ++slot) {
      if (Evictable(stripe, slot, own) && LastTick(*Use(RowAt(stripe, slot)), now) < below) {
        EvictRow(stripe, slot, &rows_expired_);
      }
    }
  }
}

Status TableShard::EvictFor(const int64_t* keys, int64_t n, int64_t need) {
  const KeyIndex own = OwnKeys(keys, n);
  std::vector<EvictionCandidate> candidates;
  FindCandidates(own, std::max(kMinSample, need * kSamplePerVictim), &candidates);
  const size_t found = ChooseVictims(config_.eviction, static_cast<size_t>(need), &candidates);
  if (static_cast<int64_t>(found) < need) {
    return Status::ResourceExhausted(
        TableLabel(config_.name) + ": this shard holds " + std::to_string(Size()) +
        " rows, its limit is " + std::to_string(config_.max_rows) + " and the request needs " +
        std::to_string(need) + " evicted, but only " + std::to_string(found) +
        " rows may go (the others are held by workers' caches, pinned hot rows or this "
        "request's own), so nothing was changed (raise max_rows, add PS shards, or give the "
        "caches fewer rows)");
  }
  for (int64_t v = 0; v < need; ++v) {
    Stripe& stripe = stripes_[candidates[v].stripe];
    std::lock_guard<std::mutex> lock(stripe.mu);
    EvictRow(stripe, candidates[v].slot, &rows_evicted_);
  }
  return Status::Ok();
}

}  // namespace het

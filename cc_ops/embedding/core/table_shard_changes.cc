// A shard's changes for incremental checkpoints (row_changes.h): what is
// taken, the rows read without creating any, and a chain's dropped rows
// erased on restore.
#include <algorithm>
#include <mutex>

#include "cc_ops/embedding/core/table_shard.h"

namespace het {

void TableShard::ForgetChanges() {
  tracking_.store(true);
  for (Stripe& stripe : stripes_) {
    std::lock_guard<std::mutex> lock(stripe.mu);
    stripe.changes.Forget();
  }
}

bool TableShard::TakeChanges(bool kept, std::vector<int64_t>* changed,
                             std::vector<int64_t>* dropped) {
  changed->clear();
  dropped->clear();
  if (!tracking_.load()) return false;
  bool whole = true;
  for (Stripe& stripe : stripes_) {
    std::lock_guard<std::mutex> lock(stripe.mu);
    if (stripe.changes.overflowed()) whole = false;
    stripe.changes.Take(kept);
    // A dropped row's slot leaves the changes, so every taken slot holds a row.
    stripe.changes.ForEachTaken(
        [&](uint32_t slot) { changed->push_back(*Key(RowAt(stripe, slot))); });
    // A key dropped and made again is a change, not a drop.
    for (int64_t key : stripe.changes.taken_drops()) {
      if (stripe.index.Find(key) == KeyIndex::kAbsent) dropped->push_back(key);
    }
  }
  if (!whole) {  // some dropped keys were not kept: only a full checkpoint holds the cut
    changed->clear();
    dropped->clear();
    return false;
  }
  std::sort(dropped->begin(), dropped->end());
  dropped->erase(std::unique(dropped->begin(), dropped->end()), dropped->end());
  return true;
}

Status TableShard::ReadHeld(const int64_t* keys, int64_t n, TableChunk* out,
                            std::vector<int64_t>* absent) {
  HET_RETURN_IF_ERROR(CheckKeys(config_.name, config_.vocabulary_size, keys, n));
  *out = TableChunk();
  absent->clear();
  ForEachByStripe(keys, n, [&](Stripe& stripe, int32_t i) {
    const uint32_t slot = stripe.index.Find(keys[i]);
    if (slot == KeyIndex::kAbsent) {
      absent->push_back(keys[i]);
    } else {
      AppendRow(RowAt(stripe, slot), out);
    }
  });
  return Status::Ok();
}

Status TableShard::Erase(const int64_t* keys, int64_t n) {
  HET_RETURN_IF_ERROR(CheckKeys(config_.name, config_.vocabulary_size, keys, n));
  // Alone: no eviction is choosing among the rows erased here.
  std::unique_lock<std::shared_mutex> alone(room_mu_, std::defer_lock);
  if (dropping()) alone.lock();
  ForEachByStripe(keys, n, [&](Stripe& stripe, int32_t i) {
    const uint32_t slot = stripe.index.Find(keys[i]);
    if (slot != KeyIndex::kAbsent) EvictRow(stripe, slot, nullptr);
  });
  return Status::Ok();
}

}  // namespace het

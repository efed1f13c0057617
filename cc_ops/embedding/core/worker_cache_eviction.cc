// Where a row goes and which row leaves: the slot a row takes (evicting the
// eviction order's victim, whose pending updates go to the outbox), the
// rows a prefetch spares, a cached row's place in the order (by touches, by
// next read, or pinned), and the rows a step keeps until its update.
#include <algorithm>

#include "cc_ops/embedding/core/worker_cache.h"

namespace het {

void WorkerCache::AttachSlot(int32_t slot, uint64_t touches, int64_t key) {
  const uint32_t next_read = staged_.NextRead(key);
  order_.Attach(slot, touches, pinned_.size() > 0 && pinned_.Find(key) != KeyIndex::kAbsent,
                next_read == StagedBatches::kNoRead ? EvictionOrder::kNotRead : next_read);
}

void WorkerCache::Refile(const std::vector<int64_t>& keys) {
  const int64_t n = static_cast<int64_t>(keys.size());
  std::vector<int32_t> slots;
  SlotsOf(keys.data(), n, &slots);
  for (int64_t i = 0; i < n; ++i) {
    if (i + kHintAhead < n) {
      if (slots[i + kHintAhead] >= 0) order_.HintLoad(slots[i + kHintAhead]);
      staged_.HintLoad(keys[i + kHintAhead]);
    }
    const int32_t slot = slots[i];
    // Rows out of the order (a step's own) or kept apart (held, pinned, or
    // a step's last resort) take their place when they go back.
    if (slot < 0 || !order_.attached(slot) || order_.held(slot) || order_.pinned(slot)) continue;
    const uint64_t touches = order_.touches(slot);
    order_.Detach(slot);
    AttachSlot(slot, touches, keys[i]);
  }
}

int32_t WorkerCache::TakeSlot() {
  if (!free_slots_.empty()) {
    const int32_t slot = free_slots_.back();
    free_slots_.pop_back();
    return slot;
  }
  if (slots_used_ < config_.capacity) return static_cast<int32_t>(slots_used_++);
  const int32_t slot = order_.Victim();
  if (slot == EvictionOrder::kNone) return slot;
  const bool last_resort = step_.open && order_.pinned(slot);
  order_.Detach(slot);
  const int64_t key = entries_[slot].key;
  if (HasPending(slot)) {
    // The key is not in this batch, so it cannot be updated again before
    // the outbox goes out with the next pushes.
    outbox_.Add(key, PendingDelta(slot), width_, PendingCount(slot), entries_[slot].server_clock);
    ++counters_.dirty_evictions;
  }
  if (last_resort && passing_.index.Find(key) == KeyIndex::kAbsent) {
    // Most likely a row the open step read: it passes through from here,
    // so that the step's update still takes its step on the copy the step
    // read (its pending delta went first, to the outbox).
    passing_.index.Insert(key, static_cast<uint32_t>(passing_.clocks.size()));
    passing_.states.insert(passing_.states.end(), State(slot), State(slot) + width_);
    passing_.clocks.push_back(entries_[slot].local_clock);
  }
  index_.Erase(key);
  // The shards' record of this worker's copies drops it at the next exchange.
  if (config_.sync == SyncMode::kRefresh) unreported_evictions_.push_back(key);
  ++counters_.evictions;
  return slot;
}

int32_t WorkerCache::TakeSlotSparing(std::initializer_list<const std::vector<int32_t>*> spare,
                                     Spared* spared) {
  if (free_slots_.empty() && slots_used_ >= config_.capacity) {
    if (!spared->marked) {
      spared->marked = true;
      if (++spare_stamp_ == 0) {  // wrapped: old marks could match again
        std::fill(spared_.begin(), spared_.end(), 0u);
        spare_stamp_ = 1;
      }
      spared_.resize(static_cast<size_t>(config_.capacity));
      for (const std::vector<int32_t>* slots : spare) {
        for (int32_t slot : *slots) {
          if (slot >= 0) spared_[slot] = spare_stamp_;
        }
      }
    }
    for (int32_t victim = order_.Victim();
         victim != EvictionOrder::kNone && spared_[victim] == spare_stamp_;
         victim = order_.Victim()) {
      spared->aside.push_back(victim);
      spared->last_resort.push_back(order_.pinned(victim));
      order_.Detach(victim);
    }
  }
  return TakeSlot();
}

void WorkerCache::PutBack(const Spared& spared) {
  for (size_t i = 0; i < spared.aside.size(); ++i) {
    const int32_t slot = spared.aside[i];
    if (spared.last_resort[i]) {
      order_.AttachLastResort(slot, order_.touches(slot));
    } else {
      AttachSlot(slot, order_.touches(slot));
    }
  }
}

void WorkerCache::HoldStep() {
  for (const StepRow& row : step_.read) {
    if (SlotOf(row.key) != row.slot || !order_.attached(row.slot) || order_.held(row.slot) ||
        order_.pinned(row.slot)) {
      continue;  // gone, or kept already (pinned, or by an earlier lookup)
    }
    const uint64_t touches = order_.touches(row.slot);
    order_.Detach(row.slot);
    order_.AttachLastResort(row.slot, touches);
    step_.held.push_back(row);
  }
  step_.read.clear();
  // Lookups with no update after them hold again rows they read again:
  // the entries no longer kept and the repeats go, so the list stays
  // within the cache's size.
  if (step_.held.size() > 2 * static_cast<size_t>(config_.capacity)) {
    std::vector<uint8_t> listed(static_cast<size_t>(config_.capacity), 0);
    size_t kept = 0;
    for (const StepRow& row : step_.held) {
      if (SlotOf(row.key) != row.slot || !order_.pinned(row.slot) || listed[row.slot]) continue;
      listed[row.slot] = 1;
      step_.held[kept++] = row;
    }
    step_.held.resize(kept);
  }
}

void WorkerCache::ReleaseStep() {
  for (const StepRow& row : step_.held) {
    if (SlotOf(row.key) != row.slot || !order_.pinned(row.slot)) continue;
    const uint64_t touches = order_.touches(row.slot);
    order_.Detach(row.slot);
    AttachSlot(row.slot, touches);
  }
  step_.Clear();
}

}  // namespace het

// The cache's write side: gradients applied to cached copies, pushes made
// due by the write bound, their acknowledgement, and the final flush.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "cc_ops/embedding/core/wire_sizes.h"
#include "cc_ops/embedding/core/worker_cache.h"

namespace het {

void Pushes::Add(int64_t key, const float* delta, int width, int64_t count, int64_t base_clock) {
  keys.push_back(key);
  deltas.insert(deltas.end(), delta, delta + width);
  counts.push_back(count);
  base_clocks.push_back(base_clock);
}

void Pushes::Remove(const std::vector<uint8_t>& removed, int width) {
  // In place, so the outbox keeps its capacity from step to step.
  size_t kept = 0;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (removed[i]) continue;
    if (kept != i) {
      keys[kept] = keys[i];
      std::memmove(deltas.data() + kept * width, deltas.data() + i * width, sizeof(float) * width);
      counts[kept] = counts[i];
      base_clocks[kept] = base_clocks[i];
    }
    ++kept;
  }
  keys.resize(kept);
  deltas.resize(kept * width);
  counts.resize(kept);
  base_clocks.resize(kept);
}

Status WorkerCache::Accumulate(const int64_t* keys, int64_t n, const float* grads,
                               float learning_rate, Pushes* due) {
  const int dim = config_.dim;
  HET_RETURN_IF_ERROR(CheckLearningRate(Name(), config_.optimizer, learning_rate));
  for (int64_t i = 0; i < n * dim; ++i) {
    if (!std::isfinite(grads[i])) {
      return Status::InvalidArgument(Name() + ": non-finite gradient for id " +
                                     std::to_string(keys[i / dim]) + "; nothing was applied");
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  const int64_t write_staleness = BoundInForce(config_.write_staleness);
  std::vector<int32_t> cached;
  HET_RETURN_IF_ERROR(BatchSlots(keys, n, &cached));
  // A cached row's slot, or -1 - its place among the rows passed through.
  std::vector<int64_t> slots(n);
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t passing = cached[i] < 0 ? passing_.index.Find(keys[i]) : KeyIndex::kAbsent;
    if (cached[i] < 0 && passing == KeyIndex::kAbsent) {
      return Status::FailedPrecondition(Name() + ": gradient for id " + std::to_string(keys[i]) +
                                        ", which is not cached; update only ids just looked up");
    }
    slots[i] = cached[i] >= 0 ? int64_t{cached[i]} : -1 - int64_t{passing};
  }
  last_learning_rate_ = learning_rate;
  // A row passed through takes its one step and is pushed with this step's
  // outbox, which keeps it until the push is acknowledged.
  std::vector<float> delta(width_);
  for (int64_t i = 0; i < n; ++i) {
    if (slots[i] >= 0) continue;
    const size_t p = static_cast<size_t>(-1 - slots[i]);
    float* state = passing_.states.data() + p * width_;
    int64_t step = passing_.clocks[p];
    std::fill(delta.begin(), delta.end(), 0.0f);
    ApplyUpdate(config_.optimizer, learning_rate, grads + size_t(i) * dim, dim, state, state + dim,
                &step, delta.data());
    outbox_.Add(keys[i], delta.data(), width_, 1, passing_.clocks[p]);
  }
  passing_.Clear();
  // Under kRefresh the pushes wait for the next exchange, which takes the
  // outbox and these entries as they are then.
  const bool hold = config_.sync == SyncMode::kRefresh;
  *due = hold ? Pushes() : outbox_;
  due->evicted = hold ? 0 : static_cast<int64_t>(outbox_.size());
  for (int64_t i = 0; i < n; ++i) {
    if (i + kPrefetchAhead < n) PrefetchSlot(static_cast<int32_t>(slots[i + kPrefetchAhead]));
    if (slots[i] < 0) continue;
    const int32_t slot = static_cast<int32_t>(slots[i]);
    float* state = State(slot);
    // Adam's step count is the row's clock: the shard advances both by one
    // per update applied.
    int64_t step = entries_[slot].local_clock;
    ApplyUpdate(config_.optimizer, learning_rate, grads + size_t(i) * dim, dim, state, state + dim,
                &step, PendingDelta(slot));
    ++entries_[slot].local_clock;
    if ((write_staleness >= 0 && PendingCount(slot) > write_staleness) ||
        PendingCount(slot) >= kMaxUpdatesPerPush) {
      if (hold) {
        due_keys_.push_back(entries_[slot].key);
      } else {
        due->Add(entries_[slot].key, PendingDelta(slot), width_, PendingCount(slot),
                 entries_[slot].server_clock);
      }
    }
  }
  ++counters_.steps;
  return Status::Ok();
}

Status WorkerCache::AckPush(const int64_t* keys, int64_t n, const int64_t* counts,
                            const float* states, const int64_t* clocks, int64_t answered) {
  const int64_t evicted = n - answered;
  std::vector<const float*> rows(n, nullptr);
  for (int64_t i = evicted; i < n && states != nullptr; ++i) {
    rows[i] = states + size_t(i - evicted) * width_;
  }
  std::vector<int64_t> row_clocks(n, 0);
  if (clocks != nullptr) std::copy(clocks, clocks + answered, row_clocks.begin() + evicted);
  std::lock_guard<std::mutex> lock(mu_);
  HET_RETURN_IF_ERROR(AckLocked(keys, n, counts, rows, row_clocks.data()));
  counters_.bytes_sent += wire::PushRequest(n, width_, /*delta=*/true, config_.num_shards);
  if (states != nullptr) counters_.bytes_received += wire::PushAnswer(answered, width_);
  return Status::Ok();
}

Status WorkerCache::AckLocked(const int64_t* keys, int64_t n, const int64_t* counts,
                              const std::vector<const float*>& states, const int64_t* clocks) {
  KeyIndex in_outbox(outbox_.size());
  for (size_t i = 0; i < outbox_.size(); ++i) in_outbox.Insert(outbox_.keys[i], uint32_t(i));
  std::vector<uint8_t> delivered(outbox_.size(), 0);
  const bool with_states =
      std::any_of(states.begin(), states.end(), [](const float* s) { return s != nullptr; });
  int64_t answered = 0;
  for (int64_t i = 0; i < n; ++i) answered += states[i] != nullptr;
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t o = in_outbox.Find(keys[i]);
    if (with_states && (o != KeyIndex::kAbsent) != (states[i] == nullptr)) {
      return Status::InvalidArgument(
          Name() +
          ": a push acknowledgement needs a state for each key still cached, and none for the "
          "evicted ones; got " +
          std::to_string(answered) + " states for " + std::to_string(n) + " keys");
    }
    const uint32_t slot = index_.Find(keys[i]);
    const int64_t expected = o != KeyIndex::kAbsent      ? outbox_.counts[o]
                             : slot != KeyIndex::kAbsent ? PendingCount(slot)
                                                         : -1;
    if (expected != counts[i]) {
      return Status::FailedPrecondition(Name() + ": push of " + std::to_string(counts[i]) +
                                        " updates for id " + std::to_string(keys[i]) +
                                        " does not match the " + std::to_string(expected) +
                                        " pending; nothing was acknowledged");
    }
  }
  uint64_t updates = 0;
  for (int64_t i = 0; i < n; ++i) {
    updates += counts[i];
    const uint32_t o = in_outbox.Find(keys[i]);
    if (o != KeyIndex::kAbsent) {
      delivered[o] = 1;
      continue;
    }
    const uint32_t slot = index_.Find(keys[i]);
    std::memset(PendingDelta(slot), 0, sizeof(float) * width_);
    if (states[i] != nullptr) {
      std::memcpy(State(slot), states[i], sizeof(float) * width_);
      entries_[slot].server_clock = entries_[slot].local_clock = clocks[i];
    } else {
      entries_[slot].server_clock = entries_[slot].local_clock;
    }
  }
  outbox_.Remove(delivered, width_);
  counters_.rows_pushed += n;
  counters_.updates_pushed += updates;
  return Status::Ok();
}

void WorkerCache::Flush(Pushes* out) {
  std::lock_guard<std::mutex> lock(mu_);
  *out = outbox_;
  out->evicted = static_cast<int64_t>(outbox_.size());
  for (int64_t slot = 0; slot < slots_used_; ++slot) {
    const int32_t s = static_cast<int32_t>(slot);
    if (index_.Find(entries_[s].key) != static_cast<uint32_t>(s)) continue;  // free slot
    if (PendingCount(s) > 0) {
      out->Add(entries_[s].key, PendingDelta(s), width_, PendingCount(s), entries_[s].server_clock);
    }
  }
}

}  // namespace het

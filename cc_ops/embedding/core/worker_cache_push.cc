// The cache's write side: gradients applied to cached copies, pushes made
// due by the write bound, their acknowledgement, and the final flush.
#include <algorithm>
#include <climits>
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
                               float learning_rate, Pushes* due, std::vector<Sender>* senders,
                               std::vector<int64_t>* uncached) {
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
  // A cached row's slot, -1 - its place among the rows passed through, or
  // kUncached.
  constexpr int64_t kUncached = INT64_MIN;
  // A row passed through that no shard admitted.
  auto NotAdmitted = [&](int64_t slot) {
    return slot < 0 && slot != kUncached && passing_.clocks[-1 - slot] == kNotAdmitted;
  };
  std::vector<int64_t> slots(n);
  std::vector<int64_t> missing;
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t passing = cached[i] < 0 ? passing_.index.Find(keys[i]) : KeyIndex::kAbsent;
    if (cached[i] < 0 && passing == KeyIndex::kAbsent) {
      if (uncached == nullptr) {
        return Status::FailedPrecondition(Name() + ": gradient for id " + std::to_string(keys[i]) +
                                          ", which is not cached");
      }
      missing.push_back(i);
      slots[i] = kUncached;
      continue;
    }
    slots[i] = cached[i] >= 0 ? int64_t{cached[i]} : -1 - int64_t{passing};
  }
  // Each row's step is taken on a copy of its state first: one that would
  // make the state or its pending delta non-finite (a huge gradient
  // squared, say) refuses the whole update before it changes anything, and
  // the cache trains on.
  const size_t span = size_t(width_);
  std::vector<float> next(size_t(n) * span);
  for (int64_t i = 0; i < n; ++i) {
    if (i + kHintAhead < n && slots[i + kHintAhead] != kUncached) {
      HintSlot(static_cast<int32_t>(slots[i + kHintAhead]));
    }
    if (slots[i] == kUncached || NotAdmitted(slots[i])) continue;
    float* row = next.data() + size_t(i) * span;
    int64_t step;
    const float* base;
    if (slots[i] >= 0) {
      const int32_t slot = static_cast<int32_t>(slots[i]);
      std::memcpy(row, State(slot), sizeof(float) * span);
      base = Base(slot);
      // Adam's step count is the row's clock: the shard advances both by
      // one per update applied.
      step = entries_[slot].local_clock;
    } else {
      const size_t p = static_cast<size_t>(-1 - slots[i]);
      base = passing_.states.data() + p * width_;
      std::memcpy(row, base, sizeof(float) * width_);
      step = passing_.clocks[p];
    }
    ApplyUpdate(config_.optimizer, learning_rate, grads + size_t(i) * dim, dim, row, row + dim,
                &step);
    if (!AllFinite(row, span) || !DeltaFinite(row, base, width_)) {
      return NonFiniteUpdate(Name(), keys[i]);
    }
  }
  last_learning_rate_ = learning_rate;
  for (int64_t i = 0; i < n; ++i) {
    if (slots[i] == kUncached) continue;
    if (NotAdmitted(slots[i])) {
      ++counters_.gradients_dropped;  // no shard holds the row to take it
      continue;
    }
    const float* row = next.data() + size_t(i) * span;
    if (slots[i] < 0) {
      // A row passed through takes its one step and joins the outbox,
      // which keeps it until a push of it is acknowledged.
      const size_t p = static_cast<size_t>(-1 - slots[i]);
      TakeDelta(config_.optimizer, row, passing_.states.data() + p * width_, 1, dim, delta_.data());
      outbox_.Add(keys[i], delta_.data(), width_, 1, passing_.clocks[p]);
      continue;
    }
    const int32_t slot = static_cast<int32_t>(slots[i]);
    std::memcpy(State(slot), row, sizeof(float) * span);
    ++entries_[slot].local_clock;
    if ((write_staleness >= 0 && PendingCount(slot) > write_staleness) ||
        PendingCount(slot) >= kMaxUpdatesPerPush) {
      due_keys_.push_back(entries_[slot].key);
    }
  }
  passing_.Clear();
  ReleaseStep();
  ++counters_.steps;
  if (uncached != nullptr) {
    *uncached = std::move(missing);
    // The caller pushes them as gradients, as the path without a cache does.
    counters_.pushed_uncached += uncached->size();
    if (!uncached->empty()) {
      counters_.bytes_sent += wire::PushRequest(static_cast<int64_t>(uncached->size()), config_.dim,
                                                /*delta=*/false, config_.num_shards);
    }
  }
  // Under kRefresh the pushes wait for the next exchange, which starts a
  // round with the outbox and these entries as they are then; under kCheck
  // they go now, unless a round is still in flight: then it goes again.
  *due = Pushes();
  if (config_.sync == SyncMode::kCheck) {
    if (StartRound(nullptr, &due_keys_, /*all=*/false, /*always=*/false)) due_keys_.clear();
    if (in_flight_) *due = ledger_;
  }
  RoundSendersLocked(senders);
  return Status::Ok();
}

bool WorkerCache::StartRound(const KeyIndex* misses, const std::vector<int64_t>* due, bool all,
                             bool always) {
  if (in_flight_) {
    ++counters_.rounds_resent;
    return false;
  }
  ledger_ = Pushes();
  // The outbox leads: its rows want no state back. Each key goes once in a
  // round: a second row of it (a copy evicted, fetched again and evicted
  // again), or its cached entry, waits for the next.
  KeyIndex queued(outbox_.size() + (due != nullptr ? due->size() : 0));
  std::vector<uint8_t> taken(outbox_.size(), 0);
  for (size_t i = 0; i < outbox_.size(); ++i) {
    const int64_t key = outbox_.keys[i];
    if (misses != nullptr && misses->Find(key) == KeyIndex::kAbsent) continue;
    if (queued.Find(key) != KeyIndex::kAbsent) continue;
    queued.Insert(key, 0);
    // Evicted or passed through: no later push carries a residual, so the
    // row travels in float32 (exchange_wire.h), and is not rounded.
    ledger_.Add(key, outbox_.deltas.data() + i * width_, width_, outbox_.counts[i],
                outbox_.base_clocks[i]);
    taken[i] = 1;
  }
  ledger_.evicted = static_cast<int64_t>(ledger_.size());
  outbox_.Remove(taken, width_);
  // A 16-bit wire rounds the round's rows here, once, so that the round
  // sent again is byte-identical; a flush (all) sends float32, as nothing
  // follows it to carry a residual.
  const bool round = config_.wire_type != RowType::kFloat32 && !all;
  const auto take = [&](int32_t slot) {
    const int64_t key = entries_[slot].key;
    if (!HasPending(slot) || queued.Find(key) != KeyIndex::kAbsent) return;
    queued.Insert(key, 0);
    const int64_t count = PendingCount(slot);
    float* delta = PendingDelta(slot);
    const bool rounded = round && RoundDelta(config_.wire_type, RowShape{config_.dim, width_},
                                             NonNegativeSlot(config_.optimizer.kind), delta);
    ledger_.Add(key, delta, width_, count, entries_[slot].server_clock);
    if (rounded) {
      // Error feedback: the base becomes the shard's row after it merges
      // the rounded delta where no other writer came (what a lean
      // acknowledgement keeps), and the state stays. What the state holds
      // beyond the base, the rounding's residual, is pending: it goes with
      // the row's next push, or alone when the row leaves or is flushed.
      MergeOnBase(slot, delta, count, Base(slot));
    } else {
      // The entry becomes the merge a shard makes of the push where no
      // other writer reached the row since its base, the same ApplyDelta on
      // the same floats: such a push is acknowledged by its clock alone,
      // and the entry already holds the shard's row to the bit.
      MergeOnBase(slot, delta, count, State(slot));
      std::memcpy(Base(slot), State(slot), sizeof(float) * width_);
    }
    // Its server clock counts the updates, so its next push is judged
    // against the writers since.
    entries_[slot].server_clock = entries_[slot].local_clock;
  };
  if (all) {
    for (int64_t slot = 0; slot < slots_used_; ++slot) {
      const int32_t s = static_cast<int32_t>(slot);
      if (index_.Find(entries_[s].key) == static_cast<uint32_t>(s)) take(s);
    }
  } else if (due != nullptr) {
    for (int64_t key : *due) {
      const int32_t slot = SlotOf(key);
      if (slot >= 0) take(slot);
    }
  }
  if (!always && ledger_.size() == 0) return true;
  ledger_type_ = round ? config_.wire_type : RowType::kFloat32;
  ++sequence_;
  in_flight_ = true;
  return true;
}

void WorkerCache::MergeOnBase(int32_t slot, const float* delta, int64_t count, float* out) {
  std::memmove(out, Base(slot), sizeof(float) * width_);
  int64_t unused_step = 0;  // a cached row's step count is its clock
  ApplyDelta(config_.optimizer, last_learning_rate_, delta, count, config_.dim, out,
             out + config_.dim, &unused_step);
}

void WorkerCache::EndRound(const std::vector<const float*>& states, const int64_t* clocks,
                           const std::vector<uint8_t>& lean, const std::vector<int64_t>& refused) {
  uint64_t updates = 0, lean_rows = 0;
  std::vector<float> merged;
  for (size_t i = 0; i < ledger_.size(); ++i) {
    updates += ledger_.counts[i];
    if (states[i] == nullptr && !lean[i]) continue;  // evicted: no state back
    const int32_t slot = SlotOf(ledger_.keys[i]);
    if (lean[i]) {
      ++lean_rows;
      // The entry StartRound made is the merge. A copy fetched again since
      // (the entry evicted while the round waited to be sent again) at the
      // round's base clock, before the shard merged it, lacks the round's
      // updates: it takes the merge, computed the same way from its base,
      // which is the shard's row before the merge (no other writer came).
      if (slot < 0 || entries_[slot].server_clock != ledger_.base_clocks[i] ||
          entries_[slot].server_clock >= clocks[i]) {
        continue;
      }
      merged.resize(width_);
      MergeOnBase(slot, ledger_.deltas.data() + i * width_, ledger_.counts[i], merged.data());
      Refresh(slot, merged.data(), clocks[i]);
      continue;
    }
    if (slot < 0) continue;  // evicted since: its later updates went to the outbox
    // Updates made while the round was in flight stay pending. A 16-bit
    // round's refused row also holds the rounding of its refused push,
    // which must go with the rest of it: the copy becomes the shard's row.
    Refresh(slot, states[i], clocks[i]);
    if (config_.wire_type != RowType::kFloat32 && HasPending(slot) &&
        std::find(refused.begin(), refused.end(), ledger_.keys[i]) != refused.end()) {
      DropPending(slot, states[i]);
    }
  }
  counters_.rows_pushed += ledger_.size();
  counters_.rows_pushed_lean += lean_rows;
  counters_.updates_pushed += updates;
  ledger_ = Pushes();
  in_flight_ = false;
}

Status WorkerCache::AckPush(const int64_t* keys, int64_t n, const int64_t* counts,
                            const float* states, const int64_t* clocks, int64_t answered,
                            const int64_t* epochs, const uint8_t* lean,
                            const std::vector<int64_t>& refused) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!in_flight_) {
    if (n == 0) return Status::Ok();  // a push with nothing in it
    return Status::FailedPrecondition(Name() + ": an acknowledgement of " + std::to_string(n) +
                                      " pushed rows, but no push is in flight");
  }
  if (epochs != nullptr) HET_RETURN_IF_ERROR(CheckEpochs(epochs));
  const int64_t evicted = ledger_.evicted;
  bool same =
      n == static_cast<int64_t>(ledger_.size()) && (clocks == nullptr || answered == n - evicted);
  for (int64_t i = 0; same && i < n; ++i) {
    same = keys[i] == ledger_.keys[i] && counts[i] == ledger_.counts[i];
  }
  if (!same) {
    return Status::FailedPrecondition(Name() + ": an acknowledgement of " + std::to_string(n) +
                                      " rows does not match the push in flight (" +
                                      std::to_string(ledger_.size()) +
                                      " rows); nothing was acknowledged");
  }
  std::vector<const float*> rows(n, nullptr);
  std::vector<uint8_t> lean_rows(n, 0);
  int64_t whole = 0;
  for (int64_t i = evicted; i < n && clocks != nullptr; ++i) {
    if (lean != nullptr && lean[i - evicted]) {
      lean_rows[i] = 1;
    } else {
      rows[i] = states + size_t(whole++) * width_;
    }
  }
  std::vector<int64_t> row_clocks(n, 0);
  if (clocks != nullptr) std::copy(clocks, clocks + answered, row_clocks.begin() + evicted);
  EndRound(rows, row_clocks.data(), lean_rows, refused);
  if (epochs != nullptr) LearnEpochs(epochs);
  counters_.bytes_sent += wire::PushRequest(n, width_, /*delta=*/true, config_.num_shards);
  if (clocks != nullptr) {
    counters_.bytes_received += wire::DeltaPushRows(answered, width_, answered - whole);
  }
  if (epochs != nullptr) counters_.bytes_received += wire::EpochAnswer(config_.num_shards);
  counters_.bytes_received += wire::RefusedAnswer(refused.size());
  return EndRefusals(std::move(refused));
}

bool WorkerCache::Flush(Pushes* out, std::vector<Sender>* senders) {
  std::lock_guard<std::mutex> lock(mu_);
  const bool fresh = StartRound(nullptr, nullptr, /*all=*/true, /*always=*/false);
  *out = in_flight_ ? ledger_ : Pushes();
  RoundSendersLocked(senders);
  return !fresh;
}

}  // namespace het

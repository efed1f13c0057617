// What a training lookup's answer does to the cache: stale copies take
// fresh states with their pending deltas merged back, missing rows are
// inserted (evicting others, whose pending updates go to the outbox), and
// rows with no room pass through; and the checked lookup's second half.
#include <algorithm>
#include <cstring>
#include <optional>

#include "cc_ops/embedding/core/wire_sizes.h"
#include "cc_ops/embedding/core/worker_cache.h"
#include "cc_ops/embedding/core/worker_cache_unsent.h"

namespace het {

float* WorkerCache::PendingDelta(int32_t slot) {
  TakeDelta(config_.optimizer, State(slot), Base(slot), PendingCount(slot), config_.dim,
            delta_.data());
  return delta_.data();
}

void WorkerCache::Refresh(int32_t slot, const float* fresh, int64_t clock) {
  Rebase(slot, fresh, clock, HasPending(slot) ? PendingDelta(slot) : nullptr);
}

void WorkerCache::Rebase(int32_t slot, const float* fresh, int64_t clock, float* delta) {
  const int64_t pending = PendingCount(slot);
  float* state = State(slot);
  std::memcpy(state, fresh, sizeof(float) * width_);
  std::memcpy(Base(slot), fresh, sizeof(float) * width_);
  // A delta of no update is a 16-bit wire's residual (HasPending).
  if (delta != nullptr) {
    // The shard would keep this share of the pending delta if it came now;
    // the delta keeps only that share from here on (the state moves from
    // the new base by it), so that the push that carries it later is
    // judged against the writers since.
    const float share = PendingShare(slot, clock);
    if (share != 1.0f) {
      for (int j = 0; j < config_.dim; ++j) delta[j] *= share;
    }
    int64_t unused_step = 0;  // a cached row's step count is its clock
    ApplyDelta(config_.optimizer, last_learning_rate_, delta, pending, config_.dim, state,
               state + config_.dim, &unused_step);
  }
  entries_[slot].server_clock = clock;
  entries_[slot].local_clock = clock + pending;
  if (delta != nullptr && !AllFinite(state, width_)) DropPending(slot, fresh);
}

void WorkerCache::DropPending(int32_t slot, const float* fresh) {
  // The copy would be non-finite: every later step of the key would be
  // refused, and its push too, for good. Its pending updates are dropped,
  // as a shard drops a refused update, and named once.
  std::memcpy(State(slot), fresh, sizeof(float) * width_);
  entries_[slot].local_clock = entries_[slot].server_clock;
  unmerged_.push_back(entries_[slot].key);
}

Status WorkerCache::EndRefusals(std::vector<int64_t> refused) {
  // Each id once: a shard may refuse a row whose refresh then drops the
  // updates made since, and a reclaimed row may be dropped twice.
  refused.insert(refused.end(), unmerged_.begin(), unmerged_.end());
  unmerged_.clear();
  std::sort(refused.begin(), refused.end());
  refused.erase(std::unique(refused.begin(), refused.end()), refused.end());
  return RefusedUpdates(Name(), std::move(refused), &counters_.rows_refused);
}

void WorkerCache::FillForTraining(const int64_t* unique_keys, int64_t u,
                                  std::vector<int32_t>& slots,
                                  const std::vector<const float*>& fresh_states,
                                  const std::vector<int64_t>& fresh_clocks, float* rows_out) {
  const int dim = config_.dim;
  // A lookup before the last one's update (the same layer called again in
  // its step): the rows the step read so far stay until that update, and
  // so do those passing through, which only the update pushes. The latter
  // go after all once they outnumber twice the cache or the batch: lookups
  // no update follows (a skipped step) must not gather rows without end.
  const bool again = step_.open;
  if (again) HoldStep();
  const size_t passing_bound = 2 * static_cast<size_t>(std::max<int64_t>(config_.capacity, u));
  if (!again || passing_.clocks.size() > passing_bound) passing_.Clear();
  // Detach the batch's rows first so that filling the batch can never
  // evict a row the same batch needs.
  for (int64_t i = 0; i < u; ++i) {
    if (i + kHintAhead < u && slots[i + kHintAhead] >= 0) {
      order_.HintLoad(slots[i + kHintAhead]);
    }
    if (slots[i] >= 0 && order_.attached(slots[i])) order_.Detach(slots[i]);
  }
  std::vector<bool> inserted(u, false);
  uint64_t hits = 0, misses = 0, refreshes = 0, hits_fetched_ahead = 0, passed = 0;
  uint64_t not_admitted = 0;
  OutboxRows unsent(outbox_);
  // Made when first needed: a round in flight's rows, the outbox's.
  std::optional<UnsentRows> in_flight, outbox;
  std::vector<float> merged_state;
  const bool prefetched = fetched_ahead_.size() > 0;
  for (int64_t i = 0; i < u; ++i) {
    const float* fresh = fresh_states[i];
    if (fresh == nullptr) {
      if (prefetched && fetched_ahead_.Find(unique_keys[i]) != KeyIndex::kAbsent) {
        ++hits_fetched_ahead;
      } else {
        ++hits;
      }
      continue;
    }
    if (i + kHintAhead < u) HintSlot(slots[i + kHintAhead]);
    int32_t slot = slots[i];
    if (fresh_clocks[i] == kNotAdmitted) {
      // Not admitted (row_admission.h): the default row for this step, in
      // no slot, so that the id's next step asks the shard again; its
      // gradient is dropped (Accumulate).
      ++not_admitted;
      ++misses;
      if (slot >= 0) continue;  // a copy the shard no longer holds: it stays
      std::memcpy(rows_out + size_t(i) * dim, fresh, sizeof(float) * dim);
      if (passing_.index.Find(unique_keys[i]) != KeyIndex::kAbsent) continue;
      passing_.index.Insert(unique_keys[i], static_cast<uint32_t>(passing_.clocks.size()));
      passing_.states.insert(passing_.states.end(), fresh, fresh + width_);
      passing_.clocks.push_back(kNotAdmitted);
      continue;
    }
    // A row fetched before its shard merged this worker's round in flight
    // takes the round's rows of the key, base and all, as the shard will
    // have them: the round's acknowledgement brings no state for a row
    // evicted before it, and the copy must not lose them when refreshed.
    int64_t clock = fresh_clocks[i];
    if (in_flight_) {
      if (!in_flight) in_flight.emplace(*this, /*ledger=*/true, /*outbox=*/false);
      merged_state.assign(fresh, fresh + width_);
      const int64_t merged = in_flight->MergeInto(unique_keys[i], clock, merged_state.data(),
                                                  /*whole_state=*/true);
      if (merged > 0) {
        fresh = merged_state.data();
        clock += merged;
      }
    }
    if (slot >= 0) {
      Refresh(slot, fresh, clock);
      ++refreshes;
      continue;
    }
    slot = TakeSlot();
    if (slot == EvictionOrder::kNone) {
      // The batch's cached rows fill the cache: this row passes through,
      // read now and pushed with the step's update (Accumulate). Once a
      // row passes in a step, it keeps the state the step read first:
      // the shard's, with this worker's updates no shard has yet merged
      // in (earlier copies evicted or passed through), its clock counting
      // them.
      ++passed;
      ++misses;
      if (!outbox) outbox.emplace(*this, /*ledger=*/false, /*outbox=*/true);
      if (fresh != merged_state.data()) merged_state.assign(fresh, fresh + width_);
      clock += outbox->MergeInto(unique_keys[i], clock, merged_state.data(), /*whole_state=*/true);
      fresh = merged_state.data();
      std::memcpy(rows_out + size_t(i) * dim, fresh, sizeof(float) * dim);
      // The shards recorded the copy a sync handed out: it goes at once.
      if (config_.sync == SyncMode::kRefresh) unreported_evictions_.push_back(unique_keys[i]);
      if (passing_.index.Find(unique_keys[i]) != KeyIndex::kAbsent) continue;
      passing_.index.Insert(unique_keys[i], static_cast<uint32_t>(passing_.clocks.size()));
      passing_.states.insert(passing_.states.end(), fresh, fresh + width_);
      passing_.clocks.push_back(clock);
      continue;
    }
    slots[i] = slot;
    inserted[i] = true;
    InsertRow(slot, unique_keys[i], fresh, clock);
    Reclaim(slot, fresh, clock, unsent);
    ++misses;
  }
  unsent.Finish(&outbox_, width_);
  for (int64_t i = 0; i < u; ++i) {
    if (i + kHintAhead < u) HintSlot(slots[i + kHintAhead]);
    const int32_t slot = slots[i];
    if (slot < 0) continue;  // passed through
    // A slot just taken still carries its previous occupant's count.
    AttachSlot(slot, inserted[i] ? 1 : order_.touches(slot) + 1);
    std::memcpy(rows_out + size_t(i) * dim, State(slot), sizeof(float) * dim);
    step_.read.push_back({slot, unique_keys[i]});
  }
  step_.open = true;
  counters_.hits += hits;
  counters_.prefetch_hits += hits_fetched_ahead;
  counters_.misses += misses;
  counters_.stale_refreshes += refreshes;
  counters_.passed_through += passed;
  counters_.not_admitted += not_admitted;
  if (prefetched) fetched_ahead_.Clear();
  RememberBatch(unique_keys, u, slots);
}

void WorkerCache::InsertRow(int32_t slot, int64_t key, const float* state, int64_t clock) {
  entries_[slot].key = key;
  index_.Insert(key, static_cast<uint32_t>(slot));
  std::memcpy(State(slot), state, sizeof(float) * width_);
  std::memcpy(Base(slot), state, sizeof(float) * width_);
  entries_[slot].server_clock = entries_[slot].local_clock = clock;
}

Status WorkerCache::Complete(const int64_t* unique_keys, int64_t u, const int32_t* positions,
                             int64_t m, const float* states, const int64_t* clocks, bool training,
                             float* rows_out, const int64_t* epochs) {
  const int dim = config_.dim;
  // Training answers carry whole states; evaluation only reads rows.
  const int answer_width = training ? width_ : dim;
  if (m > u) {
    return Status::InvalidArgument(Name() + ": " + std::to_string(m) + " rows returned for " +
                                   std::to_string(u) + " ids");
  }
  std::vector<int32_t> answer(u, -1);  // unique index -> row in the shards' answer
  for (int64_t r = 0; r < m; ++r) {
    if (positions[r] < 0 || positions[r] >= u || answer[positions[r]] >= 0) {
      return Status::InvalidArgument(Name() + ": returned positions must be distinct and below " +
                                     std::to_string(u));
    }
    answer[positions[r]] = static_cast<int32_t>(r);
  }
  HET_RETURN_IF_ERROR(CheckReturnedClocks(clocks, m, /*misses=*/true));

  std::lock_guard<std::mutex> lock(mu_);
  // A pull carries no round: the epochs are what tell a cache that a
  // restore it missed (its worker unreachable then) replaced the rows its
  // copies were taken from.
  if (epochs != nullptr) HET_RETURN_IF_ERROR(CheckEpochs(epochs));
  std::vector<int32_t> slots;
  HET_RETURN_IF_ERROR(BatchSlots(unique_keys, u, &slots));
  for (int64_t i = 0; i < u; ++i) {
    if (slots[i] < 0 && answer[i] < 0) {
      return Status::FailedPrecondition(
          Name() + ": id " + std::to_string(unique_keys[i]) +
          " left the cache between the two halves of a lookup; run one lookup at a time per cache");
    }
  }
  if (training) {
    std::vector<const float*> fresh(u, nullptr);
    std::vector<int64_t> fresh_clocks(u, 0);
    for (int64_t i = 0; i < u; ++i) {
      if (answer[i] < 0) continue;
      fresh[i] = states + size_t(answer[i]) * width_;
      fresh_clocks[i] = clocks[answer[i]];
    }
    FillForTraining(unique_keys, u, slots, fresh, fresh_clocks, rows_out);
  } else {
    uint64_t hits = 0, misses = 0, refreshes = 0;
    const UnsentRows unsent(*this, /*ledger=*/true, /*outbox=*/true);
    for (int64_t i = 0; i < u; ++i) {
      float* out = rows_out + size_t(i) * dim;
      int64_t clock;
      if (answer[i] < 0) {
        std::memcpy(out, State(slots[i]), sizeof(float) * dim);
        clock = entries_[slots[i]].server_clock;
        ++hits;
      } else {
        const float* fresh = states + size_t(answer[i]) * answer_width;
        clock = clocks[answer[i]];
        if (slots[i] < 0) {
          std::memcpy(out, fresh, sizeof(float) * dim);
          ++misses;
        } else {
          const int32_t slot = slots[i];
          const float* delta = PendingDelta(slot);
          const float share = PendingShare(slot, clock);
          for (int j = 0; j < dim; ++j) out[j] = fresh[j] + share * delta[j];
          ApplyConstraint(config_.optimizer.constraint, dim, out);  // as the merge would
          ++refreshes;
        }
      }
      unsent.MergeInto(unique_keys[i], clock, out, /*whole_state=*/false);
    }
    counters_.hits += hits;
    counters_.misses += misses;
    counters_.stale_refreshes += refreshes;
  }
  counters_.rows_pulled += m;
  counters_.bytes_received += wire::PullAnswer(m, answer_width);
  if (epochs != nullptr) {
    LearnEpochs(epochs);
    counters_.bytes_received += wire::EpochAnswer(config_.num_shards);
  }
  return EndRefusals({});
}

}  // namespace het

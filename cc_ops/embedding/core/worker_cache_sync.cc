// The cache's side of the exchange in which a hit costs no bytes
// (SyncMode::kRefresh): only pushes, evictions and misses go out, one
// request to each shard a step; the shards send back the pushed rows, the
// missing rows and the fresh states of this worker's copies that went past
// the read bound.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "cc_ops/common/hashing.h"
#include "cc_ops/embedding/core/exchange_wire.h"
#include "cc_ops/embedding/core/initial_state.h"
#include "cc_ops/embedding/core/worker_cache.h"

namespace het {

size_t WorkerCache::ReportableEvictions(const std::vector<int64_t>& keys,
                                        const std::vector<int32_t>& slots) {
  // A shard that drops rows keeps one while it records this cache's copy:
  // the copy's eviction waits while an update of it is still to go (a row
  // passed through, whose update the step's Accumulate makes, or an outbox
  // row). The report of a key fetched again goes now, before the fetch is
  // recorded: a later one would drop the new record.
  KeyIndex unsent, fetched;
  for (int64_t key : outbox_.keys) unsent.Insert(key, 0);
  for (size_t i = 0; i < keys.size(); ++i) {
    if (slots[i] < 0) fetched.Insert(keys[i], 0);
  }
  const auto reported = std::stable_partition(
      unreported_evictions_.begin(), unreported_evictions_.end(), [&](int64_t key) {
        return fetched.Find(key) != KeyIndex::kAbsent ||
               (unsent.Find(key) == KeyIndex::kAbsent &&
                passing_.index.Find(key) == KeyIndex::kAbsent);
      });
  return static_cast<size_t>(reported - unreported_evictions_.begin());
}

Status WorkerCache::WriteRequests(const std::vector<int64_t>& keys,
                                  const std::vector<int32_t>& slots, bool carry_updates,
                                  ExchangePlan* plan) {
  const int shards = static_cast<int>(config_.num_shards);
  // Every exchange is a round, pushes or none: a round whose answer was lost
  // goes again as it was, and a shard that merged it answers it again.
  if (carry_updates) {
    if (StartRound(nullptr, &due_keys_, /*all=*/false, /*always=*/true)) due_keys_.clear();
    evictions_in_flight_ =
        config_.rows_leave ? ReportableEvictions(keys, slots) : unreported_evictions_.size();
  } else {
    // Even so, what concerns a missing key goes first: its evicted or
    // passed-through updates, or the shard would answer with a row that
    // lacks them, and the report of its old copy's eviction, or a later
    // report would drop the record of the copy fetched now.
    KeyIndex misses;
    for (size_t i = 0; i < keys.size(); ++i) {
      if (slots[i] < 0) misses.Insert(keys[i], 0);
    }
    StartRound(&misses, nullptr, /*all=*/false, /*always=*/true);
    const auto reported = std::stable_partition(
        unreported_evictions_.begin(), unreported_evictions_.end(),
        [&misses](int64_t key) { return misses.Find(key) != KeyIndex::kAbsent; });
    evictions_in_flight_ = reported - unreported_evictions_.begin();
  }
  plan->read_staleness = BoundInForce(config_.read_staleness);
  // The ledger by shard; each part keeps its order, so its evicted rows lead.
  std::vector<Pushes> parts(shards);
  for (size_t i = 0; i < ledger_.size(); ++i) {
    Pushes& p = parts[ShardOf(ledger_.keys[i], shards)];
    p.Add(ledger_.keys[i], ledger_.deltas.data() + i * width_, width_, ledger_.counts[i],
          ledger_.base_clocks[i]);
    if (static_cast<int64_t>(i) < ledger_.evicted) ++p.evicted;
  }
  std::vector<wire::ExchangeRequest> requests(shards);
  for (int s = 0; s < shards; ++s) {
    wire::ExchangeRequest& r = requests[s];
    r.sender = RoundSenderLocked(s);
    r.read_staleness = plan->read_staleness;
    r.learning_rate = last_learning_rate_;
    r.width = width_;
    r.dim = config_.dim;
    r.row_type = ledger_type_;
    r.initial_state = initial_state_;
    Pushes& p = parts[s];
    r.push_keys = std::move(p.keys);
    r.push_counts = std::move(p.counts);
    r.push_base_clocks = std::move(p.base_clocks);
    r.push_unanswered = p.evicted;
    r.push_deltas = {p.deltas.data(), static_cast<int64_t>(r.push_keys.size())};
  }
  for (size_t i = 0; i < keys.size(); ++i) {
    if (slots[i] < 0) requests[ShardOf(keys[i], shards)].misses.push_back(keys[i]);
  }
  // Evictions stay listed until an exchange that reported them completes.
  for (size_t i = 0; i < evictions_in_flight_; ++i) {
    const int64_t key = unreported_evictions_[i];
    requests[ShardOf(key, shards)].evicted.push_back(key);
  }
  plan->requests.resize(shards);
  for (int s = 0; s < shards; ++s) {
    wire::EncodeRequest(requests[s], &plan->requests[s]);
    counters_.bytes_sent += plan->requests[s].size();
  }
  return Status::Ok();
}

Status WorkerCache::BeginExchange(const int64_t* ids, int64_t n, ExchangePlan* plan,
                                  bool carry_updates) {
  std::lock_guard<std::mutex> lock(mu_);
  if (config_.sync != SyncMode::kRefresh) {
    return Status::FailedPrecondition(Name() +
                                      ": this cache checks its keys (sync='check'); "
                                      "it cannot sync by refresh");
  }
  HET_RETURN_IF_ERROR(BeginLookup(ids, n, &plan->unique_keys, &plan->inverse));
  return WriteRequests(plan->unique_keys, prepared_slots_, carry_updates, plan);
}

Status WorkerCache::TakeAnswers(const int64_t* keys, int64_t u, const std::vector<int32_t>& slots,
                                const uint8_t* const* answers, const size_t* sizes, int64_t shards,
                                std::vector<const float*>* fresh,
                                std::vector<int64_t>* fresh_clocks, std::vector<float>* rebuilt,
                                std::vector<int64_t>* refused) {
  if (shards != config_.num_shards) {
    return Status::InvalidArgument(Name() + ": answers from " + std::to_string(shards) +
                                   " shards, but the table has " +
                                   std::to_string(config_.num_shards));
  }
  if (config_.sync != SyncMode::kRefresh) {
    return Status::FailedPrecondition(Name() + ": this cache checks its keys (sync='check')");
  }
  std::vector<wire::ExchangeAnswer> a(shards);
  for (int64_t s = 0; s < shards; ++s) {
    a[s].width = width_;
    a[s].dim = config_.dim;
    a[s].row_type = ledger_type_;  // the round's, as its requests went
    HET_RETURN_IF_ERROR(wire::DecodeAnswer(config_.table_name, answers[s], sizes[s], &a[s]));
    HET_RETURN_IF_ERROR(CheckReturnedClocks(a[s].push_clocks.data(), a[s].push_clocks.size()));
    HET_RETURN_IF_ERROR(CheckReturnedClocks(a[s].miss_clocks.data(), a[s].miss_clocks.size(),
                                            /*misses=*/true));
    HET_RETURN_IF_ERROR(
        CheckReturnedClocks(a[s].refresh_clocks.data(), a[s].refresh_clocks.size()));
    if (!a[s].miss_rebuilt.empty() && initial_state_ == 0) {
      return Status::InvalidArgument(Name() + ": shard " + std::to_string(s) +
                                     " sent rows to rebuild, but this cache makes none");
    }
  }
  if (!in_flight_) {
    return Status::FailedPrecondition(Name() +
                                      ": an exchange's answers, but no exchange of this "
                                      "cache is in flight; run one lookup at a time per cache");
  }
  // The epochs first: a shard with another epoch answered nothing else.
  std::vector<int64_t> epochs(shards);
  for (int64_t s = 0; s < shards; ++s) epochs[s] = a[s].epoch;
  HET_RETURN_IF_ERROR(CheckEpochs(epochs.data()));
  // Each shard answers its misses in the batch's order: each with its
  // clock, and its state unless this cache is to make it.
  fresh->assign(u, nullptr);
  fresh_clocks->assign(u, 0);
  std::vector<int64_t> next(shards, 0), sent(shards, 0);
  // The rows made here, and a 16-bit answer's misses, decoded into `a`,
  // which ends here: `rebuilt` holds both for the caller.
  int64_t made = 0, kept = 0;
  for (const wire::ExchangeAnswer& answer : a) {
    made += wire::FlagCount(answer.miss_rebuilt);
    if (!answer.miss_states.decoded.empty()) kept += answer.miss_states.rows;
  }
  rebuilt->resize((made + kept) * width_);  // the pointers into it stay valid
  int64_t at = 0;
  for (int64_t i = 0; i < u; ++i) {
    if (slots[i] >= 0) continue;
    const int s = ShardOf(keys[i], static_cast<int>(shards));
    const int64_t j = next[s]++;
    if (j >= static_cast<int64_t>(a[s].miss_clocks.size())) break;
    if (wire::Flagged(a[s].miss_rebuilt, j)) {
      if (a[s].miss_clocks[j] == kNotAdmitted) {  // a default row is no initializer's
        return Status::InvalidArgument(Name() + ": shard " + std::to_string(s) +
                                       " sent a row not admitted to rebuild");
      }
      float* state = rebuilt->data() + at++ * width_;
      MakeInitialState(config_.initializer, config_.optimizer, config_.dim, keys[i], state);
      (*fresh)[i] = state;
    } else if (a[s].miss_states.decoded.empty()) {
      (*fresh)[i] = a[s].miss_states.data + size_t(sent[s]++) * width_;
    } else {
      float* state = rebuilt->data() + at++ * width_;
      std::memcpy(state, a[s].miss_states.data + size_t(sent[s]++) * width_,
                  sizeof(float) * width_);
      (*fresh)[i] = state;
    }
    (*fresh_clocks)[i] = a[s].miss_clocks[j];
  }
  // The ledger's rows by shard: each shard answers those it did not take
  // as evicted, in order.
  // A lean one's state is the merge StartRound computed.
  std::vector<int64_t> taken(shards, 0), whole(shards, 0);
  std::vector<const float*> states(ledger_.size(), nullptr);
  std::vector<int64_t> clocks(ledger_.size(), 0);
  std::vector<uint8_t> lean(ledger_.size(), 0);
  for (size_t i = 0; i < ledger_.size(); ++i) {
    const int s = ShardOf(ledger_.keys[i], static_cast<int>(shards));
    if (static_cast<int64_t>(i) < ledger_.evicted) continue;
    const int64_t j = taken[s]++;
    if (j >= static_cast<int64_t>(a[s].push_clocks.size())) continue;  // refused below
    clocks[i] = a[s].push_clocks[j];
    if (wire::Flagged(a[s].push_lean, j)) {
      lean[i] = 1;
      continue;
    }
    states[i] = a[s].push_states.data + size_t(whole[s]++) * width_;
  }
  for (int64_t s = 0; s < shards; ++s) {
    if (next[s] != static_cast<int64_t>(a[s].miss_clocks.size())) {
      return Status::InvalidArgument(Name() + ": shard " + std::to_string(s) + " returned " +
                                     std::to_string(a[s].miss_clocks.size()) + " rows for " +
                                     std::to_string(next[s]) +
                                     " ids not cached; run one lookup at a time per cache");
    }
    if (static_cast<int64_t>(a[s].push_clocks.size()) != taken[s]) {
      return Status::InvalidArgument(Name() + ": shard " + std::to_string(s) + " answered " +
                                     std::to_string(a[s].push_clocks.size()) + " pushed rows of " +
                                     std::to_string(taken[s]));
    }
  }
  // A refused row's answer is the shard's row as it was: the entry takes
  // it, so the update refused leaves the copy too.
  refused->clear();
  for (const wire::ExchangeAnswer& answer : a) {
    refused->insert(refused->end(), answer.refused_keys.begin(), answer.refused_keys.end());
  }
  EndRound(states, clocks.data(), lean, *refused);
  LearnEpochs(epochs.data());
  uint64_t refreshed = 0, refreshes = 0, missing = 0;
  for (const wire::ExchangeAnswer& answer : a) {
    for (size_t r = 0; r < answer.refresh_keys.size(); ++r) {
      const uint32_t slot = index_.Find(answer.refresh_keys[r]);
      if (slot == KeyIndex::kAbsent) continue;  // evicted after the shard queued it
      Refresh(static_cast<int32_t>(slot), answer.refresh_states.data + r * width_,
              answer.refresh_clocks[r]);
      ++refreshed;
    }
    refreshes += answer.refresh_keys.size();
    missing += answer.miss_clocks.size();
  }
  counters_.stale_refreshes += refreshed;
  counters_.evictions_reported += evictions_in_flight_;
  unreported_evictions_.erase(unreported_evictions_.begin(),
                              unreported_evictions_.begin() + evictions_in_flight_);
  evictions_in_flight_ = 0;
  counters_.rows_pulled += missing + refreshes;
  counters_.rows_rebuilt += made;
  for (int64_t s = 0; s < shards; ++s) counters_.bytes_received += sizes[s];
  return Status::Ok();
}

Status WorkerCache::EndExchange(const int64_t* unique_keys, int64_t u,
                                const uint8_t* const* answers, const size_t* sizes, int64_t shards,
                                float* rows_out) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<int32_t> slots;
  HET_RETURN_IF_ERROR(BatchSlots(unique_keys, u, &slots));
  std::vector<const float*> fresh;
  std::vector<int64_t> fresh_clocks;
  std::vector<float> rebuilt;
  std::vector<int64_t> refused;
  HET_RETURN_IF_ERROR(TakeAnswers(unique_keys, u, slots, answers, sizes, shards, &fresh,
                                  &fresh_clocks, &rebuilt, &refused));
  FillForTraining(unique_keys, u, slots, fresh, fresh_clocks, rows_out);
  return EndRefusals(std::move(refused));
}

Status WorkerCache::CheckEpochs(const int64_t* epochs) {
  for (size_t s = 0; s < epochs_.size(); ++s) {
    if (epochs_[s] == epochs[s]) continue;
    // The shard no longer knows which copies this cache holds, so it could
    // never tell the cache they went stale: the copies must go. The shard
    // merged nothing of this round; the next lookup starts from an empty
    // cache.
    old_timeline_ = true;
    return Status::Aborted(Name() +
                           ": a table shard was restarted or restored since this "
                           "cache's copies were taken; the cache is cleared at its next "
                           "lookup (its pending updates belonged to the old table), run "
                           "the step again");
  }
  return Status::Ok();
}

void WorkerCache::LearnEpochs(const int64_t* epochs) {
  if (epochs_.empty()) epochs_.assign(epochs, epochs + config_.num_shards);
}

}  // namespace het

// The cache's side of the sync in which a hit costs no bytes
// (SyncMode::kRefresh): only misses and evictions go out; the shards send
// back the missing rows and the fresh states of this worker's copies that
// went past the read bound.
#include <algorithm>
#include <cstring>

#include "cc_ops/embedding/core/wire_sizes.h"
#include "cc_ops/embedding/core/worker_cache.h"

namespace het {

Status WorkerCache::BeginSync(const int64_t* ids, int64_t n, SyncPlan* plan) {
  std::lock_guard<std::mutex> lock(mu_);
  if (config_.sync != SyncMode::kRefresh) {
    return Status::FailedPrecondition(Name() +
                                      ": this cache checks its keys (sync='check'); "
                                      "it cannot sync by refresh");
  }
  HET_RETURN_IF_ERROR(BeginLookup(ids, n, &plan->unique_keys, &plan->inverse));
  plan->misses.clear();
  for (size_t i = 0; i < plan->unique_keys.size(); ++i) {
    if (prepared_slots_[i] < 0) plan->misses.push_back(plan->unique_keys[i]);
  }
  // Evictions stay listed until a sync that reported them completes, so a
  // failed exchange reports them again.
  plan->evicted = unreported_evictions_;
  evictions_in_flight_ = unreported_evictions_.size();
  plan->sender = Sender{config_.worker_id, generation_};
  plan->read_staleness = BoundInForce(config_.read_staleness);
  counters_.bytes_sent +=
      wire::SyncRequest(plan->misses.size() + plan->evicted.size(), config_.num_shards);
  return Status::Ok();
}

Status WorkerCache::EndSync(const int64_t* unique_keys, int64_t u, const SyncAnswer& a,
                            float* rows_out) {
  HET_RETURN_IF_ERROR(CheckReturnedClocks(a.miss_clocks, a.misses));
  HET_RETURN_IF_ERROR(CheckReturnedClocks(a.refresh_clocks, a.refreshes));
  std::lock_guard<std::mutex> lock(mu_);
  if (config_.sync != SyncMode::kRefresh) {
    return Status::FailedPrecondition(Name() + ": this cache checks its keys (sync='check')");
  }
  std::vector<int32_t> slots;
  HET_RETURN_IF_ERROR(BatchSlots(unique_keys, u, &slots));
  // The answer holds one state per key not cached, in the batch's order.
  std::vector<int32_t> answer(u, -1);
  int64_t missing = 0;
  for (int64_t i = 0; i < u; ++i) {
    if (slots[i] < 0) answer[i] = static_cast<int32_t>(missing++);
  }
  if (missing != a.misses) {
    return Status::InvalidArgument(Name() + ": " + std::to_string(a.misses) +
                                   " rows returned for the " + std::to_string(missing) +
                                   " ids not cached; run one lookup at a time per cache");
  }
  const bool first_sync = epochs_.empty();
  if (a.shards != config_.num_shards) {
    return Status::InvalidArgument(Name() + ": an answer from " + std::to_string(a.shards) +
                                   " shards, but the table has " +
                                   std::to_string(config_.num_shards));
  }
  const bool same_shards = first_sync || std::equal(epochs_.begin(), epochs_.end(), a.epochs);
  if (!same_shards) {
    // The shard no longer knows which copies this cache holds, so it could
    // never tell the cache they went stale: the copies must go. This call
    // changes nothing; the next lookup starts from an empty cache.
    old_timeline_ = true;
    return Status::Aborted(Name() +
                           ": a table shard was restarted or restored since this "
                           "cache's copies were taken; the cache is cleared at its next "
                           "lookup (its pending updates belonged to the old table), run "
                           "the step again");
  }
  if (first_sync) epochs_.assign(a.epochs, a.epochs + a.shards);
  uint64_t refreshed = 0;
  for (int64_t r = 0; r < a.refreshes; ++r) {
    const uint32_t slot = index_.Find(a.refresh_keys[r]);
    if (slot == KeyIndex::kAbsent) continue;  // evicted after the shard queued it
    Refresh(static_cast<int32_t>(slot), a.refresh_states + size_t(r) * width_, a.refresh_clocks[r]);
    ++refreshed;
  }
  FillForTraining(unique_keys, u, slots, answer, a.miss_states, a.miss_clocks, rows_out);
  counters_.stale_refreshes += refreshed;
  counters_.evictions_reported += evictions_in_flight_;
  unreported_evictions_.erase(unreported_evictions_.begin(),
                              unreported_evictions_.begin() + evictions_in_flight_);
  evictions_in_flight_ = 0;
  counters_.rows_pulled += a.misses + a.refreshes;
  counters_.bytes_received += wire::SyncAnswer(a.misses, a.refreshes, width_, config_.num_shards);
  return Status::Ok();
}

}  // namespace het

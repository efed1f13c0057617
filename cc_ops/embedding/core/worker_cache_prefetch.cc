// The lookahead: the input pipeline stages each batch's ids before the
// step before it runs, and that step's prefetch exchange brings the batch's
// missing rows in while the step computes, carrying the step's pushes and
// evictions with it. The next step's own exchange then asks for nothing
// (docs/consistency.md, "The lookahead").
#include <algorithm>

#include "cc_ops/embedding/core/key_checks.h"
#include "cc_ops/embedding/core/worker_cache.h"
#include "cc_ops/embedding/core/worker_cache_unsent.h"

namespace het {

Status WorkerCache::Stage(const int64_t* ids, int64_t n) {
  HET_RETURN_IF_ERROR(CheckKeys(config_.table_name, config_.vocabulary_size, ids, n));
  std::vector<int64_t> moved;
  std::lock_guard<std::mutex> lock(mu_);
  staged_.Add(ids, n, &moved);
  Refile(moved);
  return Status::Ok();
}

std::vector<int64_t> WorkerCache::TakeStaged(const int64_t* current, int64_t n, int64_t batches,
                                             bool by_position) {
  std::vector<int64_t> moved;
  std::vector<int64_t> after = staged_.Take(current, n, batches, by_position, &moved);
  Refile(moved);
  return after;
}

std::vector<int64_t> WorkerCache::Staged(const int64_t* current, int64_t n, int64_t batches) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<int64_t> keys = TakeStaged(current, n, batches, /*by_position=*/true);
  std::sort(keys.begin(), keys.end());
  keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
  return keys;
}

Status WorkerCache::BeginPrefetch(const int64_t* current, int64_t n, ExchangePlan* plan) {
  std::lock_guard<std::mutex> lock(mu_);
  if (config_.sync != SyncMode::kRefresh) {
    return Status::FailedPrecondition(Name() +
                                      ": this cache checks its keys (sync='check'); "
                                      "it cannot prefetch");
  }
  // One staged batch: its ids are distinct already.
  plan->unique_keys = TakeStaged(current, n, 1, /*by_position=*/false);
  plan->inverse.clear();
  std::vector<int32_t> slots;
  SlotsOf(plan->unique_keys.data(), static_cast<int64_t>(plan->unique_keys.size()), &slots);
  if (!passing_.clocks.empty()) {
    // A row passing through this step gets its update only after this
    // prefetch: fetched now it would lack it. The next lookup fetches it,
    // behind its push.
    size_t kept = 0;
    for (size_t i = 0; i < plan->unique_keys.size(); ++i) {
      if (passing_.index.Find(plan->unique_keys[i]) != KeyIndex::kAbsent) continue;
      plan->unique_keys[kept] = plan->unique_keys[i];
      slots[kept++] = slots[i];
    }
    plan->unique_keys.resize(kept);
    slots.resize(kept);
  }
  return WriteRequests(plan->unique_keys, slots, /*carry_updates=*/true, plan);
}

Status WorkerCache::EndPrefetch(const int64_t* unique_keys, int64_t u,
                                const uint8_t* const* answers, const size_t* sizes,
                                int64_t shards) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<int32_t> slots;
  SlotsOf(unique_keys, u, &slots);
  std::vector<const float*> fresh;
  std::vector<int64_t> fresh_clocks;
  std::vector<float> rebuilt;
  std::vector<int64_t> refused;
  HET_RETURN_IF_ERROR(TakeAnswers(unique_keys, u, slots, answers, sizes, shards, &fresh,
                                  &fresh_clocks, &rebuilt, &refused));
  // The step's own rows (its update comes next) and the next batch's cached
  // rows are spared while the missing rows go in.
  Spared spared;
  std::vector<int32_t> inserted;
  OutboxRows unsent(outbox_);
  for (int64_t i = 0; i < u; ++i) {
    // A row not admitted stays out: the step itself asks for it again.
    if (fresh[i] == nullptr || fresh_clocks[i] == kNotAdmitted) continue;
    const int32_t slot = TakeSlotSparing({&prepared_slots_, &slots}, &spared);
    if (slot == EvictionOrder::kNone) {
      // No room beside the two batches: the next lookup fetches it. The
      // shards recorded the copy they handed out, so it goes as evicted.
      unreported_evictions_.push_back(unique_keys[i]);
      continue;
    }
    InsertRow(slot, unique_keys[i], fresh[i], fresh_clocks[i]);
    Reclaim(slot, fresh[i], fresh_clocks[i], unsent);
    fetched_ahead_.Insert(unique_keys[i], 0);
    inserted.push_back(slot);
  }
  unsent.Finish(&outbox_, width_);
  PutBack(spared);
  // Not touched yet: the lookup that uses them counts their first touch.
  for (int32_t slot : inserted) AttachSlot(slot, 0);
  counters_.prefetched += inserted.size();
  return EndRefusals(std::move(refused));
}

}  // namespace het

// The shard's side of the sync in which a hit costs no bytes: the record of
// each worker's copies, kept as copy_records.h describes.
#include <algorithm>
#include <array>
#include <cstring>

#include "cc_ops/embedding/core/table_shard.h"
#include "cc_ops/embedding/core/wire_sizes.h"

namespace het {

Status TableShard::Sync(const Sender& sender, const int64_t* misses, int64_t m,
                        const int64_t* evicted, int64_t e, int64_t read_staleness,
                        SyncedRows* out) {
  const std::string name = TableLabel(config_.name);
  if (sender.worker == Sender::kNoWorker) {
    return Status::InvalidArgument(name + ": a sync must name its worker (nonzero id)");
  }
  HET_RETURN_IF_ERROR(CheckKeys(config_.name, config_.vocabulary_size, misses, m));
  HET_RETURN_IF_ERROR(CheckKeys(config_.name, config_.vocabulary_size, evicted, e));
  std::unique_ptr<RowReservation> reservation;
  HET_RETURN_IF_ERROR(ReserveNewRows(misses, m, &reservation));

  // Each stripe's records are kept under its lock, with its rows: a copy is
  // recorded at the clock read in the same step, and a push queues copies
  // in the same step as it moves the row.
  std::vector<std::vector<int64_t>> evicted_by_stripe(kStripes);
  for (int64_t i = 0; i < e; ++i) evicted_by_stripe[StripeOf(evicted[i])].push_back(evicted[i]);
  const int width = state_width();
  out->refresh_keys.clear();
  out->refresh_states.clear();
  out->refresh_clocks.clear();
  std::array<CopyRecord*, kStripes> records;
  for (int s = 0; s < kStripes; ++s) {
    Stripe& stripe = stripes_[s];
    std::lock_guard<std::mutex> lock(stripe.mu);
    CopyRecord* record = records[s] = stripe.records.Begin(sender, read_staleness);
    for (int64_t key : evicted_by_stripe[s]) record->Drop(key);
    for (int64_t key : record->TakeQueued()) {
      bool created;
      char* p = FindOrCreate(stripe, key, &created);
      out->refresh_keys.push_back(key);
      out->refresh_states.insert(out->refresh_states.end(), Values(p), Values(p) + width);
      out->refresh_clocks.push_back(*Clock(p));
      record->Hold(key, *Clock(p));
    }
  }
  out->miss_states.resize(size_t(m) * width);
  out->miss_clocks.resize(m);
  ForEachByStripe(misses, m, [&](Stripe& stripe, int32_t i) {
    bool created;
    char* p = FindOrCreate(stripe, misses[i], &created);
    std::memcpy(out->miss_states.data() + size_t(i) * width, Values(p), sizeof(float) * width);
    out->miss_clocks[i] = *Clock(p);
    // The record is the one taken above: only this request replaces it.
    records[&stripe - stripes_.data()]->Hold(misses[i], *Clock(p));
  });
  const int64_t r = static_cast<int64_t>(out->refresh_keys.size());

  pull_requests_.fetch_add(1, std::memory_order_relaxed);
  keys_checked_.fetch_add(m, std::memory_order_relaxed);
  rows_sent_.fetch_add(m + r, std::memory_order_relaxed);
  rows_refreshed_.fetch_add(r, std::memory_order_relaxed);
  bytes_received_.fetch_add(wire::SyncRequest(m + e), std::memory_order_relaxed);
  bytes_sent_.fetch_add(wire::SyncAnswer(m, r, width), std::memory_order_relaxed);
  return Status::Ok();
}

RecordSizes TableShard::Records() const {
  RecordSizes sizes;
  for (const Stripe& stripe : stripes_) {
    std::lock_guard<std::mutex> lock(stripe.mu);
    sizes.workers = std::max<uint64_t>(sizes.workers, stripe.records.workers());
    sizes.copies += stripe.records.copies();
    sizes.bytes += stripe.records.MemoryBytes();
  }
  return sizes;
}

}  // namespace het

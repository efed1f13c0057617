// The shard's side of the sync in which a hit costs no bytes: the record of
// each worker's copies, kept as copy_records.h describes.
#include <cstring>
#include <thread>

#include "cc_ops/embedding/core/table_shard.h"
#include "cc_ops/embedding/core/wire_sizes.h"

namespace het {

void TableShard::ReadStates(const int64_t* keys, int64_t n, float* states, int64_t* clocks) {
  const int width = state_width();
  ForEachByStripe(keys, n, [&](Stripe& stripe, int32_t i) {
    bool created;
    char* p = FindOrCreate(stripe, keys[i], &created);
    std::memcpy(states + size_t(i) * width, Values(p), sizeof(float) * width);
    clocks[i] = *Clock(p);
  });
}

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

  std::lock_guard<std::mutex> records_lock(records_mu_);
  if (!recording_.load()) {
    recording_.store(true);
    // Pushes that began before the flag was set hold no lock: let them
    // finish, so that every push the record can miss is already in the
    // clocks read below.
    while (unrecorded_pushes_.load() != 0) std::this_thread::yield();
  }
  CopyRecord* record = records_.Begin(sender, read_staleness);
  for (int64_t i = 0; i < e; ++i) record->Drop(evicted[i]);

  const int width = state_width();
  out->miss_states.resize(size_t(m) * width);
  out->miss_clocks.resize(m);
  ReadStates(misses, m, out->miss_states.data(), out->miss_clocks.data());
  for (int64_t i = 0; i < m; ++i) record->Hold(misses[i], out->miss_clocks[i]);

  out->refresh_keys = record->TakeQueued();
  const int64_t r = static_cast<int64_t>(out->refresh_keys.size());
  out->refresh_states.resize(size_t(r) * width);
  out->refresh_clocks.resize(r);
  ReadStates(out->refresh_keys.data(), r, out->refresh_states.data(), out->refresh_clocks.data());
  for (int64_t i = 0; i < r; ++i) record->Hold(out->refresh_keys[i], out->refresh_clocks[i]);

  pull_requests_.fetch_add(1, std::memory_order_relaxed);
  keys_checked_.fetch_add(m, std::memory_order_relaxed);
  rows_sent_.fetch_add(m + r, std::memory_order_relaxed);
  rows_refreshed_.fetch_add(r, std::memory_order_relaxed);
  bytes_received_.fetch_add(wire::SyncRequest(m + e), std::memory_order_relaxed);
  bytes_sent_.fetch_add(wire::SyncAnswer(m, r, width), std::memory_order_relaxed);
  return Status::Ok();
}

RecordSizes TableShard::Records() const {
  std::lock_guard<std::mutex> records_lock(records_mu_);
  RecordSizes sizes;
  sizes.workers = records_.workers();
  sizes.copies = records_.copies();
  sizes.bytes = records_.MemoryBytes();
  return sizes;
}

}  // namespace het

// The shard's side of the exchange in which a hit costs no bytes: the
// pushes merged, and the record of each worker's copies kept as
// copy_records.h describes.
#include <algorithm>
#include <array>
#include <cstring>

#include "cc_ops/embedding/core/exchange_wire.h"
#include "cc_ops/embedding/core/table_shard.h"

namespace het {

Status TableShard::Exchange(const uint8_t* request, size_t size, std::vector<uint8_t>* answer) {
  const std::string name = TableLabel(config_.name);
  wire::ExchangeRequest r;
  r.width = state_width();
  r.dim = config_.dim;
  HET_RETURN_IF_ERROR(wire::DecodeRequest(config_.name, request, size, &r));
  if (r.sender.worker == Sender::kNoWorker) {
    return Status::InvalidArgument(name + ": an exchange must name its worker (nonzero id)");
  }
  HET_RETURN_IF_ERROR(CheckKeys(config_.name, config_.vocabulary_size, r.misses.data(),
                                static_cast<int64_t>(r.misses.size())));
  HET_RETURN_IF_ERROR(CheckKeys(config_.name, config_.vocabulary_size, r.evicted.data(),
                                static_cast<int64_t>(r.evicted.size())));
  const int64_t pushes = static_cast<int64_t>(r.push_keys.size());
  if (pushes > 0) {
    HET_RETURN_IF_ERROR(CheckPush(r.push_keys.data(), r.push_deltas.data, r.width,
                                  r.push_counts.data(), pushes, r.learning_rate, "delta",
                                  kLeastDeltaCount));
    HET_RETURN_IF_ERROR(
        CheckDeltaPush(r.push_keys.data(), r.push_deltas.data, r.push_base_clocks.data(), pushes));
  }
  wire::ExchangeAnswer a;
  a.epoch = epoch();
  a.width = r.width;
  a.dim = r.dim;
  a.row_type = r.row_type;  // the answer's rows travel as the request's
  if (SawOtherEpoch(r.sender, a.epoch)) {
    // The sender's copies and pending updates belong to a table this shard
    // no longer holds: it merges nothing, and learns the epoch from the
    // answer.
    wire::EncodeAnswer(a, answer);
    bytes_received_.fetch_add(size, std::memory_order_relaxed);
    bytes_sent_.fetch_add(answer->size(), std::memory_order_relaxed);
    return Status::Ok();
  }
  SenderLog::Turn turn;
  HET_RETURN_IF_ERROR(AdmitRound(r.sender, &turn));
  // Before the room is planned (the copies never taken may go) and the
  // misses are recorded (a lost miss asked for again is kept).
  if (turn.repeat()) TakeBackLost(r.sender, turn);
  // The new rows of the misses and the pushes are reserved together before
  // anything changes: once the pushes are merged, nothing can fail.
  // The pushes' keys matter only to a shard that limits or drops rows (the
  // room they may need, the rows eviction must leave): elsewhere the misses
  // alone are read, with no copy on the hot path.
  std::vector<int64_t> touched;
  if (config_.max_rows >= 0 || dropping()) {
    touched = r.misses;
    touched.insert(touched.end(), r.push_keys.begin(), r.push_keys.end());
  }
  const std::vector<int64_t>& room_keys = touched.empty() ? r.misses : touched;
  std::unique_ptr<RowReservation> reservation;
  HET_RETURN_IF_ERROR(ReserveNewRows(room_keys.data(), static_cast<int64_t>(room_keys.size()),
                                     ReadAdmit(/*training=*/true),
                                     static_cast<int64_t>(r.misses.size()), &reservation));
  const int64_t answered = pushes - r.push_unanswered;
  std::vector<float> push_states(size_t(answered) * r.width);
  a.push_clocks.resize(answered);
  std::vector<uint8_t> lean(answered, 0);
  int64_t lean_rows = 0;
  if (pushes > 0 && turn.repeat()) {
    AnswerRepeat(r.push_keys.data(), pushes, r.sender, r.push_unanswered, push_states.data(),
                 a.push_clocks.data());
  } else if (pushes > 0) {
    HET_RETURN_IF_ERROR(MergeDeltas(
        r.push_keys.data(), r.push_deltas.data, r.push_counts.data(), r.push_base_clocks.data(),
        pushes, r.learning_rate, push_states.data(), a.push_clocks.data(), r.sender,
        r.push_unanswered, /*reserved=*/true, lean.data(), &lean_rows, &a.refused_keys));
  }
  // A worker that makes rows from the same initial states as this shard's
  // is sent only the clocks of rows made for it.
  const bool rebuild = r.initial_state != 0 && r.initial_state == initial_state_;
  SyncedRows rows;
  Serve(r.sender, r.misses, r.evicted, r.read_staleness, rebuild, reservation.get(), &rows);
  if (turn.repeat()) a.refused_keys = turn.refused();
  turn.Done(rows.refresh_keys, std::move(r.misses), a.refused_keys);
  a.push_states = {push_states.data(), answered - lean_rows};
  if (lean_rows > 0) a.push_lean = wire::PackFlags(lean.data(), lean.size());
  a.miss_states = {rows.miss_states.data(),
                   static_cast<int64_t>(rows.miss_states.size() / std::max(r.width, 1))};
  a.miss_clocks = std::move(rows.miss_clocks);
  a.miss_rebuilt = std::move(rows.miss_rebuilt);
  a.refresh_keys = std::move(rows.refresh_keys);
  a.refresh_states = {rows.refresh_states.data(), static_cast<int64_t>(a.refresh_keys.size())};
  a.refresh_clocks = std::move(rows.refresh_clocks);
  wire::EncodeAnswer(a, answer);
  bytes_received_.fetch_add(size, std::memory_order_relaxed);
  bytes_sent_.fetch_add(answer->size(), std::memory_order_relaxed);
  return Status::Ok();
}

bool TableShard::SawOtherEpoch(const Sender& sender, int64_t epoch) {
  // 0: the sender has not seen this table's epoch yet.
  if (sender.epoch == 0 || sender.epoch == epoch) return false;
  refused_epoch_.fetch_add(1, std::memory_order_relaxed);
  return true;
}

Status TableShard::AdmitRound(const Sender& sender, SenderLog::Turn* turn) {
  if (sender.worker == Sender::kNoWorker || sender.sequence == 0) return Status::Ok();
  return senders_.Admit(config_.name, sender, turn);
}

void TableShard::AnswerRepeat(const int64_t* keys, int64_t n, const Sender& sender,
                              int64_t unanswered, float* states, int64_t* clocks) {
  const int width = state_width();
  ForEachByStripe(keys, n, [&](Stripe& stripe, int32_t i) {
    if (i < unanswered) return;
    // The first time merged every pushed row, made it, or dropped the update
    // of an id a table that admits ids did not hold. A repeat makes no row:
    // none was reserved, and one made now would pass max_rows or admit an
    // id unseen. An id not held is answered as the drop was (the default
    // row at kNotAdmitted) or, on a table that does not admit ids, where
    // only an eviction since can have taken the row, as the row a read
    // would make again (its initializer's state at the clock floor).
    const uint32_t row = stripe.index.Find(keys[i]);
    if (row == KeyIndex::kAbsent) {
      std::vector<float> state(width);
      int64_t clock = kNotAdmitted;
      if (admitting()) {
        DefaultState(state.data(), width);
      } else {
        clock = NewState(keys[i], state.data());
      }
      if (states != nullptr) {
        std::copy(state.begin(), state.end(), states + size_t(i - unanswered) * width);
      }
      if (clocks != nullptr) clocks[i - unanswered] = clock;
      return;
    }
    char* p = RowAt(stripe, row);
    if (states != nullptr) {
      std::memcpy(states + size_t(i - unanswered) * width, Values(p), sizeof(float) * width);
    }
    if (clocks != nullptr) clocks[i - unanswered] = *Clock(p);
    if (stripe.records.workers() > 0) stripe.records.Pushed(sender, keys[i], *Clock(p));
  });
}

void TableShard::TakeBackLost(const Sender& sender, const SenderLog::Turn& turn) {
  for (const bool refreshed : {true, false}) {
    for (int64_t key : refreshed ? turn.lost_refreshes() : turn.lost_misses()) {
      Stripe& stripe = stripes_[StripeOf(key)];
      std::lock_guard<std::mutex> lock(stripe.mu);
      if (stripe.records.workers() == 0) continue;
      if (refreshed) {
        stripe.records.Requeue(sender, key);
      } else {
        stripe.records.Forget(sender, key);
      }
    }
  }
}

void TableShard::Serve(const Sender& sender, const std::vector<int64_t>& misses,
                       const std::vector<int64_t>& evicted, int64_t read_staleness, bool rebuild,
                       const RowReservation* room, SyncedRows* out) {
  const int64_t m = static_cast<int64_t>(misses.size());
  // Each stripe's records are kept under its lock, with its rows: a copy is
  // recorded at the clock read in the same step, and a push queues copies
  // in the same step as it moves the row.
  std::vector<std::vector<int64_t>> evicted_by_stripe(kStripes);
  for (int64_t key : evicted) evicted_by_stripe[StripeOf(key)].push_back(key);
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
  out->miss_rebuilt.assign(rebuild ? (m + 7) / 8 : 0, 0);
  bool rebuilt = false;
  ForEachByStripe(misses.data(), m, [&](Stripe& stripe, int32_t i) {
    bool created = false;
    char* p = FindOrAdmit(stripe, misses[i], Creates(room, i), &created);
    if (p == nullptr) {  // not admitted: the default state, not recorded, for no cache keeps it
      DefaultState(out->miss_states.data() + size_t(i) * width, width);
      out->miss_clocks[i] = kNotAdmitted;
      return;
    }
    if (rebuild && created) {  // its initial state: the worker makes it
      out->miss_rebuilt[i / 8] |= static_cast<uint8_t>(1u << (i % 8));
      rebuilt = true;
    } else {
      std::memcpy(out->miss_states.data() + size_t(i) * width, Values(p), sizeof(float) * width);
    }
    out->miss_clocks[i] = *Clock(p);
    // The record is the one taken above: only this request replaces it.
    records[&stripe - stripes_.data()]->Hold(misses[i], *Clock(p));
  });
  if (!rebuilt) {
    out->miss_rebuilt.clear();
  } else {  // the states of the rows not rebuilt, in order
    size_t kept = 0;
    for (int64_t i = 0; i < m; ++i) {
      if (wire::Flagged(out->miss_rebuilt, i)) continue;
      if (kept != size_t(i)) {
        std::memmove(out->miss_states.data() + kept * width,
                     out->miss_states.data() + size_t(i) * width, sizeof(float) * width);
      }
      ++kept;
    }
    out->miss_states.resize(kept * width);
  }
  const int64_t r = static_cast<int64_t>(out->refresh_keys.size());
  pull_requests_.fetch_add(1, std::memory_order_relaxed);
  keys_checked_.fetch_add(m, std::memory_order_relaxed);
  rows_sent_.fetch_add(m + r, std::memory_order_relaxed);
  rows_refreshed_.fetch_add(r, std::memory_order_relaxed);
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

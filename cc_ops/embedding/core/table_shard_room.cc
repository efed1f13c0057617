// A request's room for the rows it would create: which of its ids become
// rows (row_admission.h), the reservation that keeps the shard within
// max_rows, and the room lock of a shard that drops rows (row_eviction.h).
#include <string>

#include "cc_ops/embedding/core/table_shard.h"

namespace het {

TableShard::Admit TableShard::ReadAdmit(bool training) const {
  if (training) return admitting() ? Admit::kTraining : Admit::kAll;
  // Evaluation reads what the table holds and zeros for the rest, as an
  // export serves: on a table that admits or drops rows it makes none, so it
  // never evicts a trained row to make room for an id no one trains.
  return admitting() || dropping() ? Admit::kNone : Admit::kAll;
}

bool TableShard::Creates(const RowReservation* room, int64_t i) {
  return room == nullptr || room->create.empty() || (room->create[i] & RowReservation::kCreates);
}

void TableShard::DecideAdmission(const int64_t* keys, int64_t reads, Admit admit,
                                 const std::vector<uint8_t>& absent, RowReservation* room) {
  // Once a request: each worker's step that asks for an id counts once, and
  // only if the shard accepts the request (CountSightings): one refused,
  // say for room, moves none of its ids towards admission.
  room->create.assign(absent.size(), 0);
  for (int64_t i = 0; i < reads; ++i) {
    if (!absent[i] || admit == Admit::kNone) continue;
    const bool admitted = sketch_ == nullptr || sketch_->WouldAdmit(keys[i]);
    room->create[i] = RowReservation::kSighted | (admitted ? RowReservation::kCreates : 0);
  }
}

void TableShard::CountSightings(const int64_t* keys, const RowReservation& room) {
  uint64_t refused = 0;
  for (size_t i = 0; i < room.create.size(); ++i) {
    if (!(room.create[i] & RowReservation::kSighted)) continue;
    if (sketch_ != nullptr) sketch_->Sighted(keys[i]);
    refused += !(room.create[i] & RowReservation::kCreates);
  }
  ids_not_admitted_.fetch_add(refused, std::memory_order_relaxed);
}

Status TableShard::ReserveNewRows(const int64_t* keys, int64_t n, Admit admit, int64_t reads,
                                  std::unique_ptr<RowReservation>* out, bool may_evict) {
  const int64_t tick = tick_.fetch_add(1, std::memory_order_relaxed) + 1;
  if (marks_ != nullptr) marks_->Request(tick, Second());
  // Nothing to limit, drop or decide: every id not held becomes a row (or,
  // pushed to a table that admits ids, none does).
  if (!dropping() && config_.max_rows < 0 && (reads == 0 || admit == Admit::kAll)) {
    return Status::Ok();
  }
  std::unique_ptr<RowReservation> room(new RowReservation(&reserved_rows_));
  if (dropping() && ExpiryDue()) {
    room->alone = std::unique_lock<std::shared_mutex>(room_mu_);
    Expire(keys, n);
  } else if (dropping()) {
    room->shared = std::shared_lock<std::shared_mutex>(room_mu_);
  }
  // The rows the request would create: its ids not held, less those a
  // table that admits ids does not make (not yet admitted, or not read
  // for training, or pushed).
  std::vector<uint8_t> absent(n, 0);
  auto count_new = [&] {
    ForEachByStripe(keys, n, [&](Stripe& stripe, int32_t i) {
      absent[i] = stripe.index.Find(keys[i]) == KeyIndex::kAbsent;
    });
    if (admit != Admit::kAll && room->create.empty()) {
      DecideAdmission(keys, reads, admit, absent, room.get());
    }
    int64_t created = 0;
    for (int64_t i = 0; i < n; ++i) {
      if (!absent[i]) continue;
      if (i < reads) {
        created += admit == Admit::kAll || Creates(room.get(), i);
      } else {
        created += !admitting();
      }
    }
    return created;
  };
  int64_t created = count_new();
  if (config_.max_rows < 0) {
    CountSightings(keys, *room);
    *out = std::move(room);
    return Status::Ok();
  }
  // Concurrent requests reserve before creating, so together they cannot
  // pass the limit; a key new to two of them is counted twice, which only
  // errs on the side of refusing (or evicting).
  const int64_t before = reserved_rows_.fetch_add(created);
  room->rows = created;
  const int64_t held = Size();
  if (created > 0 && held + before + created > config_.max_rows) {
    if (!evicting() || !may_evict) {
      return Status::ResourceExhausted(
          TableLabel(config_.name) + ": this shard holds " + std::to_string(held) +
          " rows and its limit is " + std::to_string(config_.max_rows) +
          "; the request would add " + std::to_string(created) +
          " more, so nothing was changed (raise max_rows, add PS shards, keep fewer distinct " +
          (evicting() ? "ids; a restore evicts nothing)"
                      : "ids, or evict with on_full=\"evict\")"));
    }
    // Alone, no other request holds rows it found or reserved: the count is
    // exact, and evicting takes no row from under anyone.
    reserved_rows_.fetch_sub(created);
    room->rows = 0;
    if (!room->alone.owns_lock()) {
      room->shared.unlock();
      room->alone = std::unique_lock<std::shared_mutex>(room_mu_);
      created = count_new();
    }
    const int64_t need = Size() + created - config_.max_rows;
    if (need > 0) HET_RETURN_IF_ERROR(EvictFor(keys, n, need));
    reserved_rows_.fetch_add(created);
    room->rows = created;
  }
  CountSightings(keys, *room);
  *out = std::move(room);
  return Status::Ok();
}

}  // namespace het

// A shard's rows in and out as TableChunks, whole (values, slots, clock
// and step count): export and import, for checkpoints and resharding.
#include <algorithm>
#include <cstring>

#include "cc_ops/embedding/core/table_shard.h"

namespace het {

Status TableShard::Export(int64_t offset, int64_t limit, TableChunk* out) const {
  if (offset < 0 || limit < 0) {
    return Status::InvalidArgument(TableLabel(config_.name) +
                                   ": export offset and limit must be >= 0");
  }
  const int dim = config_.dim;
  const size_t slot_floats = size_t(num_slots_) * dim;
  *out = TableChunk();
  // Sized once: grown row by row, the vectors would hold up to twice the
  // chunk (a save holds a chunk and its outputs at once).
  const int64_t total = Size();
  const size_t n = static_cast<size_t>(std::max<int64_t>(0, std::min(limit, total - offset)));
  out->keys.reserve(n);
  out->values.reserve(n * dim);
  out->slots.reserve(n * slot_floats);
  out->clocks.reserve(n);
  out->steps.reserve(n);
  int64_t seen = 0;  // rows before this stripe's
  for (const Stripe& stripe : stripes_) {
    std::lock_guard<std::mutex> lock(stripe.mu);
    const int64_t rows = stripe.rows();
    if (seen + rows <= offset) {
      seen += rows;
      continue;
    }
    // An evicting shard's free slots are skipped, not counted.
    int64_t skip = offset > seen ? offset - seen : 0;
    for (uint32_t slot = 0; slot < stripe.slots; ++slot) {
      if (static_cast<int64_t>(out->keys.size()) >= limit) return Status::Ok();
      char* p = RowAt(stripe, slot);
      if (*Clock(p) == kFreeSlot) continue;
      if (skip > 0) {
        --skip;
        continue;
      }
      AppendRow(p, out);
    }
    seen += rows;
  }
  return Status::Ok();
}

void TableShard::AppendRow(char* p, TableChunk* out) const {
  const size_t slot_floats = size_t(num_slots_) * config_.dim;
  out->keys.push_back(*Key(p));
  out->values.insert(out->values.end(), Values(p), Values(p) + config_.dim);
  out->slots.insert(out->slots.end(), Slots(p), Slots(p) + slot_floats);
  out->clocks.push_back(*Clock(p));
  out->steps.push_back(NeedsStepCount(config_.optimizer.kind) ? *Step(p) : 0);
}

Status TableShard::Import(const TableChunk& chunk) {
  const int dim = config_.dim;
  const size_t n = chunk.keys.size();
  const size_t slot_floats = size_t(num_slots_) * dim;
  if (chunk.values.size() != n * dim || chunk.slots.size() != n * slot_floats ||
      chunk.clocks.size() != n || chunk.steps.size() != n) {
    return Status::InvalidArgument(
        TableLabel(config_.name) + ": import of " + std::to_string(n) + " rows needs " +
        std::to_string(n * dim) + " values, " + std::to_string(n * slot_floats) + " slot values (" +
        std::to_string(num_slots_) + " slots of dim " + std::to_string(dim) +
        "), and one clock and step per row; got " + std::to_string(chunk.values.size()) + ", " +
        std::to_string(chunk.slots.size()) + ", " + std::to_string(chunk.clocks.size()) + ", " +
        std::to_string(chunk.steps.size()));
  }
  HET_RETURN_IF_ERROR(
      CheckKeys(config_.name, config_.vocabulary_size, chunk.keys.data(), static_cast<int64_t>(n)));
  for (size_t i = 0; i < n; ++i) {
    if (chunk.clocks[i] < 0 || chunk.steps[i] < 0) {
      return Status::InvalidArgument(TableLabel(config_.name) +
                                     ": imported clocks and steps must be >= 0");
    }
  }
  std::unique_ptr<RowReservation> reservation;
  HET_RETURN_IF_ERROR(ReserveNewRows(chunk.keys.data(), static_cast<int64_t>(n), Admit::kAll,
                                     static_cast<int64_t>(n), &reservation,
                                     /*may_evict=*/false));
  ForEachByStripe(chunk.keys.data(), static_cast<int64_t>(n), [&](Stripe& stripe, int32_t at) {
    const size_t i = static_cast<size_t>(at);
    bool created;
    uint32_t slot;
    char* p = FindOrCreate(stripe, chunk.keys[i], &created, &slot);
    MarkChanged(stripe, slot);
    std::memcpy(Values(p), chunk.values.data() + i * dim, sizeof(float) * dim);
    if (slot_floats > 0) {  // SGD's rows have none, and the chunk no slot array
      std::memcpy(Slots(p), chunk.slots.data() + i * slot_floats, sizeof(float) * slot_floats);
    }
    *Clock(p) = chunk.clocks[i];
    if (NeedsStepCount(config_.optimizer.kind)) *Step(p) = chunk.steps[i];
  });
  return Status::Ok();
}

}  // namespace het

#include "cc_ops/embedding/core/table_shard.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "cc_ops/common/hashing.h"
#include "cc_ops/embedding/core/wire_sizes.h"

namespace het {
namespace {

constexpr uint32_t kRowsPerBlock = 4096;

// Positive, so that 0 can mean "not seen yet" in a cache's request.
int64_t NewEpoch() { return static_cast<int64_t>(DrawId() >> 2) + 1; }

}  // namespace

Status TableShard::Create(const TableConfig& config, std::unique_ptr<TableShard>* out) {
  HET_RETURN_IF_ERROR(ValidateTableConfig(config));
  out->reset(new TableShard(config));
  return Status::Ok();
}

TableShard::TableShard(const TableConfig& config)
    : config_(config), num_slots_(NumSlots(config.optimizer.kind)), epoch_(NewEpoch()) {
  size_t float_bytes = sizeof(float) * state_width();
  clock_offset_ = (float_bytes + 7) & ~size_t{7};
  // Then the clock, Adam's step count, and the key (for export): the key in
  // the row costs exactly 8 bytes, where a growing side array cost up to 16.
  key_offset_ = clock_offset_ + 8 + (NeedsStepCount(config_.optimizer.kind) ? 8 : 0);
  row_bytes_ = key_offset_ + 8;
}

int TableShard::StripeOf(int64_t key) {
  // High bits: the index uses the low bits of the same mix.
  return static_cast<int>(Mix64(static_cast<uint64_t>(key)) >> 58);
}

char* TableShard::RowAt(const Stripe& stripe, uint32_t row) const {
  return stripe.blocks[row / kRowsPerBlock].get() + size_t{row % kRowsPerBlock} * row_bytes_;
}

void TableShard::PrefetchRow(const Stripe& stripe, int64_t key) const {
  const uint32_t row = stripe.index.Find(key);
  if (row == KeyIndex::kAbsent) return;
  const char* p = RowAt(stripe, row);
  __builtin_prefetch(p);
  __builtin_prefetch(p + row_bytes_ - 1);
}

char* TableShard::FindOrCreate(Stripe& stripe, int64_t key, bool* created) {
  uint32_t row = stripe.index.Find(key);
  *created = row == KeyIndex::kAbsent;
  if (!*created) return RowAt(stripe, row);
  row = stripe.rows;
  if (row % kRowsPerBlock == 0) {
    stripe.blocks.emplace_back(new char[size_t{kRowsPerBlock} * row_bytes_]);
  }
  ++stripe.rows;
  stripe.index.Insert(key, row);
  char* p = RowAt(stripe, row);
  *Key(p) = key;
  InitializeRow(config_.initializer, key, config_.dim, Values(p));
  InitializeSlots(config_.optimizer, config_.dim, Slots(p));
  *Clock(p) = 0;
  if (NeedsStepCount(config_.optimizer.kind)) *Step(p) = 0;
  rows_created_.fetch_add(1, std::memory_order_relaxed);
  return p;
}

Status TableShard::ReserveNewRows(const int64_t* keys, int64_t n,
                                  std::unique_ptr<RowReservation>* out) {
  if (config_.max_rows < 0) return Status::Ok();
  int64_t absent = 0;
  ForEachByStripe(keys, n, [&](Stripe& stripe, int32_t i) {
    absent += stripe.index.Find(keys[i]) == KeyIndex::kAbsent;
  });
  // Concurrent requests reserve before creating, so together they cannot
  // pass the limit; a key new to two of them is counted twice, which only
  // errs on the side of refusing.
  const int64_t before = reserved_rows_.fetch_add(absent);
  const int64_t held = Size();
  if (absent > 0 && held + before + absent > config_.max_rows) {
    reserved_rows_.fetch_sub(absent);
    return Status::ResourceExhausted(TableLabel(config_.name) + ": this shard holds " +
                                     std::to_string(held) + " rows and its limit is " +
                                     std::to_string(config_.max_rows) + "; the request would add " +
                                     std::to_string(absent) +
                                     " more, so nothing was changed (raise max_rows, add PS "
                                     "shards, or keep fewer distinct ids)");
  }
  out->reset(new RowReservation(&reserved_rows_, absent));
  return Status::Ok();
}

Status TableShard::Gather(const int64_t* keys, int64_t n, float* values) {
  HET_RETURN_IF_ERROR(CheckKeys(config_.name, config_.vocabulary_size, keys, n));
  std::unique_ptr<RowReservation> reservation;
  HET_RETURN_IF_ERROR(ReserveNewRows(keys, n, &reservation));
  const int dim = config_.dim;
  ForEachByStripe(keys, n, [&](Stripe& stripe, int32_t i) {
    bool created;
    char* p = FindOrCreate(stripe, keys[i], &created);
    std::memcpy(values + int64_t{i} * dim, Values(p), sizeof(float) * dim);
  });
  keys_checked_.fetch_add(n, std::memory_order_relaxed);
  rows_sent_.fetch_add(n, std::memory_order_relaxed);
  pull_requests_.fetch_add(1, std::memory_order_relaxed);
  bytes_received_.fetch_add(wire::GatherRequest(n), std::memory_order_relaxed);
  bytes_sent_.fetch_add(wire::GatherAnswer(n, dim), std::memory_order_relaxed);
  return Status::Ok();
}

Status TableShard::Read(const int64_t* keys, int64_t n, TableChunk* out) {
  HET_RETURN_IF_ERROR(CheckKeys(config_.name, config_.vocabulary_size, keys, n));
  std::unique_ptr<RowReservation> reservation;
  HET_RETURN_IF_ERROR(ReserveNewRows(keys, n, &reservation));
  const int dim = config_.dim;
  const size_t slot_floats = size_t(num_slots_) * dim;
  const bool stepped = NeedsStepCount(config_.optimizer.kind);
  out->keys.assign(keys, keys + n);
  out->values.resize(size_t(n) * dim);
  out->slots.resize(size_t(n) * slot_floats);
  out->clocks.resize(n);
  out->steps.resize(n);
  ForEachByStripe(keys, n, [&](Stripe& stripe, int32_t i) {
    bool created;
    char* p = FindOrCreate(stripe, keys[i], &created);
    std::memcpy(out->values.data() + size_t(i) * dim, Values(p), sizeof(float) * dim);
    if (slot_floats > 0) {  // SGD's rows have none, and no slot array to copy to
      std::memcpy(out->slots.data() + size_t(i) * slot_floats, Slots(p),
                  sizeof(float) * slot_floats);
    }
    out->clocks[i] = *Clock(p);
    out->steps[i] = stepped ? *Step(p) : 0;
  });
  pull_requests_.fetch_add(1, std::memory_order_relaxed);
  keys_checked_.fetch_add(n, std::memory_order_relaxed);
  rows_sent_.fetch_add(n, std::memory_order_relaxed);
  bytes_received_.fetch_add(wire::GatherRequest(n), std::memory_order_relaxed);
  bytes_sent_.fetch_add(wire::ReadAnswer(n, state_width()), std::memory_order_relaxed);
  return Status::Ok();
}

Status TableShard::Pull(const int64_t* keys, const int64_t* clocks, int64_t n,
                        int64_t read_staleness, bool with_slots, PulledRows* out) {
  HET_RETURN_IF_ERROR(CheckKeys(config_.name, config_.vocabulary_size, keys, n));
  std::unique_ptr<RowReservation> reservation;
  HET_RETURN_IF_ERROR(ReserveNewRows(keys, n, &reservation));
  // Values and slots are contiguous in a row, so a state is one copy.
  const int width = with_slots ? state_width() : config_.dim;
  // Stripes are visited out of request order, so stale rows are copied by
  // request position first and compacted afterwards.
  std::vector<uint8_t> stale(n, 0);
  std::vector<float> values_by_pos;
  std::vector<int64_t> clock_by_pos(n, 0);
  ForEachByStripe(keys, n, [&](Stripe& stripe, int32_t i) {
    bool created;
    char* p = FindOrCreate(stripe, keys[i], &created);
    const int64_t server_clock = *Clock(p);
    if (clocks[i] < 0 || (read_staleness >= 0 && server_clock - clocks[i] > read_staleness)) {
      if (values_by_pos.empty()) values_by_pos.resize(size_t(n) * width);
      stale[i] = 1;
      clock_by_pos[i] = server_clock;
      std::memcpy(values_by_pos.data() + size_t(i) * width, Values(p), sizeof(float) * width);
    }
  });
  out->positions.clear();
  out->values.clear();
  out->clocks.clear();
  for (int64_t i = 0; i < n; ++i) {
    if (!stale[i]) continue;
    out->positions.push_back(static_cast<int32_t>(i));
    out->clocks.push_back(clock_by_pos[i]);
    out->values.insert(out->values.end(), values_by_pos.begin() + size_t(i) * width,
                       values_by_pos.begin() + size_t(i + 1) * width);
  }
  const size_t m = out->positions.size();
  pull_requests_.fetch_add(1, std::memory_order_relaxed);
  keys_checked_.fetch_add(n, std::memory_order_relaxed);
  rows_sent_.fetch_add(m, std::memory_order_relaxed);
  bytes_received_.fetch_add(wire::PullRequest(n), std::memory_order_relaxed);
  bytes_sent_.fetch_add(wire::PullAnswer(m, width), std::memory_order_relaxed);
  return Status::Ok();
}

template <typename Apply>
Status TableShard::ApplyToRows(const int64_t* keys, const int64_t* counts, int64_t n, int width,
                               const Sender& sender, int64_t unanswered, float* out,
                               int64_t* clocks, Apply apply) {
  std::unique_ptr<RowReservation> reservation;
  HET_RETURN_IF_ERROR(ReserveNewRows(keys, n, &reservation));
  // First each row's update on a copy of its state: one that would make a
  // value or a slot non-finite (a huge gradient squared, say) refuses the
  // whole push before anything changes. The rows then take their copies,
  // or, where another push moved a row in between, the update again.
  const int state = state_width();
  const bool stepped = NeedsStepCount(config_.optimizer.kind);
  std::vector<float> next(size_t(n) * state);
  std::vector<int64_t> seen(n), steps(n);
  int64_t bad = -1;
  ForEachByStripe(keys, n, [&](Stripe& stripe, int32_t i) {
    float* copy = next.data() + size_t(i) * state;
    const uint32_t row = stripe.index.Find(keys[i]);
    if (row == KeyIndex::kAbsent) {
      InitializeRow(config_.initializer, keys[i], config_.dim, copy);
      InitializeSlots(config_.optimizer, config_.dim, copy + config_.dim);
      seen[i] = steps[i] = 0;
    } else {
      char* p = RowAt(stripe, row);
      std::memcpy(copy, Values(p), sizeof(float) * state);
      seen[i] = *Clock(p);
      steps[i] = stepped ? *Step(p) : 0;
    }
    apply(i, seen[i], copy, &steps[i]);
    // The first bad id in the request's order, as stripes visit out of it.
    if (!AllFinite(copy, state) && (bad < 0 || i < bad)) bad = i;
  });
  if (bad >= 0) return NonFiniteUpdate(TableLabel(config_.name), keys[bad]);
  uint64_t updates = 0;
  ForEachByStripe(keys, n, [&](Stripe& stripe, int32_t i) {
    bool created;
    char* p = FindOrCreate(stripe, keys[i], &created);
    if (*Clock(p) == seen[i]) {
      std::memcpy(Values(p), next.data() + size_t(i) * state, sizeof(float) * state);
      if (stepped) *Step(p) = steps[i];
    } else {
      // Another push moved the row between the passes: the update is taken
      // again on the row as it is now (the check above saw it before).
      int64_t step = stepped ? *Step(p) : 0;
      apply(i, *Clock(p), Values(p), &step);
      if (stepped) *Step(p) = step;
    }
    *Clock(p) += counts[i];
    updates += counts[i];
    if (stripe.records.workers() > 0) stripe.records.Pushed(sender, keys[i], *Clock(p));
    if (i < unanswered) return;
    if (out != nullptr) {
      std::memcpy(out + (i - unanswered) * width, Values(p), sizeof(float) * width);
    }
    if (clocks != nullptr) clocks[i - unanswered] = *Clock(p);
  });
  push_requests_.fetch_add(1, std::memory_order_relaxed);
  rows_pushed_.fetch_add(n, std::memory_order_relaxed);
  updates_applied_.fetch_add(updates, std::memory_order_relaxed);
  return Status::Ok();
}

Status TableShard::Push(const int64_t* keys, const float* grads, const int64_t* counts, int64_t n,
                        float learning_rate, float* values, int64_t* clocks) {
  const int dim = config_.dim;
  HET_RETURN_IF_ERROR(CheckPush(keys, grads, dim, counts, n, learning_rate, "gradient"));
  std::vector<float> mean(dim);
  HET_RETURN_IF_ERROR(ApplyToRows(keys, counts, n, dim, Sender(), 0, values, clocks,
                                  [&](int32_t i, int64_t, float* state, int64_t* step) {
                                    ApplyUpdates(config_.optimizer, learning_rate,
                                                 grads + int64_t{i} * dim, counts[i], dim, state,
                                                 state + dim, step, &mean);
                                  }));
  CountPushBytes(n, dim, /*delta=*/false, values != nullptr ? n : 0);
  return Status::Ok();
}

Status TableShard::PushDeltas(const int64_t* keys, const float* deltas, const int64_t* counts,
                              const int64_t* base_clocks, int64_t n, float learning_rate,
                              float* states, int64_t* clocks, const Sender& sender,
                              int64_t unanswered, int64_t* epoch) {
  const int width = state_width();
  HET_RETURN_IF_ERROR(CheckPush(keys, deltas, width, counts, n, learning_rate, "delta"));
  HET_RETURN_IF_ERROR(CheckDeltaPush(keys, deltas, base_clocks, n));
  if (unanswered < 0 || unanswered > n) {
    return Status::InvalidArgument(TableLabel(config_.name) + ": " + std::to_string(unanswered) +
                                   " unanswered rows in a push of " + std::to_string(n) +
                                   "; nothing was applied");
  }
  const int64_t met = this->epoch();
  if (epoch != nullptr) *epoch = met;
  if (SawOtherEpoch(sender, met)) {
    if (epoch == nullptr) {
      return Status::Aborted(TableLabel(config_.name) +
                             ": a table shard was restarted or restored since this cache's "
                             "copies were taken; its push was refused and nothing was changed");
    }
    // The answer's epoch tells the cache; its rows are not taken.
    const int64_t answered = states != nullptr ? n - unanswered : 0;
    if (states != nullptr) std::fill(states, states + answered * width, 0.0f);
    if (clocks != nullptr) std::fill(clocks, clocks + answered, int64_t{0});
    CountPushBytes(n, width, /*delta=*/true, answered);
    return Status::Ok();
  }
  SenderLog::Turn turn;
  HET_RETURN_IF_ERROR(AdmitRound(sender, &turn));
  if (turn.repeat()) {
    AnswerRepeat(keys, n, sender, unanswered, states, clocks);
    Requeue(sender, turn.lost_refreshes());
  } else {
    HET_RETURN_IF_ERROR(MergeDeltas(keys, deltas, counts, base_clocks, n, learning_rate, states,
                                    clocks, sender, unanswered));
  }
  // A push refreshes nothing; refreshes lost before it were queued again.
  turn.Done({});
  CountPushBytes(n, width, /*delta=*/true, states != nullptr ? n - unanswered : 0);
  return Status::Ok();
}

void TableShard::CountPushBytes(int64_t n, int width, bool delta, int64_t answered) {
  bytes_received_.fetch_add(wire::PushRequest(n, width, delta), std::memory_order_relaxed);
  bytes_sent_.fetch_add(
      delta ? wire::DeltaPushAnswer(answered, width) : wire::PushAnswer(answered, width),
      std::memory_order_relaxed);
}

Status TableShard::MergeDeltas(const int64_t* keys, const float* deltas, const int64_t* counts,
                               const int64_t* base_clocks, int64_t n, float learning_rate,
                               float* states, int64_t* clocks, const Sender& sender,
                               int64_t unanswered) {
  const int width = state_width();
  const OptimizerKind kind = config_.optimizer.kind;
  return ApplyToRows(keys, counts, n, width, sender, unanswered, states, clocks,
                     [&](int32_t i, int64_t clock, float* state, int64_t* step) {
                       // A clock behind the cache's copy (the table was
                       // restored since) counts as no other writer.
                       const float share = ConcurrentShare(kind, counts[i], clock - base_clocks[i]);
                       ApplyDelta(config_.optimizer, learning_rate, deltas + int64_t{i} * width,
                                  counts[i], config_.dim, state, state + config_.dim, step, share);
                     });
}

int64_t TableShard::Size() const {
  int64_t total = 0;
  for (const Stripe& stripe : stripes_) {
    std::lock_guard<std::mutex> lock(stripe.mu);
    total += stripe.rows;
  }
  return total;
}

size_t TableShard::MemoryBytes() const {
  size_t total = sizeof(*this) + Records().bytes + senders_.MemoryBytes();
  for (const Stripe& stripe : stripes_) {
    std::lock_guard<std::mutex> lock(stripe.mu);
    total += stripe.blocks.size() * size_t{kRowsPerBlock} * row_bytes_ +
             stripe.index.MemoryBytes() + stripe.blocks.capacity() * sizeof(void*);
  }
  return total;
}

TableCounters TableShard::Counters() const {
  TableCounters c;
  c.pull_requests = pull_requests_.load();
  c.keys_checked = keys_checked_.load();
  c.rows_sent = rows_sent_.load();
  c.rows_refreshed = rows_refreshed_.load();
  c.push_requests = push_requests_.load();
  c.rows_pushed = rows_pushed_.load();
  c.updates_applied = updates_applied_.load();
  c.rows_created = rows_created_.load();
  c.bytes_received = bytes_received_.load();
  c.bytes_sent = bytes_sent_.load();
  c.repeats = senders_.repeats();
  c.refused_epoch = refused_epoch_.load();
  c.refused_generation = senders_.stale_generations();
  c.refused_sequence = senders_.out_of_order();
  return c;
}

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
  int64_t total = 0;
  for (const Stripe& stripe : stripes_) {
    std::lock_guard<std::mutex> lock(stripe.mu);
    total += stripe.rows;
  }
  const size_t n = static_cast<size_t>(std::max<int64_t>(0, std::min(limit, total - offset)));
  out->keys.reserve(n);
  out->values.reserve(n * dim);
  out->slots.reserve(n * slot_floats);
  out->clocks.reserve(n);
  out->steps.reserve(n);
  int64_t seen = 0;
  for (const Stripe& stripe : stripes_) {
    std::lock_guard<std::mutex> lock(stripe.mu);
    const int64_t rows = stripe.rows;
    for (int64_t r = offset > seen ? offset - seen : 0; r < rows; ++r) {
      if (static_cast<int64_t>(out->keys.size()) >= limit) return Status::Ok();
      char* p = RowAt(stripe, static_cast<uint32_t>(r));
      out->keys.push_back(*Key(p));
      out->values.insert(out->values.end(), Values(p), Values(p) + dim);
      out->slots.insert(out->slots.end(), Slots(p), Slots(p) + slot_floats);
      out->clocks.push_back(*Clock(p));
      out->steps.push_back(NeedsStepCount(config_.optimizer.kind) ? *Step(p) : 0);
    }
    seen += rows;
  }
  return Status::Ok();
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
  HET_RETURN_IF_ERROR(ReserveNewRows(chunk.keys.data(), static_cast<int64_t>(n), &reservation));
  ForEachByStripe(chunk.keys.data(), static_cast<int64_t>(n), [&](Stripe& stripe, int32_t at) {
    const size_t i = static_cast<size_t>(at);
    bool created;
    char* p = FindOrCreate(stripe, chunk.keys[i], &created);
    std::memcpy(Values(p), chunk.values.data() + i * dim, sizeof(float) * dim);
    if (slot_floats > 0) {  // SGD's rows have none, and the chunk no slot array
      std::memcpy(Slots(p), chunk.slots.data() + i * slot_floats, sizeof(float) * slot_floats);
    }
    *Clock(p) = chunk.clocks[i];
    if (NeedsStepCount(config_.optimizer.kind)) *Step(p) = chunk.steps[i];
  });
  return Status::Ok();
}

void TableShard::Clear() {
  epoch_.store(NewEpoch());
  senders_.Clear();
  for (Stripe& stripe : stripes_) {
    std::lock_guard<std::mutex> lock(stripe.mu);
    stripe.index = KeyIndex();
    stripe.blocks.clear();
    stripe.rows = 0;
    stripe.records.Clear();
  }
}

}  // namespace het

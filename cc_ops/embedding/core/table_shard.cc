// A shard's rows: made on first touch in each stripe's arena, read
// (Gather, Read, Pull), sized, counted and cleared. Its pushes are in
// table_shard_push.cc, its chunks in table_shard_chunks.cc, the exchange in
// table_shard_sync.cc and the checks in table_shard_checks.cc.
#include "cc_ops/embedding/core/table_shard.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

#include "cc_ops/common/hashing.h"
#include "cc_ops/embedding/core/initial_state.h"
#include "cc_ops/embedding/core/wire_sizes.h"

namespace het {
namespace {

constexpr uint32_t kRowsPerBlock = 4096;

// Positive, so that 0 can mean "not seen yet" in a cache's request.
int64_t NewEpoch() { return static_cast<int64_t>(DrawId() >> 2) + 1; }

int64_t SteadySeconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

Status TableShard::Create(const TableConfig& config, std::unique_ptr<TableShard>* out) {
  HET_RETURN_IF_ERROR(ValidateTableConfig(config));
  out->reset(new TableShard(config));
  return Status::Ok();
}

TableShard::TableShard(const TableConfig& config)
    : config_(config),
      num_slots_(NumSlots(config.optimizer.kind)),
      initial_state_(InitialStateFingerprint(config.initializer, config.optimizer, config.dim)),
      epoch_(NewEpoch()),
      sample_state_(DrawId()),
      start_second_(config.seconds != nullptr ? config.seconds() : SteadySeconds()),
      marks_(config.ttl_seconds > 0 ? new ExpiryMarks(config.ttl_seconds) : nullptr),
      sketch_(config.admit_after > 1 ? new AdmissionSketch(static_cast<int>(config.admit_after))
                                     : nullptr) {
  size_t float_bytes = sizeof(float) * state_width();
  clock_offset_ = (float_bytes + 7) & ~size_t{7};
  // Then the clock, Adam's step count, and the key (for export): the key in
  // the row costs exactly 8 bytes, where a growing side array cost up to 16.
  key_offset_ = clock_offset_ + 8 + (NeedsStepCount(config_.optimizer.kind) ? 8 : 0);
  row_bytes_ = key_offset_ + 8 + (dropping() ? sizeof(RowUse) : 0);
  next_expiry_.store(start_second_ + ExpiryInterval(config_.ttl_seconds));
}

uint32_t TableShard::Second() const {
  const int64_t now = config_.seconds != nullptr ? config_.seconds() : SteadySeconds();
  return static_cast<uint32_t>(now - start_second_);
}

int TableShard::StripeOf(int64_t key) {
  // High bits: the index uses the low bits of the same mix.
  return static_cast<int>(Mix64(static_cast<uint64_t>(key)) >> 58);
}

char* TableShard::RowAt(const Stripe& stripe, uint32_t row) const {
  return stripe.blocks[row / kRowsPerBlock].get() + size_t{row % kRowsPerBlock} * row_bytes_;
}

void TableShard::HintRow(const Stripe& stripe, int64_t key) const {
  const uint32_t row = stripe.index.Find(key);
  if (row == KeyIndex::kAbsent) return;
  const char* p = RowAt(stripe, row);
  // Every cache line of the row: a row of 16 floats and their Adagrad slot
  // spans three.
  for (size_t at = 0; at < row_bytes_; at += 64) __builtin_prefetch(p + at);
  __builtin_prefetch(p + row_bytes_ - 1);
}

char* TableShard::RowFound(Stripe& stripe, uint32_t slot) {
  char* p = RowAt(stripe, slot);
  if (dropping()) Touch(Use(p), tick_.load(std::memory_order_relaxed));
  return p;
}

char* TableShard::FindOrCreate(Stripe& stripe, int64_t key, bool* created, uint32_t* slot) {
  uint32_t row = stripe.index.Find(key);
  *created = row == KeyIndex::kAbsent;
  if (slot != nullptr) *slot = row;
  if (!*created) return RowFound(stripe, row);
  if (!stripe.free.empty()) {
    row = stripe.free.back();
    stripe.free.pop_back();
  } else {
    row = stripe.slots;
    if (row % kRowsPerBlock == 0) {
      stripe.blocks.emplace_back(new char[size_t{kRowsPerBlock} * row_bytes_]);
    }
    ++stripe.slots;
  }
  stripe.index.Insert(key, row);
  if (slot != nullptr) *slot = row;
  MarkChanged(stripe, row);
  char* p = RowAt(stripe, row);
  *Key(p) = key;
  *Clock(p) = NewState(key, Values(p));
  // Adam's step count is the clock, as a cache takes its local steps.
  if (NeedsStepCount(config_.optimizer.kind)) *Step(p) = *Clock(p);
  if (dropping()) {
    *Use(p) = RowUse();
    Touch(Use(p), tick_.load(std::memory_order_relaxed));
  }
  rows_.fetch_add(1, std::memory_order_relaxed);
  rows_created_.fetch_add(1, std::memory_order_relaxed);
  return p;
}

char* TableShard::FindOrAdmit(Stripe& stripe, int64_t key, bool create, bool* created) {
  bool made = false;
  if (!create) {
    const uint32_t row = stripe.index.Find(key);
    if (row == KeyIndex::kAbsent) return nullptr;
  }
  char* p = FindOrCreate(stripe, key, &made);
  if (created != nullptr) *created = made;
  return p;
}

int64_t TableShard::NewState(int64_t key, float* state) const {
  MakeInitialState(config_.initializer, config_.optimizer, config_.dim, key, state);
  return clock_floor_.load(std::memory_order_relaxed);
}

void TableShard::DefaultState(float* state, int width) const {
  std::fill(state, state + config_.dim, 0.0f);
  if (width > config_.dim) InitializeSlots(config_.optimizer, config_.dim, state + config_.dim);
}

Status TableShard::Gather(const int64_t* keys, int64_t n, float* values, bool training,
                          const Parallel* parallel) {
  HET_RETURN_IF_ERROR(CheckKeys(config_.name, config_.vocabulary_size, keys, n));
  std::unique_ptr<RowReservation> room;
  HET_RETURN_IF_ERROR(ReserveNewRows(keys, n, ReadAdmit(training), n, &room));
  const int dim = config_.dim;
  ForEachByStripe(
      keys, n,
      [&](Stripe& stripe, int32_t i) {
        char* p = FindOrAdmit(stripe, keys[i], Creates(room.get(), i));
        if (p == nullptr) {
          DefaultState(values + int64_t{i} * dim, dim);
        } else {
          std::memcpy(values + int64_t{i} * dim, Values(p), sizeof(float) * dim);
        }
      },
      parallel);
  keys_checked_.fetch_add(n, std::memory_order_relaxed);
  rows_sent_.fetch_add(n, std::memory_order_relaxed);
  pull_requests_.fetch_add(1, std::memory_order_relaxed);
  bytes_received_.fetch_add(wire::GatherRequest(n), std::memory_order_relaxed);
  bytes_sent_.fetch_add(wire::GatherAnswer(n, dim), std::memory_order_relaxed);
  return Status::Ok();
}

Status TableShard::Read(const int64_t* keys, int64_t n, TableChunk* out) {
  HET_RETURN_IF_ERROR(CheckKeys(config_.name, config_.vocabulary_size, keys, n));
  std::lock_guard<std::mutex> hot(hot_mu_);  // one hot set replaces another
  std::unique_ptr<RowReservation> reservation;
  HET_RETURN_IF_ERROR(ReserveNewRows(keys, n, Admit::kAll, n, &reservation));
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
    if (dropping()) Use(p)->pinned = 1;
    std::memcpy(out->values.data() + size_t(i) * dim, Values(p), sizeof(float) * dim);
    if (slot_floats > 0) {  // SGD's rows have none, and no slot array to copy to
      std::memcpy(out->slots.data() + size_t(i) * slot_floats, Slots(p),
                  sizeof(float) * slot_floats);
    }
    out->clocks[i] = *Clock(p);
    out->steps[i] = stepped ? *Step(p) : 0;
  });
  if (dropping()) {
    // The last hot set's rows that left it may go again (pinned first, so
    // a row of both sets is never free to go in between).
    std::vector<int64_t> hot(keys, keys + n);
    std::sort(hot.begin(), hot.end());
    for (int64_t key : hot_keys_) {
      if (std::binary_search(hot.begin(), hot.end(), key)) continue;
      Stripe& stripe = stripes_[StripeOf(key)];
      std::lock_guard<std::mutex> lock(stripe.mu);
      const uint32_t row = stripe.index.Find(key);
      if (row != KeyIndex::kAbsent) Use(RowAt(stripe, row))->pinned = 0;
    }
    hot_keys_ = std::move(hot);
  }
  pull_requests_.fetch_add(1, std::memory_order_relaxed);
  keys_checked_.fetch_add(n, std::memory_order_relaxed);
  rows_sent_.fetch_add(n, std::memory_order_relaxed);
  bytes_received_.fetch_add(wire::GatherRequest(n), std::memory_order_relaxed);
  bytes_sent_.fetch_add(wire::ReadAnswer(n, state_width()), std::memory_order_relaxed);
  return Status::Ok();
}

Status TableShard::Pull(const int64_t* keys, const int64_t* clocks, int64_t n,
                        int64_t read_staleness, bool with_slots, PulledRows* out, bool training) {
  HET_RETURN_IF_ERROR(CheckKeys(config_.name, config_.vocabulary_size, keys, n));
  // Taken first: rows a Clear replaces during the pull go with the old
  // epoch, which the cache then finds changed at its next answer.
  out->epoch = epoch();
  std::unique_ptr<RowReservation> room;
  HET_RETURN_IF_ERROR(ReserveNewRows(keys, n, ReadAdmit(training), n, &room));
  // Values and slots are contiguous in a row, so a state is one copy.
  const int width = with_slots ? state_width() : config_.dim;
  // Stripes are visited out of request order, so stale rows are copied by
  // request position first and compacted afterwards.
  std::vector<uint8_t> stale(n, 0);
  std::vector<float> values_by_pos;
  std::vector<int64_t> clock_by_pos(n, 0);
  ForEachByStripe(keys, n, [&](Stripe& stripe, int32_t i) {
    char* p = FindOrAdmit(stripe, keys[i], Creates(room.get(), i));
    if (p == nullptr) {  // not admitted: the default state, which no cache keeps
      if (values_by_pos.empty()) values_by_pos.resize(size_t(n) * width);
      stale[i] = 1;
      clock_by_pos[i] = kNotAdmitted;
      DefaultState(values_by_pos.data() + size_t(i) * width, width);
      return;
    }
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
  bytes_sent_.fetch_add(wire::PullAnswer(m, width) + wire::EpochAnswer(),
                        std::memory_order_relaxed);
  return Status::Ok();
}

int64_t TableShard::Size() const { return rows_.load(); }

size_t TableShard::MemoryBytes() const {
  size_t total = sizeof(*this) + Records().bytes + senders_.MemoryBytes();
  for (const Stripe& stripe : stripes_) {
    std::lock_guard<std::mutex> lock(stripe.mu);
    total += stripe.blocks.size() * size_t{kRowsPerBlock} * row_bytes_ +
             stripe.index.MemoryBytes() + stripe.blocks.capacity() * sizeof(void*) +
             stripe.free.capacity() * sizeof(uint32_t) + stripe.changes.MemoryBytes();
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
  c.rows_evicted = rows_evicted_.load();
  c.rows_expired = rows_expired_.load();
  c.ids_not_admitted = ids_not_admitted_.load();
  c.updates_dropped = updates_dropped_.load();
  c.updates_refused_non_finite = updates_refused_.load();
  c.bytes_received = bytes_received_.load();
  c.bytes_sent = bytes_sent_.load();
  c.repeats = senders_.repeats();
  c.refused_epoch = refused_epoch_.load();
  c.refused_generation = senders_.stale_generations();
  c.refused_sequence = senders_.out_of_order();
  return c;
}

void TableShard::Clear() {
  // Locks in the order the requests take them: the hot set's (Read), a
  // sender's (a round, held while it reserves room), then the room's.
  std::lock_guard<std::mutex> hot(hot_mu_);
  hot_keys_.clear();
  epoch_.store(NewEpoch());
  senders_.Clear();
  // Alone: no eviction is choosing rows of the arenas cleared here.
  std::unique_lock<std::shared_mutex> alone(room_mu_, std::defer_lock);
  if (dropping()) alone.lock();
  tracking_.store(false);
  for (Stripe& stripe : stripes_) {
    std::lock_guard<std::mutex> lock(stripe.mu);
    // Stripe by stripe, as rows are counted: another client's rows made in
    // a stripe already cleared stay counted.
    rows_.fetch_sub(stripe.rows());
    stripe.index = KeyIndex();
    stripe.blocks.clear();
    stripe.slots = 0;
    stripe.free.clear();
    ++stripe.drops;
    stripe.records.Clear();
    stripe.changes.Forget();
  }
  // The sightings were of ids of the table emptied: a restored or rewritten
  // table admits from none (a request already deciding may count one).
  if (sketch_ != nullptr) sketch_->Clear();
  // The floor stays: a key made again after a restore starts past every
  // clock it had, as after an eviction.
}

}  // namespace het

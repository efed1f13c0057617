#include "cc_ops/embedding/core/worker_cache.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "cc_ops/embedding/core/deduplicate.h"
#include "cc_ops/embedding/core/initial_state.h"
#include "cc_ops/embedding/core/key_checks.h"
#include "cc_ops/embedding/core/wire_sizes.h"

namespace het {
namespace {

Status CheckUnique(const std::string& name, const int64_t* keys, int64_t n) {
  KeyIndex seen(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    if (seen.Insert(keys[i], 0) != 0 || seen.size() != static_cast<size_t>(i + 1)) {
      return Status::InvalidArgument(name + ": id " + std::to_string(keys[i]) +
                                     " appears twice where unique ids are required");
    }
  }
  return Status::Ok();
}

}  // namespace

Status WorkerCache::Create(const CacheConfig& config, std::unique_ptr<WorkerCache>* out) {
  HET_RETURN_IF_ERROR(ValidateCacheConfig(config));
  CacheConfig named = config;
  if (named.worker_id == Sender::kNoWorker) named.worker_id = DrawId();
  out->reset(new WorkerCache(named));
  return Status::Ok();
}

WorkerCache::WorkerCache(const CacheConfig& config) : WorkerCacheData(config) {}

WorkerCacheData::WorkerCacheData(const CacheConfig& config)
    : config_(config),
      width_(StateWidth(config.optimizer.kind, config.dim)),
      initial_state_(config.rebuilds_rows
                         ? InitialStateFingerprint(config.initializer, config.optimizer, config.dim)
                         : 0),
      // The index grows with the rows cached, as the arrays' pages do.
      order_(config.policy, config.capacity, config.pin_threshold),
      entries_(static_cast<size_t>(config.capacity)),
      rows_(size_t(config.capacity) * 2 * width_),
      generation_(NextGeneration()),
      delta_(size_t(width_)) {}

bool WorkerCache::FirstPassThrough() {
  std::lock_guard<std::mutex> lock(mu_);
  if (warned_pass_through_ || counters_.passed_through == 0) return false;
  warned_pass_through_ = true;
  return true;
}

Sender WorkerCache::sender() const {
  std::lock_guard<std::mutex> lock(mu_);
  return Sender{config_.worker_id, generation_};
}

Sender WorkerCache::RoundSender(int64_t shard) const {
  std::lock_guard<std::mutex> lock(mu_);
  return RoundSenderLocked(shard);
}

void WorkerCache::RoundSendersLocked(std::vector<Sender>* senders) const {
  if (senders == nullptr) return;
  senders->resize(config_.num_shards);
  for (int64_t s = 0; s < config_.num_shards; ++s) (*senders)[s] = RoundSenderLocked(s);
}

Sender WorkerCache::RoundSenderLocked(int64_t shard) const {
  Sender s{config_.worker_id, generation_};
  s.sequence = in_flight_ ? sequence_ : 0;
  s.epoch = shard < static_cast<int64_t>(epochs_.size()) ? epochs_[shard] : 0;
  return s;
}

size_t WorkerCache::MemoryBytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  // The arrays' untouched pages hold no memory: count the slots used.
  return sizeof(*this) + index_.MemoryBytes() +
         size_t(slots_used_) * (sizeof(Entry) + 2 * width_ * sizeof(float) + order_.NodeBytes()) +
         (prepared_.capacity() + unreported_evictions_.capacity()) * sizeof(int64_t) +
         prepared_slots_.capacity() * sizeof(int32_t) + first_seen_.MemoryBytes() +
         fetched_ahead_.MemoryBytes() + staged_.MemoryBytes() +
         spared_.capacity() * sizeof(uint32_t);
}

int64_t WorkerCache::BoundInForce(int64_t configured) const {
  if (config_.staleness_ramp <= 0) return configured;
  const int64_t ramp = static_cast<int64_t>(counters_.steps) / config_.staleness_ramp;
  return configured < 0 ? ramp : std::min(configured, ramp);
}

int64_t WorkerCache::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int64_t>(index_.size());
}

CacheCounters WorkerCache::Counters() const {
  std::lock_guard<std::mutex> lock(mu_);
  return counters_;
}

Status WorkerCache::BeginLookup(const int64_t* ids, int64_t n, std::vector<int64_t>* unique_keys,
                                std::vector<int32_t>* inverse) {
  // A batch the lookahead staged was checked (against the same settings)
  // and deduplicated then: the step looks each batch up once.
  const bool staged = staged_.Next(ids, n, unique_keys, inverse);
  if (!staged) HET_RETURN_IF_ERROR(CheckKeys(config_.table_name, config_.vocabulary_size, ids, n));
  if (old_timeline_) ClearLocked();
  if (!staged) Deduplicate(ids, n, prepared_.size(), &first_seen_, unique_keys, inverse);
  SlotsOf(unique_keys->data(), static_cast<int64_t>(unique_keys->size()), &prepared_slots_);
  counters_.lookups += n;
  counters_.unique_keys += unique_keys->size();
  prepared_ = *unique_keys;
  return Status::Ok();
}

void WorkerCache::HintSlot(int32_t slot) const {
  if (slot < 0) return;
  // The first lines of its state and pending delta (2 * width floats from
  // State(slot)); the hardware streams the rest of a wide row.
  const char* row = reinterpret_cast<const char*>(State(slot));
  const size_t bytes = std::min<size_t>(sizeof(float) * 2 * width_, 256);
  for (size_t line = 0; line < bytes; line += 64) __builtin_prefetch(row + line);
  __builtin_prefetch(&entries_[slot]);
  order_.HintLoad(slot);
}

void WorkerCache::SlotsOf(const int64_t* keys, int64_t n, std::vector<int32_t>* slots) const {
  slots->resize(n);
  for (int64_t i = 0; i < n; ++i) {
    if (i + kHintAhead < n) index_.HintLoad(keys[i + kHintAhead]);
    (*slots)[i] = SlotOf(keys[i]);
  }
}

bool WorkerCache::IsPrepared(const int64_t* keys, int64_t n) const {
  return static_cast<size_t>(n) == prepared_.size() &&
         std::equal(keys, keys + n, prepared_.begin());
}

Status WorkerCache::BatchSlots(const int64_t* keys, int64_t n, std::vector<int32_t>* slots) const {
  if (IsPrepared(keys, n)) {
    *slots = prepared_slots_;
    return Status::Ok();
  }
  HET_RETURN_IF_ERROR(CheckUnique(Name(), keys, n));
  SlotsOf(keys, n, slots);
  return Status::Ok();
}

void WorkerCache::RememberBatch(const int64_t* keys, int64_t n, const std::vector<int32_t>& slots) {
  if (!IsPrepared(keys, n)) prepared_.assign(keys, keys + n);
  prepared_slots_ = slots;
}

Status WorkerCache::Prepare(const int64_t* ids, int64_t n, LookupPlan* plan) {
  std::lock_guard<std::mutex> lock(mu_);
  HET_RETURN_IF_ERROR(BeginLookup(ids, n, &plan->unique_keys, &plan->inverse));
  const int64_t u = static_cast<int64_t>(plan->unique_keys.size());
  plan->read_staleness = BoundInForce(config_.read_staleness);
  plan->clocks.resize(u);
  for (int64_t i = 0; i < u; ++i) {
    plan->clocks[i] = prepared_slots_[i] < 0 ? -1 : entries_[prepared_slots_[i]].local_clock;
  }
  counters_.bytes_sent += wire::PullRequest(u, config_.num_shards);
  return Status::Ok();
}

float WorkerCache::PendingShare(int32_t slot, int64_t fresh_clock) const {
  return ConcurrentShare(config_.optimizer.kind, PendingCount(slot),
                         fresh_clock - entries_[slot].server_clock);
}

Status WorkerCache::CheckReturnedClocks(const int64_t* clocks, int64_t n, bool misses) const {
  // A miss may come back not admitted (row_admission.h); nothing else may.
  const int64_t least = misses ? kNotAdmitted : 0;
  for (int64_t r = 0; r < n; ++r) {
    if (clocks[r] < least) return Status::InvalidArgument(Name() + ": negative clock returned");
  }
  return Status::Ok();
}

Status WorkerCache::Pin(const int64_t* keys, int64_t n) {
  HET_RETURN_IF_ERROR(CheckKeys(config_.table_name, config_.vocabulary_size, keys, n));
  KeyIndex pinned(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    if (pinned.Find(keys[i]) == KeyIndex::kAbsent) pinned.Insert(keys[i], 0);
  }
  std::lock_guard<std::mutex> lock(mu_);
  std::swap(pinned_, pinned);
  // Cached rows whose pin changed take their new place; a batch's own rows
  // (out of the order between its lookup and its update) take it when they
  // go back.
  for (int64_t slot = 0; slot < slots_used_; ++slot) {
    const int32_t s = static_cast<int32_t>(slot);
    if (!order_.attached(s)) continue;
    const int64_t key = entries_[s].key;
    const bool was = pinned.size() > 0 && pinned.Find(key) != KeyIndex::kAbsent;
    const bool is = pinned_.size() > 0 && pinned_.Find(key) != KeyIndex::kAbsent;
    if (was == is) continue;
    const uint64_t touches = order_.touches(s);
    order_.Detach(s);
    AttachSlot(s, touches);
  }
  return Status::Ok();
}

int64_t WorkerCache::pinned_keys() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int64_t>(pinned_.size());
}

int64_t WorkerCache::Drop(const int64_t* keys, int64_t n) {
  std::lock_guard<std::mutex> lock(mu_);
  for (int64_t i = 0; i < n; ++i) {
    const int32_t slot = SlotOf(keys[i]);
    if (slot < 0) continue;  // not cached, or listed twice
    // Between steps every cached row is in the eviction order.
    if (order_.attached(slot)) order_.Detach(slot);
    if (HasPending(slot)) {
      outbox_.Add(keys[i], PendingDelta(slot), width_, PendingCount(slot),
                  entries_[slot].server_clock);
      ++counters_.dirty_evictions;
    }
    index_.Erase(keys[i]);
    if (config_.sync == SyncMode::kRefresh) unreported_evictions_.push_back(keys[i]);
    ++counters_.evictions;
    free_slots_.push_back(slot);
  }
  // A round in flight holds pushes too: the next exchange sends it again
  // before anything else goes.
  return static_cast<int64_t>(outbox_.size() + (in_flight_ ? ledger_.size() : 0));
}

std::vector<int64_t> WorkerCache::MostUsed(int64_t n) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::pair<uint64_t, int64_t>> held;  // (touches, key)
  held.reserve(index_.size());
  for (int64_t slot = 0; slot < slots_used_; ++slot) {
    const int64_t key = entries_[slot].key;
    if (SlotOf(key) != slot) continue;  // a victim's slot, not yet taken again
    held.emplace_back(order_.touches(static_cast<int32_t>(slot)), key);
  }
  const auto first = [](const std::pair<uint64_t, int64_t>& a,
                        const std::pair<uint64_t, int64_t>& b) {
    return a.first != b.first ? a.first > b.first : a.second < b.second;
  };
  const size_t keep = std::min(held.size(), static_cast<size_t>(std::max<int64_t>(n, 0)));
  std::partial_sort(held.begin(), held.begin() + keep, held.end(), first);
  std::vector<int64_t> keys(keep);
  for (size_t i = 0; i < keep; ++i) keys[i] = held[i].second;
  return keys;
}

void WorkerCache::Clear() {
  std::lock_guard<std::mutex> lock(mu_);
  ClearLocked();
}

void WorkerCache::ClearLocked() {
  index_.Clear();
  for (int64_t slot = 0; slot < slots_used_; ++slot) {
    if (order_.attached(static_cast<int32_t>(slot))) order_.Detach(static_cast<int32_t>(slot));
  }
  slots_used_ = 0;
  free_slots_.clear();
  outbox_ = Pushes();
  due_keys_.clear();
  unmerged_.clear();
  step_.Clear();
  ledger_ = Pushes();
  in_flight_ = false;
  sequence_ = 0;
  unreported_evictions_.clear();
  evictions_in_flight_ = 0;
  epochs_.clear();
  old_timeline_ = false;
  passing_.Clear();
  prepared_.clear();
  prepared_slots_.clear();
  fetched_ahead_.Clear();
  generation_ = NextGeneration();
}

}  // namespace het

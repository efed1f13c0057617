// This worker's updates that no shard has merged yet, where a read meets
// them: the outbox (rows evicted or passed through) and a round in flight.
// A fetched row takes back its key's outbox rows as pending updates
// (Reclaim); a row passed through and an evaluation read merge them into
// what they read (UnsentRows), as the shards will: every read sees every
// write this worker made, and nothing extra is sent.
#include "cc_ops/embedding/core/worker_cache_unsent.h"

#include <algorithm>
#include <cstring>

#include "cc_ops/embedding/core/worker_cache.h"

namespace het {
namespace {

// Merges a push's row of this worker (`delta`, `count` updates from base
// clock `base`) into a state read at shard clock `clock`, as its shard will
// merge it: the whole state, or only its dim values (then the constraint).
void MergePush(const CacheConfig& config, float learning_rate, const float* delta, int64_t count,
               int64_t base, int64_t clock, float* out, bool whole_state) {
  const float share =
      ConcurrentShare(config.optimizer.kind, count, std::max<int64_t>(0, clock - base));
  if (whole_state) {
    int64_t unused_step = 0;  // a copy's step count is its clock
    ApplyDelta(config.optimizer, learning_rate, delta, count, config.dim, out, out + config.dim,
               &unused_step, share);
    return;
  }
  for (int j = 0; j < config.dim; ++j) out[j] += share * delta[j];
  ApplyConstraint(config.optimizer.constraint, config.dim, out);  // as the merge would
}

}  // namespace

WorkerCache::PushChains::PushChains(std::vector<const Pushes*> lists) {
  for (const Pushes* list : lists) {
    if (list == nullptr) continue;
    for (size_t i = 0; i < list->size(); ++i) {
      const int64_t r = static_cast<int64_t>(rows.size());
      rows.push_back({list, i});
      next.push_back(-1);
      const uint32_t at = first_.Find(list->keys[i]);
      if (at == KeyIndex::kAbsent) {
        first_.Insert(list->keys[i], static_cast<uint32_t>(r));
      } else {
        // Walk to the chain's end: a key has few rows.
        int64_t end = at;
        while (next[end] >= 0) end = next[end];
        next[end] = r;
      }
    }
  }
}

int64_t WorkerCache::PushChains::First(int64_t key) const {
  if (rows.empty()) return -1;
  const uint32_t at = first_.Find(key);
  return at == KeyIndex::kAbsent ? -1 : int64_t{at};
}

// A round in flight's rows go first, as pushes carry them.
WorkerCache::UnsentRows::UnsentRows(const WorkerCache& cache, bool ledger, bool outbox)
    : cache_(cache),
      chains_({ledger && cache.in_flight_ ? &cache.ledger_ : nullptr,
               outbox ? &cache.outbox_ : nullptr}) {}

int64_t WorkerCache::UnsentRows::MergeInto(int64_t key, int64_t clock, float* out,
                                           bool whole_state) const {
  int64_t merged = 0;
  for (int64_t r = chains_.First(key); r >= 0; r = chains_.next[r]) {
    const Pushes& list = *chains_.rows[r].list;
    const size_t i = chains_.rows[r].i;
    const int64_t base = list.base_clocks[i], count = list.counts[i];
    // A round in flight may have been merged by its shard, its answer
    // lost: a row read at a clock that counts its updates is taken to have
    // them. With one writer that is exact; when other workers wrote the
    // row since, a round its shard never merged can look merged, and the
    // read misses it until the round is sent again (the next step or
    // flush). The outbox was never sent.
    if (&list == &cache_.ledger_ && clock >= base + count) continue;
    MergePush(cache_.config_, cache_.last_learning_rate_, list.deltas.data() + i * cache_.width_,
              count, base, clock, out, whole_state);
    merged += count;
  }
  return merged;
}

WorkerCache::OutboxRows::OutboxRows(const Pushes& outbox)
    : chains({&outbox}), taken(outbox.size(), 0) {}

void WorkerCache::OutboxRows::Finish(Pushes* outbox, int width) {
  if (std::find(taken.begin(), taken.end(), uint8_t{1}) != taken.end()) {
    taken.resize(outbox->size(), 0);  // rows the fill evicted since stay
    outbox->Remove(taken, width);
  }
}

void WorkerCache::Reclaim(int32_t slot, const float* fresh, int64_t clock, OutboxRows& unsent) {
  int64_t r = unsent.chains.First(entries_[slot].key);
  if (r < 0 || unsent.taken[r]) return;
  // The row was fetched without this worker's own updates of earlier
  // copies, still in the outbox (a round in flight held them back, or no
  // update has pushed them yet): they become the entry's pending updates
  // again, merged into the fetched row as a refresh merges them, in the
  // order they were made.
  unsent.taken[r] = 1;
  std::memcpy(delta_.data(), outbox_.deltas.data() + size_t(r) * width_, sizeof(float) * width_);
  entries_[slot].server_clock = outbox_.base_clocks[r];
  entries_[slot].local_clock = outbox_.base_clocks[r] + outbox_.counts[r];
  Rebase(slot, fresh, clock, delta_.data());
  for (r = unsent.chains.next[r]; r >= 0; r = unsent.chains.next[r]) {
    unsent.taken[r] = 1;
    MergePush(config_, last_learning_rate_, outbox_.deltas.data() + size_t(r) * width_,
              outbox_.counts[r], outbox_.base_clocks[r], clock, State(slot), /*whole_state=*/true);
    entries_[slot].local_clock += outbox_.counts[r];
  }
  if (HasPending(slot) && !AllFinite(State(slot), width_)) DropPending(slot, fresh);
}

}  // namespace het

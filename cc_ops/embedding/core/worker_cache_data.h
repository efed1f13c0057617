// What a WorkerCache holds: its slots, laid out for the hot path (a slot's
// key and clocks in one entry, its state and pending delta in one row),
// the outbox, the round in flight, the step's rows, the lookahead's staged
// batches and the counters. WorkerCache (worker_cache.h) is its only user,
// as a private base, so its methods name these fields directly; kept apart
// so that the cache's declaration reads as what it does, and the layout
// the hot path depends on reads in one place.
#ifndef HET_TF_EMBEDDING_CORE_WORKER_CACHE_DATA_H_
#define HET_TF_EMBEDDING_CORE_WORKER_CACHE_DATA_H_

#include <cstdint>
#include <cstring>
#include <deque>
#include <mutex>
#include <vector>

#include "cc_ops/embedding/core/cache_config.h"
#include "cc_ops/embedding/core/cache_outputs.h"
#include "cc_ops/embedding/core/eviction_order.h"
#include "cc_ops/embedding/core/key_index.h"
#include "cc_ops/embedding/core/staged_batches.h"
#include "cc_ops/embedding/core/zeroed_array.h"

namespace het {

class WorkerCacheData {
 protected:
  explicit WorkerCacheData(const CacheConfig& config);

  // A slot's row holds its state, then its base: the state the shard last
  // gave it (fetched, refreshed or acknowledged), from which its pending
  // delta follows (TakeDelta). Keeping the base rather than the delta lets
  // the cache compute a push's merge to the bit, so a push no other writer
  // met is acknowledged by its clock alone (docs/consistency.md).
  float* State(int32_t slot) { return rows_.data() + size_t(slot) * 2 * width_; }
  const float* State(int32_t slot) const { return rows_.data() + size_t(slot) * 2 * width_; }
  float* Base(int32_t slot) { return State(slot) + width_; }
  const float* Base(int32_t slot) const { return State(slot) + width_; }
  int64_t PendingCount(int32_t slot) const {
    return entries_[slot].local_clock - entries_[slot].server_clock;
  }
  // Whether the entry holds anything the shards lack: pending updates, or
  // under a 16-bit wire the rounding its last push left (its residual,
  // StartRound), which travels with its next push, or alone (no update, in
  // float32) when it is evicted or flushed.
  bool HasPending(int32_t slot) const {
    return PendingCount(slot) > 0 ||
           (config_.wire_type != RowType::kFloat32 &&
            std::memcmp(State(slot), Base(slot), sizeof(float) * width_) != 0);
  }

  const CacheConfig config_;
  const int width_;
  // The initial states this cache makes rows from (its requests name them),
  // 0 when it makes none.
  const uint64_t initial_state_;
  mutable std::mutex mu_;
  KeyIndex index_;
  EvictionOrder order_;
  KeyIndex pinned_;  // Pin's keys
  // Each slot's key and clocks together, and its state and base together
  // (State): a batch touches each slot's fields at once.
  struct Entry {
    int64_t key;
    int64_t server_clock;  // c_s
    int64_t local_clock;   // c_c
  };
  // Slots are taken in order, so those from slots_used_ on were never
  // touched and hold no memory (ZeroedArray): a cache costs what it holds.
  ZeroedArray<Entry> entries_;
  ZeroedArray<float> rows_;  // capacity * 2 * width_
  int64_t slots_used_ = 0;
  std::vector<int32_t> free_slots_;  // below slots_used_, emptied by Drop
  Pushes outbox_;                    // evicted with pending updates, not yet acknowledged
  uint64_t generation_ = 0;
  std::vector<int64_t> unreported_evictions_;  // kRefresh: since the last completed exchange
  size_t evictions_in_flight_ = 0;             // of those, sent by the last BeginExchange
  std::vector<int64_t> due_keys_;              // kRefresh: made due by Accumulate, not yet sent
  // Keys whose pending updates a refresh could not merge into the fresh
  // row (the copy would turn non-finite; the shards would refuse them
  // too): dropped, and named by the op that met them (EndRefusals).
  std::vector<int64_t> unmerged_;
  // Exactly once (docs/consistency.md): every exchange or push goes to every
  // shard as one round, numbered in this generation. The round's pushes are
  // its ledger: taken out of the pending updates when the round starts (an
  // entry's delta cleared and its server clock moved to its local clock, an
  // outbox row removed), and sent again, with the same number, until an
  // answer acknowledges them. Updates made meanwhile stay pending for the
  // next round.
  Pushes ledger_;           // the evicted rows lead, as in a push
  bool in_flight_ = false;  // the round `sequence_` awaits its answer
  // The type the ledger's rows travel in (row_codec.h): the wire's, or
  // float32 for a flush's round, whose rows are not rounded.
  RowType ledger_type_ = RowType::kFloat32;
  int64_t sequence_ = 0;
  std::vector<int64_t> epochs_;  // each shard's, from the first answer
  bool old_timeline_ = false;    // a shard's epoch changed: clear first
  // Rows the step's training lookups passed through, until its Accumulate
  // moves their updates to the outbox, which a later exchange pushes
  // (FillForTraining bounds them for steps with no update).
  struct PassedThrough {
    KeyIndex index;  // key -> place of its state and server clock
    std::vector<float> states;
    std::vector<int64_t> clocks;
    void Clear() {
      index.Clear();
      states.clear();
      clocks.clear();
    }
  } passing_;
  bool warned_pass_through_ = false;
  // The training lookups since the last update: the step's. A lookup that
  // finds the step open (the same layer called again before the update)
  // keeps the rows read so far as a last resort, evicted only when nothing
  // else is left, until the update releases them; a step's only lookup
  // keeps nothing. Lookups with no update after them (a step the loss
  // scale skipped) keep their rows so until the next update, the oldest
  // evicted first: the cache still turns over.
  struct StepRow {
    int32_t slot;
    int64_t key;
  };
  struct Step {
    bool open = false;
    std::vector<StepRow> read;  // by the lookups not yet held
    std::vector<StepRow> held;
    void Clear() {
      open = false;
      read.clear();
      held.clear();
    }
  } step_;
  std::vector<int64_t> prepared_;        // the unique keys of the last lookup
  std::vector<int32_t> prepared_slots_;  // their slots, -1 if not cached
  KeyIndex first_seen_;                  // Deduplicate's scratch
  // Keys the last prefetch inserted, until the next training lookup.
  KeyIndex fetched_ahead_;
  // The lookahead's staged batches (Stage), which the eviction order keeps
  // rows by.
  StagedBatches staged_;
  // A prefetch's rows to spare (TakeSlotSparing): a slot is spared while
  // its stamp is the current one, so that no marks need clearing.
  std::vector<uint32_t> spared_;
  uint32_t spare_stamp_ = 0;
  // FTRL's refresh recomputes a row from its slots with it; an entry has
  // pending updates only after an Accumulate has set it.
  float last_learning_rate_ = 0.0f;
  std::vector<float> delta_;  // PendingDelta's, width_ floats
  CacheCounters counters_;
};

}  // namespace het

#endif  // HET_TF_EMBEDDING_CORE_WORKER_CACHE_DATA_H_

// One parameter-server shard of an embedding table.
//
// Rows are created on first touch (or at an id's admit_after-th training
// read, row_admission.h) from a deterministic initializer and carry their
// optimizer slots and a clock: the number of updates applied to them. A
// shard with a row limit may evict rows, and one with a ttl expire them
// (row_eviction.h). Keys are spread over lock stripes so that many workers'
// pulls and pushes run in parallel; each stripe keeps its rows in a chunked
// arena, so rows never move once created and growth never copies the table.
#ifndef HET_TF_EMBEDDING_CORE_TABLE_SHARD_H_
#define HET_TF_EMBEDDING_CORE_TABLE_SHARD_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <vector>

#include "cc_ops/common/parallel.h"
#include "cc_ops/common/status.h"
#include "cc_ops/embedding/core/copy_records.h"
#include "cc_ops/embedding/core/key_checks.h"
#include "cc_ops/embedding/core/key_index.h"
#include "cc_ops/embedding/core/row_admission.h"
#include "cc_ops/embedding/core/row_changes.h"
#include "cc_ops/embedding/core/row_eviction.h"
#include "cc_ops/embedding/core/row_initializer.h"
#include "cc_ops/embedding/core/sender_log.h"
#include "cc_ops/embedding/core/sparse_optimizer.h"
#include "cc_ops/embedding/core/stripe_order.h"
#include "cc_ops/embedding/core/table_config.h"
#include "cc_ops/embedding/core/table_outputs.h"

namespace het {

class TableShard {
 public:
  static constexpr int kStripes = 64;

  static Status Create(const TableConfig& config, std::unique_ptr<TableShard>* out);

  const TableConfig& config() const { return config_; }
  const std::string& table_name() const { return config_.name; }
  int dim() const { return config_.dim; }
  int num_slots() const { return num_slots_; }
  int state_width() const { return StateWidth(config_.optimizer.kind, config_.dim); }

  // Values of every key, creating missing rows (with admission: a training
  // read's admitted ids; the others read zeros). Every read and push of a
  // row is a use of it, for an evicting shard's choice (row_eviction.h).
  // With `parallel` (as Push), a large request's stripes go to its threads.
  Status Gather(const int64_t* keys, int64_t n, float* values, bool training = true,
                const Parallel* parallel = nullptr);

  // The clock-checked read: clocks[i] is the local clock of the worker's
  // cached copy of keys[i], or -1 when it has none. A row is returned when it
  // is missing on the worker or when its server clock exceeds the worker's
  // clock by more than read_staleness (negative: never stale). With slots,
  // each row comes as its whole state (values then optimizer slots), for a
  // cache that takes the optimizer's steps locally. With admission, a miss
  // of an id not admitted comes back as the default state at kNotAdmitted.
  Status Pull(const int64_t* keys, const int64_t* clocks, int64_t n, int64_t read_staleness,
              bool with_slots, PulledRows* out, bool training = true);

  // A training step's exchange under sync="refresh" (exchange_wire.h):
  // the pushes the request carries are merged as PushDeltas merges them
  // (lean ones answered by their clocks alone); then the sender's evicted
  // copies leave its record, and the answer holds the pushes' rows, the
  // states of its misses (a row made for one by its clock alone if the
  // request names this shard's initial states) and the fresh states of its
  // copies past its read bound, all recorded at their clocks
  // (copy_records.h); a newer generation starts a new record. All or
  // nothing: the request is checked, and the rows it may create reserved,
  // before anything changes. Exactly once (sender_log.h): a repeated round
  // merges nothing and answers its pushes with the rows as they are, and its
  // lost refreshes again; an older generation's or out of order is refused.
  // A request that saw another epoch is answered with this one alone,
  // changing nothing: the cache then knows its copies are of an old table.
  Status Exchange(const uint8_t* request, size_t size, std::vector<uint8_t>* answer);
  // Drawn at making and clearing: a cache seeing it change knows its copies' record went.
  int64_t epoch() const { return epoch_.load(); }
  RecordSizes Records() const;

  // Applies grads[i] (the sum of counts[i] local gradients) with the
  // optimizer and advances the row's clock by counts[i]. When values or
  // clocks are not null they receive each row after its update.
  Status Push(const int64_t* keys, const float* grads, const int64_t* counts, int64_t n,
              float learning_rate, float* values, int64_t* clocks,
              const Parallel* parallel = nullptr);

  // A cache's push: merges deltas[i] (TakeDelta of counts[i] local steps)
  // with ApplyDelta and advances the clock by counts[i]. base_clocks[i] is
  // the row's clock when the cache took its copy: the updates since are
  // other writers', and set the share of the delta the merge keeps
  // (ConcurrentShare). States and clocks, when not null, receive each row's
  // state and clock after the merge, in order, but for the first
  // `unanswered` rows (the cache evicted them) and, with `lean` (a flag per
  // answered row), the states of rows no other writer reached since their
  // base clock, acknowledged by their clocks alone (docs/consistency.md). The
  // sender's recorded copies take the merged rows; other workers' copies
  // may go stale (copy_records.h). A sequenced sender's push is merged once,
  // as an exchange's are. `*epoch` receives the epoch the push met: one that
  // saw another merges nothing (its states and clocks are zeros), and the
  // cache learns that its copies belong to an old table. Without `epoch`
  // such a push is refused with Aborted. A round's update that would make a
  // row non-finite is refused alone: the row answered as is, its key in `refused`.
  Status PushDeltas(const int64_t* keys, const float* deltas, const int64_t* counts,
                    const int64_t* base_clocks, int64_t n, float learning_rate, float* states,
                    int64_t* clocks, const Sender& sender, int64_t unanswered,
                    int64_t* epoch = nullptr, uint8_t* lean = nullptr,
                    std::vector<int64_t>* refused = nullptr);

  int64_t Size() const;
  size_t BytesPerRow() const { return row_bytes_; }
  size_t MemoryBytes() const;  // arena, index and bookkeeping, for the memory report
  TableCounters Counters() const;
  // Null unless admit_after > 1: what checkpoints keep of it (row_admission.h).
  AdmissionSketch* admission_sketch() { return sketch_.get(); }

  // The whole state of each key's row (created on first touch), in key
  // order: a replicated hot block takes its rows this way (docs/fae.md). A
  // shard that drops rows keeps them, the hot set, until the next Read.
  Status Read(const int64_t* keys, int64_t n, TableChunk* out);
  // Rows [offset, offset + limit) in a stable order; the order only holds
  // while no rows are created, so export after flushing and before training on.
  Status Export(int64_t offset, int64_t limit, TableChunk* out) const;
  // Inserts or overwrites rows; all-or-nothing on validation errors.
  Status Import(const TableChunk& chunk);
  // Drops every row and copy record, as before a restore, and draws a new
  // epoch; changes are no longer tracked.
  void Clear();

  // Incremental checkpoints (row_changes.h, table_shard_changes.cc).
  // ForgetChanges starts tracking changes or drops those tracked (a full
  // checkpoint's or a restore's cut). TakeChanges hands out the keys of
  // rows written since (and since a Take whose checkpoint was not `kept`)
  // held now, and of rows dropped since not held now; false, and nothing,
  // when not whole (untracked since made or cleared, or more drops than a
  // stripe keeps): the checkpoint must then be full.
  void ForgetChanges();
  bool TakeChanges(bool kept, std::vector<int64_t>* changed, std::vector<int64_t>* dropped);
  // Each held key's whole row (any order); keys not held go to `absent`.
  Status ReadHeld(const int64_t* keys, int64_t n, TableChunk* out, std::vector<int64_t>* absent);
  // Drops the rows of the keys held: a restored chain's dropped rows.
  Status Erase(const int64_t* keys, int64_t n);
  // Fault injection for tests: runs (a copy of) f between a push's passes.
  void SetBetweenPushPasses(std::function<void()> f) { between_push_passes_ = std::move(f); }

 private:
  struct Stripe {
    mutable std::mutex mu;
    KeyIndex index;
    std::vector<std::unique_ptr<char[]>> blocks;
    uint32_t slots = 0;          // arena slots ever taken
    std::vector<uint32_t> free;  // evicted rows' slots, taken first
    uint64_t drops = 0;          // rows ever dropped: while it stays, keys keep their slots
    CopyRecords records;         // the workers' copies of this stripe's rows
    RowChanges changes;          // tracked only while tracking_
    int64_t rows() const { return int64_t{slots} - static_cast<int64_t>(free.size()); }
  };

  explicit TableShard(const TableConfig& config);

  // Reserves room for the rows a request would create (its keys not held):
  // past max_rows it fails, or, evicting, evicts the rows it needs first;
  // counts the request as a tick of the use clock. The guard returned holds
  // the room; an evicting shard's also the room lock: shared while the
  // request runs (no row it found is evicted under it), or alone if it evicted.
  class RowReservation {
   public:
    static constexpr uint8_t kCreates = 1, kSighted = 2;
    explicit RowReservation(std::atomic<int64_t>* reserved) : reserved_(reserved) {}
    ~RowReservation() { reserved_->fetch_sub(rows); }
    int64_t rows = 0;
    // With admission, per id: kCreates, the request makes its row; kSighted,
    // it counts as a sighting once the request is accepted (empty: all make).
    std::vector<uint8_t> create;
    std::shared_lock<std::shared_mutex> shared;
    std::unique_lock<std::shared_mutex> alone;

   private:
    std::atomic<int64_t>* reserved_;
  };
  // How a request's reads make rows: every id not held (kAll, a table that
  // does not admit ids, and restores and hot blocks), only the admitted ids
  // of a training read (kTraining), or none (kNone, evaluation).
  enum class Admit { kAll, kTraining, kNone };
  Admit ReadAdmit(bool training) const;
  // keys[0, reads) are read as `admit` says; the rest are pushed (no row made
  // on an admitting table). A restore (!may_evict) fails past the limit.
  Status ReserveNewRows(const int64_t* keys, int64_t n, Admit admit, int64_t reads,
                        std::unique_ptr<RowReservation>* out, bool may_evict = true);
  void DecideAdmission(const int64_t* keys, int64_t reads, Admit admit,
                       const std::vector<uint8_t>& absent, RowReservation* room);
  void CountSightings(const int64_t* keys, const RowReservation& room);  // once accepted
  static bool Creates(const RowReservation* room, int64_t i);            // the i-th id's row
  // With the room lock held alone: drops rows unused for longer than the ttl
  // (not `keys`, pinned rows or rows a worker holds a copy of).
  void Expire(const int64_t* keys, int64_t n);
  bool ExpiryDue();         // whether the next sweep for expired rows is due (then this caller's)
  uint32_t Second() const;  // the shard's clock, in seconds since it was made
  // With the room lock held alone: evicts `need` rows, none the request's own
  // `keys`, pinned or copied by a worker; fails changing nothing if fewer can go.
  Status EvictFor(const int64_t* keys, int64_t n, int64_t need);
  // Evictable rows from every stripe, or a sample of about `want` of them.
  void FindCandidates(const KeyIndex& own, int64_t want, std::vector<EvictionCandidate>* out);
  bool Evictable(const Stripe& stripe, uint32_t slot, const KeyIndex& own) const;
  // Drops the row in `slot`, counted in `counter` (evicted, expired) if any.
  void EvictRow(Stripe& stripe, uint32_t slot, std::atomic<uint64_t>* counter);

  static int StripeOf(int64_t key);
  char* RowAt(const Stripe& stripe, uint32_t row) const;
  void HintRow(const Stripe& stripe, int64_t key) const;  // starts loading key's row, if held
  // Finds or creates the row of key (its slot in `*slot`); stripe locked.
  char* FindOrCreate(Stripe& stripe, int64_t key, bool* created, uint32_t* slot = nullptr);
  char* RowFound(Stripe& stripe, uint32_t slot);     // a found row, touched as a use
  void MarkChanged(Stripe& stripe, uint32_t slot) {  // the row in `slot` was written
    if (tracking_.load(std::memory_order_relaxed)) stripe.changes.Changed(slot);
  }
  void AppendRow(char* p, TableChunk* out) const;  // the row's whole state
  // The row of key, created if `create` (then *created); null if it is not
  // held and not created (the caller reads the default row).
  char* FindOrAdmit(Stripe& stripe, int64_t key, bool create, bool* created = nullptr);
  // The default row's state: zeros, and the optimizer's initial slots.
  void DefaultState(float* state, int width) const;
  // The state (values and fresh slots) a new row of `key` starts with, and
  // its clock: the clock floor, past every clock an evicted row had, so a
  // worker's clock of an old copy never passes for fresh.
  int64_t NewState(int64_t key, float* state) const;
  // Calls visit(stripe, i) for every position i, grouped by stripe, the
  // stripe's lock held, so that each stripe is locked once a request. With
  // `parallel`, stripes run at once (StripeOrder::ForEach): visit may write
  // only what position i or its stripe owns. `hint`: load rows ahead.
  template <typename Visit>
  void ForEachByStripe(const int64_t* keys, int64_t n, Visit visit,
                       const Parallel* parallel = nullptr, bool hint = true);

  float* Values(char* row) const { return reinterpret_cast<float*>(row); }
  float* Slots(char* row) const { return reinterpret_cast<float*>(row) + config_.dim; }
  int64_t* Clock(char* row) const { return reinterpret_cast<int64_t*>(row + clock_offset_); }
  int64_t* Step(char* row) const { return reinterpret_cast<int64_t*>(row + clock_offset_ + 8); }
  int64_t* Key(char* row) const { return reinterpret_cast<int64_t*>(row + key_offset_); }
  // An evicting shard's use of the row, after its key.
  RowUse* Use(char* row) const { return reinterpret_cast<RowUse*>(row + key_offset_ + 8); }
  bool evicting() const { return config_.on_full == OnFull::kEvict; }
  // Whether rows may leave: then the room lock and RowUse are kept.
  bool dropping() const { return evicting() || config_.ttl_seconds > 0; }
  bool admitting() const { return config_.admit_after > 0; }
  // A free slot's clock: no row's clock is negative.
  static constexpr int64_t kFreeSlot = -1;

  // Checks a push's learning rate, counts (at least `least_count`) and values before any change.
  Status CheckPush(const int64_t* keys, const float* values, int width, const int64_t* counts,
                   int64_t n, float learning_rate, const char* what, int64_t least_count) const;
  // Checks what only a delta push carries: base clocks and squared-
  // gradient changes that are not negative.
  Status CheckDeltaPush(const int64_t* keys, const float* deltas, const int64_t* base_clocks,
                        int64_t n) const;
  // The body of both pushes: reserves new rows; calls apply(i, clock, state,
  // step) on a copy of each key's row (its clock before the update, values,
  // slots, step count), refusing the push if any turns non-finite (a round:
  // that row's update alone, its key to `refused`); then, under the stripe's
  // lock, the row takes its copy, or, moved since, a new one made alike
  // unless that turns non-finite (refused alike); advances its clock by
  // counts[i]; copies its first `width` floats and clock to out and clocks
  // from `unanswered` on, flagging in `lean` those no other writer reached
  // since lean_base_clocks[i]; tells the copy records and changes; counts
  // the push. An exchange reserves its pushes' rows with its misses'. With
  // `parallel`, apply runs on several threads at once.
  template <typename Apply>
  Status ApplyToRows(const int64_t* keys, const int64_t* counts, int64_t n, int width,
                     const Sender& sender, int64_t unanswered, float* out, int64_t* clocks,
                     bool reserved, const int64_t* lean_base_clocks, uint8_t* lean,
                     std::vector<int64_t>* refused, const Parallel* parallel, Apply apply);
  // A push's bytes as the op's tensors carry them, `answered` rows back.
  void CountPushBytes(int64_t n, int width, bool delta, int64_t answered, int64_t lean);
  // PushDeltas' merge, after its checks (`lean` as there; *lean_rows
  // counts the rows flagged).
  Status MergeDeltas(const int64_t* keys, const float* deltas, const int64_t* counts,
                     const int64_t* base_clocks, int64_t n, float learning_rate, float* states,
                     int64_t* clocks, const Sender& sender, int64_t unanswered, bool reserved,
                     uint8_t* lean = nullptr, int64_t* lean_rows = nullptr,
                     std::vector<int64_t>* refused = nullptr);
  // An exchange's read half, checked and its new rows reserved: drops the
  // evicted copies from the sender's record, answers its misses (with
  // `rebuild`, a row made for one by its clock alone) and queued refreshes,
  // and records them.
  void Serve(const Sender& sender, const std::vector<int64_t>& misses,
             const std::vector<int64_t>& evicted, int64_t read_staleness, bool rebuild,
             const RowReservation* room, SyncedRows* out);
  // A repeat's sender never got the last answer: its refreshes are queued
  // again and the copies of its misses, never taken, forgotten.
  void TakeBackLost(const Sender& sender, const SenderLog::Turn& turn);
  // A repeated round's pushes: nothing is merged and no row is made; the
  // rows from `unanswered` on are answered whole as they are now (an id not
  // held at kNotAdmitted), and the sender's record takes them.
  void AnswerRepeat(const int64_t* keys, int64_t n, const Sender& sender, int64_t unanswered,
                    float* states, int64_t* clocks);
  // Whether the sender saw another epoch than `epoch` (refused, no merge).
  bool SawOtherEpoch(const Sender& sender, int64_t epoch);
  // Admits a sequenced sender's round (an unsequenced one passes as new).
  Status AdmitRound(const Sender& sender, SenderLog::Turn* turn);

  TableConfig config_;
  int num_slots_;
  uint64_t initial_state_;  // InitialStateFingerprint of config_: what requests name to rebuild
  size_t clock_offset_, key_offset_, row_bytes_;
  std::array<Stripe, kStripes> stripes_;
  std::atomic<int64_t> epoch_;
  SenderLog senders_;
  std::atomic<bool> tracking_{false};  // from the first ForgetChanges until Clear
  std::atomic<int64_t> reserved_rows_{0};
  std::atomic<int64_t> rows_{0};
  // Evicting shards only: the room lock (RowReservation), the use clock, the
  // largest clock of any row evicted, which a new row starts from (a key's
  // clock never goes back, Clear or not), and the sampler's generator.
  std::shared_mutex room_mu_;
  std::atomic<int64_t> tick_{0};
  std::atomic<int64_t> clock_floor_{0};
  uint64_t sample_state_;
  int64_t start_second_;
  std::atomic<int64_t> next_expiry_{0};
  std::unique_ptr<ExpiryMarks> marks_;  // with a ttl only
  std::mutex hot_mu_;                   // for hot_keys_: the last Read's keys, pinned
  std::vector<int64_t> hot_keys_;
  std::unique_ptr<AdmissionSketch> sketch_;  // admit_after > 1 only
  std::function<void()> between_push_passes_;
  std::atomic<uint64_t> pull_requests_{0}, keys_checked_{0}, rows_sent_{0}, rows_refreshed_{0},
      push_requests_{0}, rows_pushed_{0}, updates_applied_{0}, rows_created_{0}, bytes_received_{0},
      bytes_sent_{0}, refused_epoch_{0}, rows_evicted_{0}, rows_expired_{0}, ids_not_admitted_{0},
      updates_dropped_{0}, updates_refused_{0};
};

template <typename Visit>
void TableShard::ForEachByStripe(const int64_t* keys, int64_t n, Visit visit,
                                 const Parallel* parallel, bool hint) {
  std::vector<uint8_t> stripe_of(n);
  for (int64_t i = 0; i < n; ++i) stripe_of[i] = static_cast<uint8_t>(StripeOf(keys[i]));
  const StripeOrder order(stripe_of, kStripes);
  order.ForEach(parallel, [&](int s) {
    Stripe& stripe = stripes_[s];
    std::lock_guard<std::mutex> lock(stripe.mu);
    // Cold rows at random: buckets load kAhead keys early, rows half as early.
    constexpr int32_t kAhead = kHintAhead;
    const int32_t end = order.end(s);
    for (int32_t k = order.begin(s); k < end; ++k) {
      if (hint && k + kAhead < end) stripe.index.HintLoad(keys[order.at(k + kAhead)]);
      if (hint && k + kAhead / 2 < end) HintRow(stripe, keys[order.at(k + kAhead / 2)]);
      visit(stripe, order.at(k));
    }
  });
}

}  // namespace het

#endif  // HET_TF_EMBEDDING_CORE_TABLE_SHARD_H_

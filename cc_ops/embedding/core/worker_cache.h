// A worker's cache of hot rows with HET's clock-checked consistency.
//
// Each entry holds a row's state (its values and the table optimizer's
// slots), the server clock c_s it was fetched at, its local clock c_c = c_s +
// local updates, and the pending delta: what those local updates changed in
// every field of the state, not yet pushed. Local updates follow the table's
// own optimizer, so a cached row moves the way the shard will move it.
//
// A training lookup syncs in one of two ways (CacheConfig::sync):
// - kRefresh: one exchange a step with each shard (exchange_wire.h).
//   BeginExchange writes each shard's request: the pushes the last
//   Accumulate made due, the evictions since the last exchange and the
//   keys not cached; the shards merge the pushes and answer with their rows,
//   the missing rows and fresh states of every copy of this worker that went
//   past the read bound (copy_records.h); EndExchange takes the answers. A
//   hit costs no bytes, and a step's pushes ride with the next step's
//   request.
//   With a lookahead, the input pipeline stages each batch's ids before the
//   step before it runs (Stage). A step's exchange then splits in two: its
//   own (BeginExchange with carry_updates false: only the ids not cached,
//   normally none) and a prefetch for the next batch (BeginPrefetch,
//   EndPrefetch) that carries the pushes and evictions and inserts the next
//   batch's missing rows, while the step computes.
// - kCheck, HET's: Prepare (every unique key goes with its clock), the
//   shards' Pull, then Complete (only missing or stale rows come back); an
//   update runs as Accumulate (local step, pushes due by the write bound),
//   the shards' PushDeltas, then AckPush.
// Evaluation lookups always check.
// The halves are separate calls because in a cluster the shards are on
// other machines and the transfers in between are TensorFlow's.
#ifndef HET_TF_EMBEDDING_CORE_WORKER_CACHE_H_
#define HET_TF_EMBEDDING_CORE_WORKER_CACHE_H_

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "cc_ops/common/status.h"
#include "cc_ops/embedding/core/cache_config.h"
#include "cc_ops/embedding/core/cache_outputs.h"
#include "cc_ops/embedding/core/copy_records.h"
#include "cc_ops/embedding/core/key_index.h"
#include "cc_ops/embedding/core/row_admission.h"
#include "cc_ops/embedding/core/worker_cache_data.h"

namespace het {

// Its fields and their layout are WorkerCacheData's (worker_cache_data.h).
class WorkerCache : private WorkerCacheData {
 public:
  static Status Create(const CacheConfig& config, std::unique_ptr<WorkerCache>* out);

  const CacheConfig& config() const { return config_; }
  const std::string& table_name() const { return config_.table_name; }
  int dim() const { return config_.dim; }
  // Floats of a row's state: what training pulls and pushes carry per row.
  int width() const { return width_; }
  size_t MemoryBytes() const;
  int64_t size() const;
  CacheCounters Counters() const;

  // Who this cache is to the shards: its worker id and current generation.
  Sender sender() const;
  // What the current round's messages carry to shard s: the sender with the
  // round's number (0 when no round is in flight) and the epoch it last saw.
  Sender RoundSender(int64_t shard) const;
  // True once, the first time it is asked after a row passed through (the kernels warn).
  bool FirstPassThrough();

  // Deduplicates ids and gives the clocks to send with them.
  Status Prepare(const int64_t* ids, int64_t n, LookupPlan* plan);

  // A training lookup under SyncMode::kRefresh: deduplicates ids and
  // writes each shard's request. The pushes it carries stay pending, and
  // the evictions it reports listed, until EndExchange takes the answers,
  // so a failed exchange sends them again.
  // With carry_updates false the request carries only the keys not cached:
  // a prefetch later in the step carries the pushes and evictions.
  Status BeginExchange(const int64_t* ids, int64_t n, ExchangePlan* plan,
                       bool carry_updates = true);
  // Takes the shards' answers (answers[s], sizes[s] bytes, 4-byte aligned)
  // to the last BeginExchange of `unique_keys`: the pushes' rows, then the
  // fresh states of copies past the read bound (their pending deltas
  // re-applied), then the missing rows, inserted; writes all u unique rows
  // to rows_out. A malformed or mismatched answer changes nothing. A shard
  // whose epoch changed since the last exchange lost its record of this
  // cache's copies (restarted or restored): the step fails with Aborted,
  // changing nothing, and the next lookup clears the cache first.
  Status EndExchange(const int64_t* unique_keys, int64_t u, const uint8_t* const* answers,
                     const size_t* sizes, int64_t shards, float* rows_out);

  // The input pipeline's lookahead: the ids of a batch that a training step
  // will look up soon, in the order the steps take them. A bounded number
  // is kept (StagedBatches); they are checked here, where a bad id names
  // the pipeline that sent it. A row they read is evicted only when no
  // other can be, the one read furthest ahead first.
  Status Stage(const int64_t* ids, int64_t n);

  // The prefetch of a step whose lookup (BeginExchange, EndExchange) of
  // `current` ids is done: finds the batch staged after `current` (none if
  // `current` was not staged, or nothing was staged after it) and writes
  // each shard's request: the pushes due, the evictions since the last
  // exchange and that batch's keys not cached. plan->inverse stays empty.
  Status BeginPrefetch(const int64_t* current, int64_t n, ExchangePlan* plan);
  // Takes the shards' answers to the last BeginPrefetch of `unique_keys`:
  // acknowledges the pushes, refreshes stale copies and inserts the missing
  // rows, never in place of a row of the step's own batch, whose update
  // comes next. Rows with no room are dropped (and reported as evicted);
  // the next lookup fetches them.
  Status EndPrefetch(const int64_t* unique_keys, int64_t u, const uint8_t* const* answers,
                     const size_t* sizes, int64_t shards);

  // Takes the shards' answer for plan.unique_keys (clocks at distinct
  // `positions`, whole states in training, bare rows out of it); writes all
  // u unique rows to `rows_out`. In training, missing rows are inserted and
  // stale ones refreshed with their pending deltas re-applied; an evicted
  // row's pending updates go to the outbox, for the next pushes; a missing
  // row with no room beside the batch's passes through (Accumulate). Out of
  // training nothing changes. `epochs` (num_shards, if given): the shards'
  // at the pull; one changed fails it as EndExchange.
  Status Complete(const int64_t* unique_keys, int64_t u, const int32_t* positions, int64_t m,
                  const float* states, const int64_t* clocks, bool training, float* rows_out,
                  const int64_t* epochs = nullptr);

  // One local update per unique key cached, or passed through by the last
  // lookup: the entry takes the table optimizer's step with its
  // own copy of the slots, so later reads see this worker's own writes as the
  // shard will apply them, and every field's change joins the pending delta.
  // A row passed through takes its step on the state it was read with and
  // joins the outbox. Under kCheck `due` receives the outbox and every entry
  // past the write bound as a round to push now (RoundSender), or the round
  // still in flight, again; under kRefresh `due` stays empty and they go
  // with the next exchange. An update that would make a row or a slot
  // non-finite is refused before anything changes.
  // `senders`, when given, receives the round's sender for each shard.
  // A key neither cached nor passed through (a later lookup of the same
  // step evicted it, or no lookup read it) takes no step here: its place
  // among the keys goes to `uncached`, for the caller to push its gradient
  // to the shards as the path without a cache does. Without `uncached`
  // such a key fails the whole update (FailedPrecondition).
  Status Accumulate(const int64_t* keys, int64_t n, const float* grads, float learning_rate,
                    Pushes* due, std::vector<Sender>* senders = nullptr,
                    std::vector<int64_t>* uncached = nullptr);

  // Ends the round in flight, whose pushes `keys` and `counts` must be (a
  // push of no rows needs no round). With clocks from the shards (one for
  // each ledger row that was cached, in order: the evicted ones lead the
  // push and get none), an entry still cached becomes the server's row and
  // slots (`states`, in order, for the rows not flagged in `lean`; a lean
  // row's is the entry's already), with any updates made since merged back.
  // `epochs`, when given, are the shards' as their answers carried them
  // (num_shards): the first push of a cache that checks its keys learns
  // them; a shard whose epoch changed since merged nothing, and the
  // acknowledgement fails with Aborted as an exchange's would. Keys whose
  // update a shard refused end the round too (their copies the shards'
  // rows), then fail it once, naming them, as EndExchange and EndPrefetch do.
  Status AckPush(const int64_t* keys, int64_t n, const int64_t* counts, const float* states,
                 const int64_t* clocks, int64_t answered, const int64_t* epochs = nullptr,
                 const uint8_t* lean = nullptr, const std::vector<int64_t>& refused = {});

  // Everything pending, for a flush before checkpoints and at the end, as
  // a round of its own (its sender: RoundSender). While an earlier round is
  // still in flight, that round's pushes come out instead and the result is
  // true: flush again once they are acknowledged.
  bool Flush(Pushes* out, std::vector<Sender>* senders = nullptr);

  // Makes `keys` the pinned rows (FAE's hot rows under
  // ParameterServerStrategy, docs/fae.md), replacing the last set: once
  // cached, a pinned row is never evicted, under any policy (a row that
  // finds only pinned rows and the batch's own passes through). Rows
  // already cached move at once. The set outlives Clear.
  Status Pin(const int64_t* keys, int64_t n);
  int64_t pinned_keys() const;

  // Herald's plan (docs/herald.md): drops the cached copies of `keys`, the
  // rows other workers read in their next step, which read and write them
  // on the shards directly. A dropped row with pending updates joins the
  // outbox, which the next exchange pushes, and its copy is reported gone
  // (both count as an eviction). Keys not cached are skipped (any int64 is
  // safe to ask about). Returns the rows in the outbox and in a round still
  // in flight: 0 means the next exchange has nothing to push.
  int64_t Drop(const int64_t* keys, int64_t n);

  // Herald's window (docs/herald.md): takes the staged batch of a step
  // whose ids are `current` as BeginPrefetch does, or, if it
  // was not staged as such (its samples were reallocated), the oldest one
  // not taken; returns the distinct ids, ascending, of up to `batches`
  // batches staged after it: what this worker reads next.
  std::vector<int64_t> Staged(const int64_t* current, int64_t n, int64_t batches);

  // Up to n cached keys, the most touched first (ties: the smaller key):
  // the summary of this cache that location-aware allocation shares.
  std::vector<int64_t> MostUsed(int64_t n) const;

  // Drops every entry and pending update: after a restore the cached copies
  // and their pending updates belong to an abandoned timeline. The cache
  // takes a new generation, so the shards drop their record of it.
  void Clear();

 private:
  explicit WorkerCache(const CacheConfig& config);
  std::string Name() const { return TableLabel(config_.table_name); }
  // Starts loading a slot's state and pending delta, some keys ahead of
  // a batch loop that touches them.
  void HintSlot(int32_t slot) const;
  // The share of an entry's pending delta that a shard whose row is at
  // fresh_clock would keep (ConcurrentShare).
  float PendingShare(int32_t slot, int64_t fresh_clock) const;
  // A configured bound as in force now (see CacheConfig::staleness_ramp).
  int64_t BoundInForce(int64_t configured) const;
  // A free slot, evicting a victim whose pending updates go to the outbox.
  int32_t TakeSlot();
  // The rows a prefetch's inserts spare, marked the first time a victim is
  // needed (a step whose rows are all cached, or that finds room, marks
  // none). A victim among them is set aside, out of the order, until
  // PutBack, with whether it was kept as a last resort (HoldStep).
  struct Spared {
    bool marked = false;
    std::vector<int32_t> aside;
    std::vector<uint8_t> last_resort;
  };
  // TakeSlot, sparing the slots of `spare` (-1: none).
  int32_t TakeSlotSparing(std::initializer_list<const std::vector<int32_t>*> spare, Spared* spared);
  void PutBack(const Spared& spared);
  // The slot of each of n keys, -1 if not cached. The keys must be unique:
  // those of the last lookup are by construction, and their slots are
  // known, so the two halves of a lookup and its update neither check nor
  // look them up again; other keys are checked.
  Status BatchSlots(const int64_t* keys, int64_t n, std::vector<int32_t>* slots) const;
  bool IsPrepared(const int64_t* keys, int64_t n) const;
  // A key's slot, -1 if not cached.
  int32_t SlotOf(int64_t key) const {
    const uint32_t slot = index_.Find(key);
    return slot == KeyIndex::kAbsent ? -1 : static_cast<int32_t>(slot);
  }
  // The slots of n keys, each -1 if not cached.
  void SlotsOf(const int64_t* keys, int64_t n, std::vector<int32_t>* slots) const;
  // After a fill moved the batch's rows: these keys and slots are the
  // prepared ones from here on.
  void RememberBatch(const int64_t* keys, int64_t n, const std::vector<int32_t>& slots);
  Status CheckReturnedClocks(const int64_t* clocks, int64_t n, bool misses = false) const;
  // The shards' epochs as an answer carried them (num_shards) against those
  // this cache saw first: any other marks the cache's copies as the old
  // table's (cleared at the next lookup) and fails with Aborted.
  Status CheckEpochs(const int64_t* epochs);
  // The first answer's epochs become the cache's.
  void LearnEpochs(const int64_t* epochs);
  // Starts a round whose ledger is the outbox (all of it, or only the rows
  // of `misses` when given) and then the entries `due` lists (or every
  // entry with pending updates when `all`), each key once; without
  // `always`, only if that ledger holds anything. While a round is in
  // flight it changes nothing (that round goes again) and returns false.
  bool StartRound(const KeyIndex* misses, const std::vector<int64_t>* due, bool all, bool always);
  // The round's answer acknowledged its ledger: states[i] (null for the
  // evicted rows, for the lean ones, or for all when none came back) is
  // ledger row i's state on the shard at clocks[i]; an entry updated since
  // takes it with its new pending updates merged back (a `refused` key's,
  // under a 16-bit wire, with none: they hold its refused push's residual).
  // A lean row's state is the merge StartRound computed.
  void EndRound(const std::vector<const float*>& states, const int64_t* clocks,
                const std::vector<uint8_t>& lean, const std::vector<int64_t>& refused);
  Sender RoundSenderLocked(int64_t shard) const;
  void RoundSendersLocked(std::vector<Sender>* senders) const;
  // Every lookup's start: checks the ids (a staged batch's were checked
  // when staged), empties the cache first if a shard's epoch changed
  // (EndExchange), and gives the unique keys in order of first appearance
  // and where each id went, remembered as prepared with their slots.
  Status BeginLookup(const int64_t* ids, int64_t n, std::vector<int64_t>* unique_keys,
                     std::vector<int32_t>* inverse);
  // A cached entry's pending delta (TakeDelta from its base), in delta_.
  float* PendingDelta(int32_t slot);
  // A cached entry takes a fresh state at server clock `clock` as its base,
  // with its own pending delta merged back in as the shard will merge it.
  void Refresh(int32_t slot, const float* fresh, int64_t clock);
  // The same with `delta` (of the entry's pending count, which it may
  // scale); one that would make the copy non-finite is dropped (DropPending).
  void Rebase(int32_t slot, const float* fresh, int64_t clock, float* delta);
  void DropPending(int32_t slot, const float* fresh);
  // An op's end: names once the keys whose updates the shards refused, or
  // a refresh dropped (unmerged_).
  Status EndRefusals(std::vector<int64_t> refused);
  // The merge a shard makes of `delta` (`count` updates) on a row no other
  // writer reached since the entry's base: ApplyDelta on the base, in `out`.
  void MergeOnBase(int32_t slot, const float* delta, int64_t count, float* out);
  // A training lookup's rows: fresh[i], when not null, is unique key i's
  // fresh state (a whole state) at clock fresh_clocks[i]. Cached keys with
  // one are refreshed, missing ones inserted, and every row written to
  // rows_out.
  void FillForTraining(const int64_t* unique_keys, int64_t u, std::vector<int32_t>& slots,
                       const std::vector<const float*>& fresh,
                       const std::vector<int64_t>& fresh_clocks, float* rows_out);
  void ClearLocked();
  // The requests of an exchange: the pushes due and the evictions if
  // carry_updates, and the keys with no slot.
  // How many of the unreported evictions, moved to the front, this
  // exchange reports (config rows_leave).
  size_t ReportableEvictions(const std::vector<int64_t>& keys, const std::vector<int32_t>& slots);
  Status WriteRequests(const std::vector<int64_t>& keys, const std::vector<int32_t>& slots,
                       bool carry_updates, ExchangePlan* plan);
  // What every exchange's answers do, for the keys it asked about (slots:
  // theirs, -1 for the misses): checks them, acknowledges the pushes and
  // refreshes stale copies; fresh[i] and fresh_clocks[i] receive key i's
  // missing row (one the shard made for this request is made here, and a
  // 16-bit one decoded, in `rebuilt`), `refused` the keys a shard refused.
  // Changes nothing unless every check passes.
  Status TakeAnswers(const int64_t* keys, int64_t u, const std::vector<int32_t>& slots,
                     const uint8_t* const* answers, const size_t* sizes, int64_t shards,
                     std::vector<const float*>* fresh, std::vector<int64_t>* fresh_clocks,
                     std::vector<float>* rebuilt, std::vector<int64_t>* refused);
  // The rows no shard has merged yet (worker_cache_unsent.h).
  struct PushChains;
  class UnsentRows;
  struct OutboxRows;
  // A free or evicted slot takes a row fetched at the shard's clock.
  void InsertRow(int32_t slot, int64_t key, const float* state, int64_t clock);
  // A row just inserted at `slot` (`fresh`, fetched at `clock`) takes back
  // its key's outbox rows (a copy evicted, a row passed through: not sent
  // before the fetch) as pending updates, merged into it (reads see writes).
  void Reclaim(int32_t slot, const float* fresh, int64_t clock, OutboxRows& unsent);
  // Puts a cached slot back in the eviction order (pinned, or by next read).
  void AttachSlot(int32_t slot, uint64_t touches) { AttachSlot(slot, touches, entries_[slot].key); }
  void AttachSlot(int32_t slot, uint64_t touches, int64_t key);
  // Cached rows of `keys`, whose next reads changed, take their new place.
  void Refile(const std::vector<int64_t>& keys);
  // A lookup that finds the step open keeps the rows read so far as a last
  // resort (WorkerCacheData::step_); the step's update releases them.
  void HoldStep();
  void ReleaseStep();
  // StagedBatches::Take, its rows refiled (mu_ held).
  std::vector<int64_t> TakeStaged(const int64_t* current, int64_t n, int64_t batches,
                                  bool by_position);
};

}  // namespace het

#endif  // HET_TF_EMBEDDING_CORE_WORKER_CACHE_H_

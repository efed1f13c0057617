// A shard's pushes: a worker's gradients (Push) and a cache's state deltas
// (PushDeltas, and an exchange's pushes through MergeDeltas), each taken
// first on copies of the rows so that one that would turn a row non-finite
// changes nothing.
#include <algorithm>
#include <array>
#include <cstring>
#include <memory>

#include "cc_ops/embedding/core/table_shard.h"
#include "cc_ops/embedding/core/wire_sizes.h"

namespace het {

template <typename Apply>
Status TableShard::ApplyToRows(const int64_t* keys, const int64_t* counts, int64_t n, int width,
                               const Sender& sender, int64_t unanswered, float* out,
                               int64_t* clocks, bool reserved, const int64_t* lean_base_clocks,
                               uint8_t* lean, std::vector<int64_t>* refused,
                               const Parallel* parallel, Apply apply) {
  std::unique_ptr<RowReservation> reservation;
  if (!reserved) HET_RETURN_IF_ERROR(ReserveNewRows(keys, n, Admit::kAll, 0, &reservation));
  // First each row's update on a copy of its state: one that would make a
  // value or a slot non-finite (a huge gradient squared, say) refuses the
  // whole push before anything changes, or, in a numbered round, which its
  // cache would send again forever, that row's update alone. The rows then
  // take their copies, or, where another push moved a row in between, the
  // update again.
  const bool by_row = sender.worker != Sender::kNoWorker && sender.sequence != 0;
  const int state = state_width();
  const bool stepped = NeedsStepCount(config_.optimizer.kind);
  std::unique_ptr<float[]> next(new float[size_t(n) * state]);  // each written before read
  std::vector<int64_t> seen(n), steps(n);
  // Where the first pass found each row, and each stripe's drops then: the
  // second finds a row there again unless its stripe dropped one since.
  std::vector<uint32_t> found(n);
  std::array<uint64_t, kStripes> drops;
  std::vector<uint8_t> held(lean != nullptr ? n : 0);  // the row existed before
  // A table that admits ids drops the updates of ids it does not hold (not
  // admitted, or dropped since), counted: they are not lost unseen.
  constexpr int64_t kDropped = -2;
  constexpr int64_t kRefused = -3;    // a round's row whose update is refused alone
  constexpr int64_t kNonFinite = -4;  // refuses the whole push
  ForEachByStripe(
      keys, n,
      [&](Stripe& stripe, int32_t i) {
        float* copy = next.get() + size_t(i) * state;
        const uint32_t row = found[i] = stripe.index.Find(keys[i]);
        drops[&stripe - stripes_.data()] = stripe.drops;
        if (row == KeyIndex::kAbsent && admitting()) {
          seen[i] = kDropped;
          return;
        }
        if (row == KeyIndex::kAbsent) {
          seen[i] = NewState(keys[i], copy);  // as FindOrCreate will make it
          steps[i] = seen[i];
        } else {
          char* p = RowAt(stripe, row);
          std::memcpy(copy, Values(p), sizeof(float) * state);
          seen[i] = *Clock(p);
          if (lean != nullptr) held[i] = 1;
          steps[i] = stepped ? *Step(p) : 0;
        }
        apply(i, seen[i], copy, &steps[i]);
        if (!AllFinite(copy, state)) seen[i] = by_row ? kRefused : kNonFinite;
      },
      parallel);
  // The first in the request's order is named.
  const auto bad = std::find(seen.begin(), seen.end(), kNonFinite);
  if (bad != seen.end()) return NonFiniteUpdate(TableLabel(config_.name), keys[bad - seen.begin()]);
  if (between_push_passes_) {
    const std::function<void()> inject = between_push_passes_;  // it may unset itself
    inject();
  }
  // What became of each position's update, tallied after the pass: the
  // pass may visit stripes on several threads at once.
  enum Outcome : uint8_t { kTaken, kDroppedRow, kRefusedRow };
  std::vector<uint8_t> outcome(n);
  ForEachByStripe(
      keys, n,
      [&](Stripe& stripe, int32_t i) {
        if (seen[i] == kDropped) {
          outcome[i] = kDroppedRow;
          if (i < unanswered) return;
          if (out != nullptr) DefaultState(out + (i - unanswered) * width, width);
          if (clocks != nullptr) clocks[i - unanswered] = kNotAdmitted;
          return;
        }
        bool created = false;
        uint32_t slot = found[i];
        char* p;
        if (slot != KeyIndex::kAbsent && stripe.drops == drops[&stripe - stripes_.data()]) {
          p = RowFound(stripe, slot);
        } else {
          p = FindOrCreate(stripe, keys[i], &created, &slot);
        }
        MarkChanged(stripe, slot);
        const bool unmoved = *Clock(p) == seen[i];
        float* copy = next.get() + size_t(i) * state;
        bool taken = seen[i] != kRefused;
        if (taken && !unmoved) {
          // Another push moved the row between the passes: the update is taken
          // again on a copy of the row as it is now, checked as the first pass
          // checked the row as it was. A row it would turn non-finite keeps its
          // state and clock, its update refused alone: the rest of the push has
          // landed and cannot be refused whole any more.
          std::memcpy(copy, Values(p), sizeof(float) * state);
          steps[i] = stepped ? *Step(p) : 0;
          apply(i, *Clock(p), copy, &steps[i]);
          taken = AllFinite(copy, state);
        }
        if (taken) {
          std::memcpy(Values(p), copy, sizeof(float) * state);
          if (stepped) *Step(p) = steps[i];
          *Clock(p) += counts[i];
          outcome[i] = kTaken;
        } else {
          // The sender takes the row as it is (never lean: its copy carried the
          // update refused) and is told its key.
          outcome[i] = kRefusedRow;
        }
        if (stripe.records.workers() > 0) stripe.records.Pushed(sender, keys[i], *Clock(p));
        if (i < unanswered) return;
        if (out != nullptr) {
          std::memcpy(out + (i - unanswered) * width, Values(p), sizeof(float) * width);
        }
        if (clocks != nullptr) clocks[i - unanswered] = *Clock(p);
        // No other writer reached the row between the sender's base and this
        // merge, which was made once on the row as the sender last saw it: the
        // sender computes the same merge itself (WorkerCache::StartRound).
        if (lean != nullptr) {
          lean[i - unanswered] =
              taken && held[i] && !created && unmoved && seen[i] == lean_base_clocks[i];
        }
      },
      parallel, /*hint=*/false);
  uint64_t updates = 0, dropped = 0, refusals = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (outcome[i] == kTaken) {
      updates += counts[i];
    } else if (outcome[i] == kDroppedRow) {
      dropped += counts[i];
    } else {
      refusals += counts[i];
      if (refused != nullptr) refused->push_back(keys[i]);
    }
  }
  push_requests_.fetch_add(1, std::memory_order_relaxed);
  rows_pushed_.fetch_add(n, std::memory_order_relaxed);
  updates_applied_.fetch_add(updates, std::memory_order_relaxed);
  updates_dropped_.fetch_add(dropped, std::memory_order_relaxed);
  updates_refused_.fetch_add(refusals, std::memory_order_relaxed);
  return Status::Ok();
}

Status TableShard::Push(const int64_t* keys, const float* grads, const int64_t* counts, int64_t n,
                        float learning_rate, float* values, int64_t* clocks,
                        const Parallel* parallel) {
  const int dim = config_.dim;
  HET_RETURN_IF_ERROR(CheckPush(keys, grads, dim, counts, n, learning_rate, "gradient", 1));
  HET_RETURN_IF_ERROR(ApplyToRows(keys, counts, n, dim, Sender(), 0, values, clocks,
                                  /*reserved=*/false, nullptr, nullptr, nullptr, parallel,
                                  [&](int32_t i, int64_t, float* state, int64_t* step) {
                                    // Each thread's own: positions may be visited at once.
                                    thread_local std::vector<float> mean;
                                    mean.resize(dim);
                                    ApplyUpdates(config_.optimizer, learning_rate,
                                                 grads + int64_t{i} * dim, counts[i], dim, state,
                                                 state + dim, step, &mean);
                                  }));
  CountPushBytes(n, dim, /*delta=*/false, values != nullptr ? n : 0, 0);
  return Status::Ok();
}

Status TableShard::PushDeltas(const int64_t* keys, const float* deltas, const int64_t* counts,
                              const int64_t* base_clocks, int64_t n, float learning_rate,
                              float* states, int64_t* clocks, const Sender& sender,
                              int64_t unanswered, int64_t* epoch, uint8_t* lean,
                              std::vector<int64_t>* refused) {
  const int width = state_width();
  HET_RETURN_IF_ERROR(
      CheckPush(keys, deltas, width, counts, n, learning_rate, "delta", kLeastDeltaCount));
  HET_RETURN_IF_ERROR(CheckDeltaPush(keys, deltas, base_clocks, n));
  if (unanswered < 0 || unanswered > n) {
    return Status::InvalidArgument(TableLabel(config_.name) + ": " + std::to_string(unanswered) +
                                   " unanswered rows in a push of " + std::to_string(n) +
                                   "; nothing was applied");
  }
  // Only rows merged now may be flagged lean (MergeDeltas).
  if (lean != nullptr) std::fill(lean, lean + n - unanswered, uint8_t{0});
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
    CountPushBytes(n, width, /*delta=*/true, answered, 0);
    return Status::Ok();
  }
  SenderLog::Turn turn;
  HET_RETURN_IF_ERROR(AdmitRound(sender, &turn));
  const int64_t answered = states != nullptr ? n - unanswered : 0;
  int64_t lean_rows = 0;
  std::vector<int64_t> refusals;
  if (turn.repeat()) {
    // The rows are answered as they are now, whole: other pushes may have
    // reached them since the round was merged. Its refusals are named
    // again: the answer that named them may be the one lost.
    AnswerRepeat(keys, n, sender, unanswered, states, clocks);
    TakeBackLost(sender, turn);
    refusals = turn.refused();
  } else {
    HET_RETURN_IF_ERROR(MergeDeltas(keys, deltas, counts, base_clocks, n, learning_rate, states,
                                    clocks, sender, unanswered, /*reserved=*/false,
                                    states != nullptr ? lean : nullptr, &lean_rows, &refusals));
  }
  // A push refreshes nothing; refreshes lost before it were queued again.
  turn.Done({}, {}, refusals);
  CountPushBytes(n, width, /*delta=*/true, answered, lean_rows);
  bytes_sent_.fetch_add(wire::RefusedAnswer(refusals.size()), std::memory_order_relaxed);
  if (refused != nullptr) refused->insert(refused->end(), refusals.begin(), refusals.end());
  return Status::Ok();
}

void TableShard::CountPushBytes(int64_t n, int width, bool delta, int64_t answered, int64_t lean) {
  bytes_received_.fetch_add(wire::PushRequest(n, width, delta), std::memory_order_relaxed);
  bytes_sent_.fetch_add(
      delta ? wire::DeltaPushAnswer(answered, width, lean) : wire::PushAnswer(answered, width),
      std::memory_order_relaxed);
}

Status TableShard::MergeDeltas(const int64_t* keys, const float* deltas, const int64_t* counts,
                               const int64_t* base_clocks, int64_t n, float learning_rate,
                               float* states, int64_t* clocks, const Sender& sender,
                               int64_t unanswered, bool reserved, uint8_t* lean, int64_t* lean_rows,
                               std::vector<int64_t>* refused) {
  const int width = state_width();
  const OptimizerKind kind = config_.optimizer.kind;
  const int64_t answered = n - unanswered;
  // FTRL's values are computed from its slots with the learning rate,
  // which a flush may carry otherwise than the cache's last step did: its
  // pushes are answered whole.
  const bool lean_ok = lean != nullptr && kind != OptimizerKind::kFtrl;
  // Rows dropped (not admitted) are never lean: only the rows merged are
  // flagged.
  if (lean != nullptr) std::fill(lean, lean + answered, uint8_t{0});
  HET_RETURN_IF_ERROR(
      ApplyToRows(keys, counts, n, width, sender, unanswered, states, clocks, reserved,
                  lean_ok ? base_clocks : nullptr, lean_ok ? lean : nullptr, refused,
                  /*parallel=*/nullptr, [&](int32_t i, int64_t clock, float* state, int64_t* step) {
                    // A clock behind the cache's copy (the table was restored since)
                    // counts as no other writer.
                    const float share = ConcurrentShare(kind, counts[i], clock - base_clocks[i]);
                    ApplyDelta(config_.optimizer, learning_rate, deltas + int64_t{i} * width,
                               counts[i], config_.dim, state, state + config_.dim, step, share);
                  }));
  if (lean_rows != nullptr) *lean_rows = 0;
  if (!lean_ok || states == nullptr) return Status::Ok();
  // The rows acknowledged by their clocks leave the answer: the others
  // close up, in order.
  int64_t kept = 0;
  for (int64_t r = 0; r < answered; ++r) {
    if (lean[r]) continue;
    if (kept != r) {
      std::memmove(states + kept * width, states + r * width, sizeof(float) * width);
    }
    ++kept;
  }
  if (lean_rows != nullptr) *lean_rows = answered - kept;
  return Status::Ok();
}

}  // namespace het

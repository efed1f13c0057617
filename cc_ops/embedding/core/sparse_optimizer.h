// Server-side row optimizers. The update rules follow tf_keras' sparse
// updates (Adam's moments written as beta * m + (1 - beta) * g, so that a
// merged run of one update rounds as the update itself), with Adam's bias
// correction counted per row because a row only sees the steps in which it
// was touched ("lazy" Adam).
#ifndef HET_TF_EMBEDDING_CORE_SPARSE_OPTIMIZER_H_
#define HET_TF_EMBEDDING_CORE_SPARSE_OPTIMIZER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "cc_ops/common/status.h"

namespace het {

enum class OptimizerKind { kSGD, kAdagrad, kAdam, kFtrl };

// A constraint on a row's values, as tf_keras' constraints on an embedding
// matrix compute it for one row: NonNeg, and MaxNorm, UnitNorm and
// MinMaxNorm with their norm taken over the row (axis 1). Keras projects the
// whole matrix after each step; here each row is projected after each
// change that an update or a merge makes to it, on the shards and in the
// caches alike, since no shard ever sees the whole matrix.
enum class ConstraintKind { kNone, kNonNeg, kMaxNorm, kUnitNorm, kMinMaxNorm };

struct RowConstraint {
  ConstraintKind kind = ConstraintKind::kNone;
  float min_value = 0.0f;  // MinMaxNorm
  float max_value = 0.0f;  // MaxNorm, MinMaxNorm
  float rate = 1.0f;       // MinMaxNorm
};

// Accepts "none", "non_neg", "max_norm", "unit_norm" and "min_max_norm".
Status ParseConstraintKind(const std::string& name, ConstraintKind* kind);

// Projects `dim` values in place, as the Keras constraint would.
void ApplyConstraint(const RowConstraint& constraint, int dim, float* row);

struct OptimizerConfig {
  OptimizerKind kind = OptimizerKind::kSGD;
  float beta_1 = 0.9f;                // Adam
  float beta_2 = 0.999f;              // Adam
  float epsilon = 1e-7f;              // Adagrad, Adam
  float initial_accumulator = 0.1f;   // Adagrad, FTRL
  float l1 = 0.0f;                    // FTRL
  float l2 = 0.0f;                    // FTRL
  float learning_rate_power = -0.5f;  // FTRL
  float beta = 0.0f;                  // FTRL
  // Applied to a row's values after every update and merge.
  RowConstraint constraint;
};

// Accepts "sgd", "adagrad", "adam" and "ftrl" in any case.
Status ParseOptimizerKind(const std::string& name, OptimizerKind* kind);
Status ValidateOptimizer(const OptimizerConfig& config);

// A learning rate fed to an update must be finite and >= 0; FTRL divides by
// it, so it needs > 0. `name` says whose update it was.
Status CheckLearningRate(const std::string& name, const OptimizerConfig& config,
                         float learning_rate);

// Whether n floats (a row's state after an update) are all finite, and the
// error for an update that would make id `key`'s row or slots non-finite:
// caches and shards refuse it before anything changes.
bool AllFinite(const float* values, size_t n);
// Whether every field of TakeDelta(state, base) is finite: |state - base|
// bounds an Adam moment's too when their signs differ (its base decays by
// at most 1), and max(|state|, |base|) when they agree.
bool DeltaFinite(const float* state, const float* base, size_t n);
Status NonFiniteUpdate(const std::string& name, int64_t key);
// A round the shards took but for the updates of `keys`, which they
// refused as non-finite: counted in *count, and an error naming them
// (none: Ok), said once, as the round has ended.
Status RefusedUpdates(const std::string& name, std::vector<int64_t> keys, uint64_t* count);

// Number of dim-sized float slots a row carries.
int NumSlots(OptimizerKind kind);
// Whether a row also carries its own step count.
bool NeedsStepCount(OptimizerKind kind);

void InitializeSlots(const OptimizerConfig& config, int dim, float* slots);

// A row's state as a worker cache holds it and pulls and pushes carry it:
// the row's dim values followed by its slots, StateWidth floats in all.
int StateWidth(OptimizerKind kind, int dim);

// Applies one update with gradient `grad` to `row`, then the constraint.
// `slots` holds NumSlots() * dim floats; `step` is the row's step count
// (Adam only).
void ApplyUpdate(const OptimizerConfig& config, float learning_rate, const float* grad, int dim,
                 float* row, float* slots, int64_t* step);

// Merges a worker's state delta of `count` local updates (TakeDelta) into a
// shard's row (or into a fresh copy of it, on a cache's refresh): values and
// sums (Adagrad's and FTRL's slots) take their change; Adam's moments decay
// by beta^count and take the worker's averages, and its step advances by
// `count`; FTRL's values are recomputed from the merged slots (they are a
// function of them). The constraint projects the merged values. With no
// other writer since the worker's copy was taken, the row ends where the
// worker computes it will (WorkerCache::StartRound).
//
// `value_share` (0, 1] scales the values' part of the delta: the share of a
// worker's movement that a merge keeps (ConcurrentShare).
void ApplyDelta(const OptimizerConfig& config, float learning_rate, const float* delta,
                int64_t count, int dim, float* row, float* slots, int64_t* step,
                float value_share = 1.0f);

// The delta that takes `base` to `state` in `count` local updates: what
// ApplyDelta merges into `base` to reach `state` again. Values and sums
// take their difference, Adam's moments their difference from the base's
// decayed value; a sum or average of squared gradients never goes below 0.
// A cache keeps the base it fetched, not the delta, so that it can compute
// the merge a shard makes of it to the bit (docs/consistency.md): for one
// update ApplyDelta(base, TakeDelta(state, base)) is `state` exactly,
// since fl(b + fl(fl(b + x) - b)) = fl(b + x) when rounding to nearest.
void TakeDelta(const OptimizerConfig& config, const float* state, const float* base, int64_t count,
               int dim, float* delta);

// The share of a delta's movement of the values that a merge keeps, when the
// delta holds `count` local updates and `others` updates by other writers
// reached the row since the worker's copy was taken. Adam's updates have the
// learning rate's size whatever the gradient's, so two workers that each
// take a row to where their own copy's loss is lowest move it there twice
// when their deltas add: the merge keeps count / (count + others) of an Adam
// delta, which is all of it with no other writer and half of it for two
// workers writing the row at the same rate (docs/consistency.md, "Adam").
// Other optimizers' steps shrink with the gradient, and keep all of it.
float ConcurrentShare(OptimizerKind kind, int64_t count, int64_t others);

// The slot (0-based) whose part of a delta can never be negative: the sum
// or average of squared gradients; -1 for none (SGD).
int NonNegativeSlot(OptimizerKind kind);

// The most updates one push may carry: a push costs `count` optimizer steps,
// so an unchecked count (2^63) would never finish. Caches push a row once
// it has this many pending updates, whatever the write bound.
constexpr int64_t kMaxUpdatesPerPush = int64_t{1} << 20;
// The fewest updates a cache's delta push carries: 0, the rounding a 16-bit
// wire left of a row's last push, sent alone in float32 when the row leaves
// the cache or is flushed (row_codec.h). A gradient is one update or more.
constexpr int64_t kLeastDeltaCount = 0;

// Applies a push of `count` updates whose gradients sum to `grad_sum`: the
// optimizer steps `count` times with the mean gradient, as if each update had
// been pushed on its own with that gradient (SGD takes the sum in one step,
// which is the same update). `mean` is dim floats of scratch space.
void ApplyUpdates(const OptimizerConfig& config, float learning_rate, const float* grad_sum,
                  int64_t count, int dim, float* row, float* slots, int64_t* step,
                  std::vector<float>* mean);

}  // namespace het

#endif  // HET_TF_EMBEDDING_CORE_SPARSE_OPTIMIZER_H_

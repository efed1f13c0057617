#include "cc_ops/embedding/core/sparse_optimizer.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "cc_ops/common/named_choice.h"

namespace het {

Status ParseOptimizerKind(const std::string& name, OptimizerKind* kind) {
  static constexpr NamedChoice<OptimizerKind> kChoices[] = {{"sgd", OptimizerKind::kSGD},
                                                            {"adagrad", OptimizerKind::kAdagrad},
                                                            {"adam", OptimizerKind::kAdam},
                                                            {"ftrl", OptimizerKind::kFtrl}};
  return ParseNamedChoice("optimizer", name, kChoices, kind);
}

Status ParseConstraintKind(const std::string& name, ConstraintKind* kind) {
  static constexpr NamedChoice<ConstraintKind> kChoices[] = {
      {"none", ConstraintKind::kNone},
      {"non_neg", ConstraintKind::kNonNeg},
      {"max_norm", ConstraintKind::kMaxNorm},
      {"unit_norm", ConstraintKind::kUnitNorm},
      {"min_max_norm", ConstraintKind::kMinMaxNorm}};
  return ParseNamedChoice("constraint", name, kChoices, kind);
}

Status ValidateOptimizer(const OptimizerConfig& c) {
  const RowConstraint& k = c.constraint;
  if ((k.kind == ConstraintKind::kMaxNorm || k.kind == ConstraintKind::kMinMaxNorm) &&
      !(k.max_value >= 0 && std::isfinite(k.max_value))) {
    return Status::InvalidArgument("a norm constraint needs a finite max_value >= 0");
  }
  if (k.kind == ConstraintKind::kMinMaxNorm &&
      !(k.min_value >= 0 && k.min_value <= k.max_value && k.rate >= 0 && k.rate <= 1)) {
    return Status::InvalidArgument(
        "min_max_norm needs 0 <= min_value <= max_value and 0 <= rate <= 1");
  }
  if (c.kind == OptimizerKind::kAdam &&
      !(c.beta_1 >= 0 && c.beta_1 < 1 && c.beta_2 >= 0 && c.beta_2 < 1)) {
    return Status::InvalidArgument("adam needs 0 <= beta_1, beta_2 < 1");
  }
  if ((c.kind == OptimizerKind::kAdagrad || c.kind == OptimizerKind::kFtrl) &&
      !(c.initial_accumulator >= 0)) {
    return Status::InvalidArgument("initial_accumulator_value must be >= 0");
  }
  if (c.kind == OptimizerKind::kFtrl &&
      !(c.l1 >= 0 && c.l2 >= 0 && c.learning_rate_power <= 0 && c.beta >= 0)) {
    return Status::InvalidArgument(
        "ftrl needs l1 >= 0, l2 >= 0, beta >= 0 and learning_rate_power <= 0");
  }
  if (!(c.epsilon >= 0)) return Status::InvalidArgument("epsilon must be >= 0");
  return Status::Ok();
}

bool DeltaFinite(const float* state, const float* base, size_t n) {
  for (size_t j = 0; j < n; ++j) {
    if (!std::isfinite(state[j] - base[j])) return false;
  }
  return true;
}

bool AllFinite(const float* values, size_t n) {
  // A float is not finite when its exponent bits are all ones. Tested on the
  // bits, without a branch, the loop vectorizes: every push checks every
  // row it updates, and a test a float cost about a nanosecond.
  uint32_t bad = 0;
  for (size_t i = 0; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, values + i, sizeof(bits));
    bad |= static_cast<uint32_t>((bits & 0x7f800000u) == 0x7f800000u);
  }
  return bad == 0;
}

Status NonFiniteUpdate(const std::string& name, int64_t key) {
  return Status::InvalidArgument(
      name + ": the update of id " + std::to_string(key) +
      " would make its row or optimizer slots non-finite (is its "
      "gradient, or the learning rate, too large?); nothing was applied");
}

Status RefusedUpdates(const std::string& name, std::vector<int64_t> keys, uint64_t* count) {
  if (keys.empty()) return Status::Ok();
  *count += keys.size();
  std::sort(keys.begin(), keys.end());
  std::string ids;
  for (size_t i = 0; i < keys.size() && i < 8; ++i)
    ids += (i ? ", " : "") + std::to_string(keys[i]);
  if (keys.size() > 8) ids += ", ... (" + std::to_string(keys.size()) + " ids)";
  return Status::InvalidArgument(
      name + ": the updates of ids [" + ids +
      "] were refused, as they would make the rows or optimizer slots non-finite (is the "
      "gradient, or the learning rate, too large?); those updates were dropped, the rest was "
      "merged, and this worker's copies of the rows are the shards' again: training can go on");
}

Status CheckLearningRate(const std::string& name, const OptimizerConfig& c, float lr) {
  if (!std::isfinite(lr) || lr < 0 || (c.kind == OptimizerKind::kFtrl && lr == 0)) {
    return Status::InvalidArgument(name + ": learning rate must be finite and " +
                                   (c.kind == OptimizerKind::kFtrl ? "> 0 for ftrl" : ">= 0") +
                                   ", got " + std::to_string(lr));
  }
  return Status::Ok();
}

int NumSlots(OptimizerKind kind) {
  switch (kind) {
    case OptimizerKind::kSGD:
      return 0;
    case OptimizerKind::kAdagrad:
      return 1;
    case OptimizerKind::kAdam:
    case OptimizerKind::kFtrl:
      return 2;
  }
  return 0;
}

bool NeedsStepCount(OptimizerKind kind) { return kind == OptimizerKind::kAdam; }

void InitializeSlots(const OptimizerConfig& config, int dim, float* slots) {
  switch (config.kind) {
    case OptimizerKind::kSGD:
      break;
    case OptimizerKind::kAdagrad:
      std::fill(slots, slots + dim, config.initial_accumulator);
      break;
    case OptimizerKind::kAdam:
      std::fill(slots, slots + 2 * dim, 0.0f);
      break;
    case OptimizerKind::kFtrl:
      std::fill(slots, slots + dim, config.initial_accumulator);
      std::fill(slots + dim, slots + 2 * dim, 0.0f);
      break;
  }
}

int StateWidth(OptimizerKind kind, int dim) { return dim * (1 + NumSlots(kind)); }

// Keras' backend.epsilon(), which its norm constraints add to the norm.
constexpr float kConstraintEpsilon = 1e-7f;

namespace {

// The factor a norm constraint multiplies a row by, as Keras computes it.
float NormScale(const RowConstraint& k, int dim, const float* w) {
  float squares = 0.0f;  // in order: the NumPy model sums the same way
  for (int j = 0; j < dim; ++j) squares += w[j] * w[j];
  const float norm = std::sqrt(squares);
  float desired = 1.0f;  // kUnitNorm: w / (epsilon + norm)
  if (k.kind == ConstraintKind::kMaxNorm) {
    desired = std::min(norm, k.max_value);
  } else if (k.kind == ConstraintKind::kMinMaxNorm) {
    desired = k.rate * std::min(std::max(norm, k.min_value), k.max_value) + (1.0f - k.rate) * norm;
  }
  return desired / (kConstraintEpsilon + norm);
}

}  // namespace

void ApplyConstraint(const RowConstraint& k, int dim, float* w) {
  if (k.kind == ConstraintKind::kNone) return;
  const bool non_neg = k.kind == ConstraintKind::kNonNeg;
  const float scale = non_neg ? 1.0f : NormScale(k, dim, w);
  for (int j = 0; j < dim; ++j) w[j] = non_neg ? (w[j] >= 0.0f ? w[j] : 0.0f) : w[j] * scale;
}

namespace {

// FTRL-proximal's row as a function of its linear and accumulator slots.
float FtrlWeight(const OptimizerConfig& c, float lr, float linear, float acc) {
  const float l2 = c.l2 + c.beta / (2.0f * lr);
  const float quadratic = std::pow(acc, -c.learning_rate_power) / lr + 2.0f * l2;
  return std::fabs(linear) > c.l1 ? (std::copysign(c.l1, linear) - linear) / quadratic : 0.0f;
}

// One update of each optimizer. The variants are separate loops with
// non-aliasing pointers, so that the compiler vectorizes them: a cache's
// local step runs once per unique key per batch. Vector and scalar code
// round alike (no reassociation, no contraction without FMA in the
// target), so the cache and the shards stay bit-equal.
void Update(const OptimizerConfig& c, float lr, const float* __restrict__ g, int dim,
            float* __restrict__ w, float* __restrict__ slot_a, float* __restrict__ slot_b,
            int64_t* step) {
  switch (c.kind) {
    case OptimizerKind::kSGD:
      for (int j = 0; j < dim; ++j) {
        w[j] += -(lr * g[j]);
      }
      break;
    case OptimizerKind::kAdagrad: {
      const float epsilon = c.epsilon;
      for (int j = 0; j < dim; ++j) {
        const float squared = g[j] * g[j];
        slot_a[j] += squared;
        w[j] += -(lr * g[j] / std::sqrt(slot_a[j] + epsilon));
      }
      break;
    }
    case OptimizerKind::kAdam: {
      const int64_t t = ++*step;
      const double b1_power = std::pow(static_cast<double>(c.beta_1), static_cast<double>(t));
      const double b2_power = std::pow(static_cast<double>(c.beta_2), static_cast<double>(t));
      const float alpha = static_cast<float>(lr * std::sqrt(1.0 - b2_power) / (1.0 - b1_power));
      const float beta_1 = c.beta_1, beta_2 = c.beta_2, epsilon = c.epsilon;
      for (int j = 0; j < dim; ++j) {
        // The moments are averages, not sums: what a run of updates adds to
        // one is its average started from zero, and the rest is the decay
        // of the value it started from, which a merge applies to the
        // shard's own value (ApplyDelta, TakeDelta).
        const float fresh_m = (1.0f - beta_1) * g[j];
        const float fresh_v = (1.0f - beta_2) * (g[j] * g[j]);
        slot_a[j] = beta_1 * slot_a[j] + fresh_m;
        slot_b[j] = beta_2 * slot_b[j] + fresh_v;
        w[j] += -(alpha * slot_a[j] / (std::sqrt(slot_b[j]) + epsilon));
      }
      break;
    }
    case OptimizerKind::kFtrl: {
      float* acc = slot_a;
      float* linear = slot_b;
      const float p = -c.learning_rate_power;
      for (int j = 0; j < dim; ++j) {
        const float squared = g[j] * g[j];
        const float acc_new = acc[j] + squared;
        const float sigma = (std::pow(acc_new, p) - std::pow(acc[j], p)) / lr;
        linear[j] += g[j] - sigma * w[j];
        acc[j] += squared;
        w[j] = FtrlWeight(c, lr, linear[j], acc[j]);
      }
      break;
    }
  }
}

}  // namespace

void ApplyUpdate(const OptimizerConfig& c, float lr, const float* g, int dim, float* w,
                 float* slots, int64_t* step) {
  // Slot k is at slots[k * dim].
  Update(c, lr, g, dim, w, slots, NumSlots(c.kind) > 1 ? slots + dim : nullptr, step);
  ApplyConstraint(c.constraint, dim, w);
}

void ApplyDelta(const OptimizerConfig& c, float lr, const float* delta, int64_t count, int dim,
                float* w, float* slots, int64_t* step, float value_share) {
  const float* slot_delta = delta + dim;
  switch (c.kind) {
    case OptimizerKind::kSGD:
    case OptimizerKind::kAdagrad:
      for (int j = 0; j < NumSlots(c.kind) * dim; ++j) slots[j] += slot_delta[j];
      break;
    case OptimizerKind::kAdam: {
      // Each moment decays by beta^count from the shard's own value and
      // takes the worker's average of its updates (ApplyUpdate).
      const float decay_1 = static_cast<float>(std::pow(double{c.beta_1}, double(count)));
      const float decay_2 = static_cast<float>(std::pow(double{c.beta_2}, double(count)));
      for (int j = 0; j < dim; ++j) {
        slots[j] = decay_1 * slots[j] + slot_delta[j];
        slots[dim + j] = decay_2 * slots[dim + j] + slot_delta[dim + j];
      }
      *step += count;
      break;
    }
    case OptimizerKind::kFtrl:
      for (int j = 0; j < 2 * dim; ++j) slots[j] += slot_delta[j];
      for (int j = 0; j < dim; ++j) w[j] = FtrlWeight(c, lr, slots[dim + j], slots[j]);
      ApplyConstraint(c.constraint, dim, w);
      return;
  }
  // A share of 1 multiplies exactly: the merge of a sole writer stays exact.
  for (int j = 0; j < dim; ++j) w[j] += value_share * delta[j];
  ApplyConstraint(c.constraint, dim, w);
}

void TakeDelta(const OptimizerConfig& c, const float* state, const float* base, int64_t count,
               int dim, float* delta) {
  const int width = StateWidth(c.kind, dim);
  for (int j = 0; j < width; ++j) delta[j] = state[j] - base[j];
  if (c.kind == OptimizerKind::kAdam) {
    // As ApplyDelta decays them: the same float factors, so that the merge
    // of one update adds back exactly what it takes away here.
    const float decay_1 = static_cast<float>(std::pow(double{c.beta_1}, double(count)));
    const float decay_2 = static_cast<float>(std::pow(double{c.beta_2}, double(count)));
    for (int j = 0; j < dim; ++j) {
      delta[dim + j] = state[dim + j] - decay_1 * base[dim + j];
      delta[2 * dim + j] = state[2 * dim + j] - decay_2 * base[2 * dim + j];
    }
  }
  const int squares = NonNegativeSlot(c.kind);
  if (squares < 0) return;
  float* sum = delta + (1 + squares) * dim;
  for (int j = 0; j < dim; ++j) sum[j] = std::max(sum[j], 0.0f);
}

float ConcurrentShare(OptimizerKind kind, int64_t count, int64_t others) {
  if (kind != OptimizerKind::kAdam || others <= 0 || count <= 0) return 1.0f;
  return static_cast<float>(double(count) / double(count + others));
}

int NonNegativeSlot(OptimizerKind kind) {
  switch (kind) {
    case OptimizerKind::kAdagrad:
    case OptimizerKind::kFtrl:
      return 0;  // the accumulator of squared gradients
    case OptimizerKind::kAdam:
      return 1;  // the second moment
    case OptimizerKind::kSGD:
      break;
  }
  return -1;
}

void ApplyUpdates(const OptimizerConfig& config, float learning_rate, const float* grad_sum,
                  int64_t count, int dim, float* row, float* slots, int64_t* step,
                  std::vector<float>* mean) {
  // SGD's steps add up to one step with the sum, unless a constraint
  // projects the row between them.
  if (count <= 1 ||
      (config.kind == OptimizerKind::kSGD && config.constraint.kind == ConstraintKind::kNone)) {
    ApplyUpdate(config, learning_rate, grad_sum, dim, row, slots, step);
    return;
  }
  const float scale = 1.0f / static_cast<float>(count);
  for (int j = 0; j < dim; ++j) (*mean)[j] = grad_sum[j] * scale;
  for (int64_t c = 0; c < count; ++c)
    ApplyUpdate(config, learning_rate, mean->data(), dim, row, slots, step);
}

}  // namespace het

#include "cc_ops/data/core/synthetic_criteo.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>

#include "cc_ops/common/hashing.h"

namespace het {

const int64_t kCriteoKaggleCardinalities[kCriteoCategoricalFields] = {
    1460, 583,   10131227, 2202608, 305,  24,   12517, 633,     3,  93145, 5683,   8351593, 3194,
    27,   14992, 5461306,  10,      5652, 2173, 4,     7046547, 18, 15,    286181, 105,     142572};

namespace {

// Fields that are often empty in Criteo (C19..C26 and a few integers).
constexpr double kIdMissingRate[kCriteoCategoricalFields] = {
    0, 0, 0.03, 0.03, 0, 0.12, 0,    0,    0,    0, 0, 0.03, 0,
    0, 0, 0.03, 0,    0, 0.44, 0.44, 0.03, 0.76, 0, 0, 0.44, 0.44};
constexpr double kCountMissingRate[kCriteoDenseFields] = {0.45, 0,    0.21, 0.22, 0.03, 0.22, 0.04,
                                                          0.0,  0.04, 0.45, 0.04, 0.77, 0.22};
// Small fields keep their full size when scaled down, so that they still
// carry signal in a reduced data set.
constexpr int64_t kMinScaledCardinality = 64;

// The id of Zipf rank `rank` once a field's popularity has moved `shift`
// ids: (rank - shift) mod n, so the ranks slide up the ids and wrap around.
int64_t Drifted(int64_t rank, double shift, int64_t n) {
  const auto moved = static_cast<int64_t>(std::fmod(shift, static_cast<double>(n)));
  return (rank - moved + n) % n;
}

// A counter-based generator: each draw hashes (key, counter).
class Draws {
 public:
  explicit Draws(uint64_t key) : key_(key) {}
  uint64_t Next() { return Mix64(key_ ^ Mix64(++counter_)); }
  double Uniform() { return (Next() >> 11) * 0x1.0p-53; }  // [0, 1)
  double Gaussian() {
    const double u = 1.0 - Uniform();
    return std::sqrt(-2.0 * std::log(u)) * std::cos(6.283185307179586 * Uniform());
  }

 private:
  uint64_t key_;
  uint64_t counter_ = 0;
};

}  // namespace

SyntheticCriteo::SyntheticCriteo(const SyntheticCriteoSpec& spec) : spec_(spec) {
  for (int f = 0; f < kCriteoCategoricalFields; ++f) {
    const int64_t full = kCriteoKaggleCardinalities[f];
    const int64_t scaled = static_cast<int64_t>(std::llround(full * spec.scale));
    cardinalities_[f] = std::max<int64_t>(std::min(full, kMinScaledCardinality), scaled);
    cardinalities_[f] = std::max<int64_t>(1, std::min<int64_t>(cardinalities_[f], 1LL << 32));
    const double n = static_cast<double>(cardinalities_[f]);
    zipf_span_[f] = std::fabs(spec.exponent - 1.0) < 1e-9
                        ? std::log(n + 1.0)
                        : std::pow(n + 1.0, 1.0 - spec.exponent) - 1.0;
    // Criteo's small fields (a device type, say) keep their popularity.
    drifts_[f] = spec.drift > 0 && full > kMinScaledCardinality;
  }
  Draws model(Mix64(spec.seed ^ 0x243f6a8885a308d3ULL));
  for (int d = 0; d < kCriteoDenseFields; ++d) {
    dense_weight_[d] = 0.25 * model.Gaussian();
    dense_mu_[d] = 0.5 + 2.0 * model.Uniform();
    dense_sigma_[d] = 0.5 + model.Uniform();
  }
  for (int f = 0; f < kCriteoCategoricalFields; ++f)
    field_sigma_[f] = 0.15 + 0.25 * model.Uniform();
  bias_ = -1.5;  // about a quarter of labels are 1, as in Criteo
  common_effects_.resize(size_t{kCriteoCategoricalFields} * kCommonIds);
  for (int f = 0; f < kCriteoCategoricalFields; ++f) {
    missing_effect_[f] = Effect(static_cast<uint64_t>(CriteoMissingKey(f)));
    for (int id = 0; id < kCommonIds && id < cardinalities_[f]; ++id) {
      common_effects_[size_t(f) * kCommonIds + id] =
          Effect(static_cast<uint64_t>(CriteoKey(f, static_cast<uint32_t>(id))));
    }
  }
}

double SyntheticCriteo::Effect(uint64_t effect_key) const {
  Draws effect(Mix64(spec_.seed ^ 0x13198a2e03707344ULL) ^ Mix64(effect_key));
  return effect.Gaussian();
}

Status SyntheticCriteo::Create(const SyntheticCriteoSpec& spec,
                               std::unique_ptr<SyntheticCriteo>* out) {
  if (!(spec.scale > 0) || !std::isfinite(spec.scale)) {
    return Status::InvalidArgument("synthetic criteo: scale must be > 0, got " +
                                   std::to_string(spec.scale));
  }
  if (!(spec.exponent > 0) || !std::isfinite(spec.exponent) || spec.exponent > 10) {
    return Status::InvalidArgument("synthetic criteo: zipf exponent must be in (0, 10], got " +
                                   std::to_string(spec.exponent));
  }
  if (!(spec.drift >= 0 && spec.drift <= kMaxDrift)) {  // NaN fails both
    return Status::InvalidArgument("synthetic criteo: drift must be a rate in [0, 1e6], got " +
                                   std::to_string(spec.drift));
  }
  out->reset(new SyntheticCriteo(spec));
  return Status::Ok();
}

void SyntheticCriteo::RowAt(uint64_t stream, uint64_t row, uint64_t position,
                            SyntheticCriteoRow* out) const {
  Draws draws(Mix64(spec_.seed) ^ Mix64(Mix64(stream) + row));
  const double a = spec_.exponent;
  // Ids the popularity has moved by this position (R finite and bounded, so
  // R t is finite for any t).
  const double shift = std::floor(spec_.drift * static_cast<double>(position));
  double logit = bias_;
  for (int d = 0; d < kCriteoDenseFields; ++d) {
    out->count_missing[d] = draws.Uniform() < kCountMissingRate[d];
    const double g = draws.Gaussian();
    out->counts[d] = out->count_missing[d]
                         ? 0
                         : std::max<int64_t>(0, static_cast<int64_t>(std::floor(
                                                    std::exp(dense_mu_[d] + dense_sigma_[d] * g))) -
                                                    1);
    logit += dense_weight_[d] * (std::log1p(static_cast<double>(out->counts[d])) - dense_mu_[d]);
  }
  for (int f = 0; f < kCriteoCategoricalFields; ++f) {
    out->id_missing[f] = draws.Uniform() < kIdMissingRate[f];
    const double u = draws.Uniform();
    double effect;
    if (out->id_missing[f]) {
      out->ids[f] = 0;
      effect = missing_effect_[f];
    } else {
      // Inverse CDF of a power law on [1, n + 1): rank k has weight ~ (k + 1)^-a.
      double x;
      if (std::fabs(a - 1.0) < 1e-9) {
        x = std::exp(u * zipf_span_[f]);
      } else {
        x = std::pow(u * zipf_span_[f] + 1.0, 1.0 / (1.0 - a));
      }
      const int64_t rank = std::min<int64_t>(cardinalities_[f] - 1,
                                             std::max<int64_t>(0, static_cast<int64_t>(x) - 1));
      const int64_t id = drifts_[f] ? Drifted(rank, shift, cardinalities_[f]) : rank;
      out->ids[f] = static_cast<uint32_t>(id);
      effect = id < kCommonIds ? common_effects_[size_t(f) * kCommonIds + size_t(id)]
                               : Effect(static_cast<uint64_t>(CriteoKey(f, out->ids[f])));
    }
    logit += field_sigma_[f] * effect;
  }
  out->logit = logit;
  out->label = draws.Uniform() < 1.0 / (1.0 + std::exp(-logit)) ? 1 : 0;
}

std::string SyntheticCriteo::FormatLine(const SyntheticCriteoRow& row) {
  std::string line = row.label ? "1" : "0";
  char buffer[24];
  for (int d = 0; d < kCriteoDenseFields; ++d) {
    line += '\t';
    if (!row.count_missing[d]) line += std::to_string(row.counts[d]);
  }
  for (int f = 0; f < kCriteoCategoricalFields; ++f) {
    line += '\t';
    if (!row.id_missing[f]) {
      std::snprintf(buffer, sizeof(buffer), "%08x", row.ids[f]);
      line += buffer;
    }
  }
  return line;
}

void SyntheticCriteo::ToRecord(const SyntheticCriteoRow& row, CriteoRecord* out) {
  out->label = static_cast<float>(row.label);
  for (int d = 0; d < kCriteoDenseFields; ++d) {
    out->dense[d] = CriteoDenseValue(row.count_missing[d] ? 0 : row.counts[d]);
  }
  for (int f = 0; f < kCriteoCategoricalFields; ++f) {
    out->keys[f] = row.id_missing[f] ? CriteoMissingKey(f) : CriteoKey(f, row.ids[f]);
  }
}

}  // namespace het

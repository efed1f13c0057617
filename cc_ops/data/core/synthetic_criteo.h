// A deterministic Criteo-like data source: Criteo Kaggle's 26 categorical
// fields with its per-field cardinalities (scaled), Zipf-skewed ids, 13
// count-like integer features, and labels drawn from a hidden logistic model
// over the integer features and per-id effects derived from a hash. Because
// every effect comes from a hash, nothing proportional to the vocabulary is
// held in memory, and any row can be made on any machine: row r of stream s
// depends only on (seed, s, r).
//
// A drifting stream (drift R > 0) moves each large field's popularity past
// its ids: at position t, the id of Zipf rank k is (k - floor(R t)) mod n, so
// every 1/R rows each id slips one rank and the field's least popular id
// (after a while, one no recent row held) becomes its most popular. A row's
// position is its index in its stream, so every stream drifts at the same
// pace; held-out rows may be drawn as at another position. Fields with 64
// ids or fewer in Criteo do not drift. An id's effect on the label stays the
// id's own.
#ifndef HET_TF_DATA_CORE_SYNTHETIC_CRITEO_H_
#define HET_TF_DATA_CORE_SYNTHETIC_CRITEO_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cc_ops/common/status.h"
#include "cc_ops/data/core/criteo_format.h"

namespace het {

// Criteo Kaggle's per-field cardinalities, C1..C26 (33.76M rows in all).
extern const int64_t kCriteoKaggleCardinalities[kCriteoCategoricalFields];

struct SyntheticCriteoSpec {
  uint64_t seed = 0;
  double scale = 1.0;     // multiplies the large fields' cardinalities
  double exponent = 1.1;  // Zipf exponent of the ids (> 0, != 1 handled as a power law)
  double drift = 0;       // ids the popularity moves per row of a stream, in [0, kMaxDrift]
};

// Beyond this the drift is no longer a rate but noise; the bound also keeps
// R t finite for any row index.
constexpr double kMaxDrift = 1e6;

// A sample before it is written out: what a Criteo TSV line holds.
struct SyntheticCriteoRow {
  int label = 0;
  int64_t counts[kCriteoDenseFields] = {};
  bool count_missing[kCriteoDenseFields] = {};
  uint32_t ids[kCriteoCategoricalFields] = {};
  bool id_missing[kCriteoCategoricalFields] = {};
  double logit = 0;  // the hidden model's logit, for the best reachable AUC
};

class SyntheticCriteo {
 public:
  static Status Create(const SyntheticCriteoSpec& spec, std::unique_ptr<SyntheticCriteo>* out);

  // Field f's vocabulary: ids lie in [0, cardinality(f)).
  int64_t cardinality(int field) const { return cardinalities_[field]; }
  // Row `row` of `stream`, drawn as at its own position in the stream...
  void Row(uint64_t stream, uint64_t row, SyntheticCriteoRow* out) const {
    RowAt(stream, row, row, out);
  }
  // ...or as at `position`: the same draws, with the ids' popularity where
  // the drift has moved it by then.
  void RowAt(uint64_t stream, uint64_t row, uint64_t position, SyntheticCriteoRow* out) const;

  // The row as a Criteo TSV line (no newline) and as the reader's record.
  static std::string FormatLine(const SyntheticCriteoRow& row);
  static void ToRecord(const SyntheticCriteoRow& row, CriteoRecord* out);

 private:
  explicit SyntheticCriteo(const SyntheticCriteoSpec& spec);
  SyntheticCriteoSpec spec_;
  int64_t cardinalities_[kCriteoCategoricalFields];
  double dense_weight_[kCriteoDenseFields];
  double dense_mu_[kCriteoDenseFields];
  double dense_sigma_[kCriteoDenseFields];
  double field_sigma_[kCriteoCategoricalFields];
  // Each field's power law, fixed per field: (n + 1)^(1 - a) - 1, and
  // log(n + 1) for a = 1. Computed once, not per row.
  double zipf_span_[kCriteoCategoricalFields];
  bool drifts_[kCriteoCategoricalFields];  // whether the field's popularity moves
  // A key's effect on the logit is a function of the key alone; the power
  // law draws the first ids of a field most of the time, so their effects
  // (and the missing keys') are computed once, not per row.
  static constexpr int kCommonIds = 256;
  double Effect(uint64_t effect_key) const;
  std::vector<double> common_effects_;  // [field][id < kCommonIds]
  double missing_effect_[kCriteoCategoricalFields];
  double bias_ = 0;
};

}  // namespace het

#endif  // HET_TF_DATA_CORE_SYNTHETIC_CRITEO_H_

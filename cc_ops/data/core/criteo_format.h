// Criteo's display-advertising TSV (Kaggle and Terabyte): a label, 13
// integer features and 26 categorical features written as 8 hex digits, tab-separated, any feature
// possibly empty. Parsing is strict: a line that does not fit the format exactly is rejected with
// the reason, so a shifted or truncated line is never read as a sample.
#ifndef HET_TF_DATA_CORE_CRITEO_FORMAT_H_
#define HET_TF_DATA_CORE_CRITEO_FORMAT_H_

#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>

namespace het {

constexpr int kCriteoDenseFields = 13;
constexpr int kCriteoCategoricalFields = 26;

// Keys are salted by field so that equal values of two fields never share a
// row: bits 33 and up hold the field, bit 32 marks an empty value and the low
// 32 bits hold the value itself. The mapping is one to one and reversible.
constexpr int kCriteoFieldShift = 33;
constexpr int64_t kCriteoMissingBit = int64_t{1} << 32;

inline int64_t CriteoKey(int field, uint32_t value) {
  return (static_cast<int64_t>(field) << kCriteoFieldShift) | value;
}
inline int64_t CriteoMissingKey(int field) {
  return (static_cast<int64_t>(field) << kCriteoFieldShift) | kCriteoMissingBit;
}

// An integer feature as the model sees it: log(1 + x), and 0 for x <= 0.
inline float CriteoDenseValue(int64_t x) {
  return x > 0 ? static_cast<float>(std::log1p(static_cast<double>(x))) : 0.0f;
}

struct CriteoRecord {
  float label = 0;
  // log(1 + x) of each integer feature; empty and negative values give 0.
  float dense[kCriteoDenseFields] = {};
  int64_t keys[kCriteoCategoricalFields] = {};
};

// Parses one line (a trailing '\r' is allowed). With has_label false the line
// has no label column (Criteo's unlabeled test files) and label is 0. On
// failure returns false and sets *reason; *out is then unspecified.
bool ParseCriteoLine(std::string_view line, bool has_label, CriteoRecord* out, std::string* reason);

}  // namespace het

#endif  // HET_TF_DATA_CORE_CRITEO_FORMAT_H_

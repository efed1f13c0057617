#include "cc_ops/data/core/criteo_format.h"

#include <limits>

namespace het {
namespace {

bool ParseInteger(std::string_view s, int64_t* out) {
  size_t i = 0;
  const bool negative = !s.empty() && s[0] == '-';
  if (negative) i = 1;
  if (i == s.size()) return false;
  // Accumulate as a negative number so INT64_MIN parses without overflow.
  int64_t value = 0;
  for (; i < s.size(); ++i) {
    const char c = s[i];
    if (c < '0' || c > '9') return false;
    const int digit = c - '0';
    if (value < (std::numeric_limits<int64_t>::min() + digit) / 10) return false;
    value = value * 10 - digit;
  }
  if (!negative) {
    if (value == std::numeric_limits<int64_t>::min()) return false;
    value = -value;
  }
  *out = value;
  return true;
}

// Exactly 8 digits, as Criteo writes them: a line cut inside its last field
// must not read as a shorter value.
bool ParseHex32(std::string_view s, uint32_t* out) {
  if (s.size() != 8) return false;
  uint32_t value = 0;
  for (const char c : s) {
    uint32_t digit;
    if (c >= '0' && c <= '9') {
      digit = c - '0';
    } else if (c >= 'a' && c <= 'f') {
      digit = c - 'a' + 10;
    } else if (c >= 'A' && c <= 'F') {
      digit = c - 'A' + 10;
    } else {
      return false;
    }
    value = (value << 4) | digit;
  }
  *out = value;
  return true;
}

std::string Shown(std::string_view s) {
  constexpr size_t kMax = 24;
  return "'" + std::string(s.substr(0, kMax)) + (s.size() > kMax ? "...'" : "'");
}

}  // namespace

bool ParseCriteoLine(std::string_view line, bool has_label, CriteoRecord* out,
                     std::string* reason) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  const int expected = (has_label ? 1 : 0) + kCriteoDenseFields + kCriteoCategoricalFields;
  int column = 0;
  size_t start = 0;
  while (true) {
    const size_t tab = line.find('\t', start);
    const std::string_view field =
        line.substr(start, tab == std::string_view::npos ? std::string_view::npos : tab - start);
    if (column >= expected) {
      *reason = "more than " + std::to_string(expected) + " tab-separated fields";
      return false;
    }
    const int feature = has_label ? column - 1 : column;
    if (has_label && column == 0) {
      if (field != "0" && field != "1") {
        *reason = "label must be 0 or 1, got " + Shown(field);
        return false;
      }
      out->label = field == "1" ? 1.0f : 0.0f;
    } else if (feature < kCriteoDenseFields) {
      int64_t value = 0;
      if (!field.empty() && !ParseInteger(field, &value)) {
        *reason = "integer feature I" + std::to_string(feature + 1) +
                  " is not an integer: " + Shown(field);
        return false;
      }
      out->dense[feature] = CriteoDenseValue(value);
    } else {
      const int cat = feature - kCriteoDenseFields;
      uint32_t value = 0;
      if (field.empty()) {
        out->keys[cat] = CriteoMissingKey(cat);
      } else if (ParseHex32(field, &value)) {
        out->keys[cat] = CriteoKey(cat, value);
      } else {
        *reason = "categorical feature C" + std::to_string(cat + 1) +
                  " is not 8 hex digits: " + Shown(field);
        return false;
      }
    }
    ++column;
    if (tab == std::string_view::npos) break;
    start = tab + 1;
  }
  if (column != expected) {
    *reason = "expected " + std::to_string(expected) + " tab-separated fields, got " +
              std::to_string(column);
    return false;
  }
  return true;
}

}  // namespace het

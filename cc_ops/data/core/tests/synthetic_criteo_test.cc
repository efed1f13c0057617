#include "cc_ops/data/core/synthetic_criteo.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "cc_ops/common/tests/harness.h"
#include "cc_ops/data/core/criteo_format.h"

namespace {

std::unique_ptr<het::SyntheticCriteo> Make(uint64_t seed, double scale, double exponent) {
  std::unique_ptr<het::SyntheticCriteo> data;
  het::SyntheticCriteoSpec spec;
  spec.seed = seed;
  spec.scale = scale;
  spec.exponent = exponent;
  EXPECT_OK(het::SyntheticCriteo::Create(spec, &data));
  return data;
}

// AUC by ranking: the chance a random positive scores above a random negative.
double Auc(std::vector<std::pair<double, int>> scored) {
  std::sort(scored.begin(), scored.end());
  double rank_sum = 0, positives = 0;
  for (size_t i = 0; i < scored.size(); ++i) {
    if (scored[i].second) {
      rank_sum += static_cast<double>(i + 1);
      ++positives;
    }
  }
  const double negatives = scored.size() - positives;
  return (rank_sum - positives * (positives + 1) / 2) / (positives * negatives);
}

}  // namespace

HET_TEST(SyntheticRowsAreDeterministicAndStreamsDiffer) {
  auto a = Make(3, 0.01, 1.1), b = Make(3, 0.01, 1.1), c = Make(4, 0.01, 1.1);
  het::SyntheticCriteoRow x, y, z, w;
  a->Row(0, 17, &x);
  b->Row(0, 17, &y);
  c->Row(0, 17, &z);
  a->Row(1, 17, &w);
  EXPECT_EQ(het::SyntheticCriteo::FormatLine(x), het::SyntheticCriteo::FormatLine(y));
  EXPECT_TRUE(het::SyntheticCriteo::FormatLine(x) != het::SyntheticCriteo::FormatLine(z));
  EXPECT_TRUE(het::SyntheticCriteo::FormatLine(x) != het::SyntheticCriteo::FormatLine(w));
}

HET_TEST(SyntheticLinesParseBackToTheSameRecord) {
  auto data = Make(1, 0.001, 1.1);
  for (uint64_t r = 0; r < 2000; ++r) {
    het::SyntheticCriteoRow row;
    data->Row(5, r, &row);
    het::CriteoRecord direct, parsed;
    het::SyntheticCriteo::ToRecord(row, &direct);
    std::string why;
    EXPECT_TRUE(het::ParseCriteoLine(het::SyntheticCriteo::FormatLine(row), true, &parsed, &why));
    EXPECT_EQ(parsed.label, direct.label);
    for (int d = 0; d < het::kCriteoDenseFields; ++d) EXPECT_EQ(parsed.dense[d], direct.dense[d]);
    for (int f = 0; f < het::kCriteoCategoricalFields; ++f) {
      EXPECT_EQ(parsed.keys[f], direct.keys[f]);
      EXPECT_TRUE(row.id_missing[f] || row.ids[f] < data->cardinality(f));
    }
  }
}

HET_TEST(SyntheticCardinalitiesScaleAndIdsAreSkewed) {
  auto full = Make(0, 1.0, 1.1), small = Make(0, 0.01, 1.1);
  int64_t total = 0;
  for (int f = 0; f < het::kCriteoCategoricalFields; ++f) {
    EXPECT_EQ(full->cardinality(f), het::kCriteoKaggleCardinalities[f]);
    total += full->cardinality(f);
  }
  EXPECT_EQ(total, int64_t{33762577});
  EXPECT_EQ(small->cardinality(2), int64_t{101312});
  EXPECT_EQ(small->cardinality(8), int64_t{3});  // small fields keep their size
  // Field C3 (101312 ids): the 10% most popular ids take most of the draws.
  std::vector<int64_t> counts(small->cardinality(2), 0);
  int drawn = 0;
  for (uint64_t r = 0; r < 100000; ++r) {
    het::SyntheticCriteoRow row;
    small->Row(0, r, &row);
    if (!row.id_missing[2]) {
      ++counts[row.ids[2]];
      ++drawn;
    }
  }
  std::sort(counts.rbegin(), counts.rend());
  int64_t top = 0;
  for (size_t i = 0; i < counts.size() / 10; ++i) top += counts[i];
  EXPECT_TRUE(top > 0.6 * drawn);
}

HET_TEST(SyntheticLabelsCarryALearnableSignal) {
  auto data = Make(0, 0.01, 1.1);
  std::vector<std::pair<double, int>> scored;
  int positives = 0;
  for (uint64_t r = 0; r < 50000; ++r) {
    het::SyntheticCriteoRow row;
    data->Row(0, r, &row);
    scored.emplace_back(row.logit, row.label);
    positives += row.label;
  }
  const double rate = positives / 50000.0;
  EXPECT_TRUE(rate > 0.15 && rate < 0.4);
  const double best = Auc(scored);
  EXPECT_TRUE(best > 0.78 && best < 0.95);
}

HET_TEST(SyntheticRejectsBadSpecs) {
  std::unique_ptr<het::SyntheticCriteo> data;
  het::SyntheticCriteoSpec spec;
  spec.scale = 0;
  EXPECT_INVALID(het::SyntheticCriteo::Create(spec, &data), "scale");
  spec.scale = 1;
  spec.exponent = -1;
  EXPECT_INVALID(het::SyntheticCriteo::Create(spec, &data), "exponent");
}

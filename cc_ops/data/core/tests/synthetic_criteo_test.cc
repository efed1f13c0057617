#include "cc_ops/data/core/synthetic_criteo.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "cc_ops/common/hashing.h"
#include "cc_ops/common/tests/harness.h"
#include "cc_ops/data/core/criteo_format.h"

namespace {

std::unique_ptr<het::SyntheticCriteo> Make(uint64_t seed, double scale, double exponent,
                                           double drift = 0) {
  std::unique_ptr<het::SyntheticCriteo> data;
  het::SyntheticCriteoSpec spec;
  spec.seed = seed;
  spec.scale = scale;
  spec.exponent = exponent;
  spec.drift = drift;
  EXPECT_OK(het::SyntheticCriteo::Create(spec, &data));
  return data;
}

// A digest of n rows of a stream from `first`: every TSV line's bytes and the
// hidden logit's bits.
uint64_t Digest(const het::SyntheticCriteo& data, uint64_t stream, uint64_t first, uint64_t n) {
  uint64_t digest = 0;
  for (uint64_t r = first; r < first + n; ++r) {
    het::SyntheticCriteoRow row;
    data.Row(stream, r, &row);
    for (char c : het::SyntheticCriteo::FormatLine(row))
      digest = het::Mix64(digest ^ static_cast<unsigned char>(c));
    uint64_t logit_bits;
    std::memcpy(&logit_bits, &row.logit, sizeof(logit_bits));
    digest = het::Mix64(digest ^ logit_bits);
  }
  return digest;
}

// The `top` ids field f draws most often in rows [first, first + n) of stream 0.
std::set<uint32_t> HotIds(const het::SyntheticCriteo& data, int f, uint64_t first, uint64_t n,
                          size_t top) {
  std::map<uint32_t, int> counts;
  for (uint64_t r = first; r < first + n; ++r) {
    het::SyntheticCriteoRow row;
    data.Row(0, r, &row);
    if (!row.id_missing[f]) ++counts[row.ids[f]];
  }
  std::vector<std::pair<int, uint32_t>> by_count;
  for (const auto& [id, count] : counts) by_count.emplace_back(-count, id);
  std::sort(by_count.begin(), by_count.end());
  std::set<uint32_t> hot;
  for (size_t i = 0; i < top && i < by_count.size(); ++i) hot.insert(by_count[i].second);
  return hot;
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
  spec.exponent = 1.1;
  for (double drift : {-1e-9, std::nan(""), HUGE_VAL, 2 * het::kMaxDrift}) {
    spec.drift = drift;
    EXPECT_INVALID(het::SyntheticCriteo::Create(spec, &data), "drift");
  }
}

HET_TEST(SyntheticStillStreamKeepsTheRowsOfBeforeDrift) {
  // Digests of rows the generator made before it had a drift: a still stream
  // (drift 0, the default) must make them bit for bit, in both branches of
  // the power law and at rows far into a stream.
  struct Case {
    uint64_t seed;
    double scale, exponent;
    uint64_t stream0, stream5, held_out, far;
  };
  const Case cases[] = {
      {3, 0.01, 1.1, 0x420cee26775c65efULL, 0x3bbb135d8a0e392cULL, 0x39a7274399e4c8e4ULL,
       0xce768916f2cf7cbcULL},
      {7, 1.0, 1.0, 0x8232d4510034547aULL, 0x5dc86e559060c30cULL, 0x7b54d0bb3f20fcb6ULL,
       0x13fdd637e91c9f4aULL},
      {0, 0.001, 1.3, 0x677c02d838df6826ULL, 0x7f144f9d12e19797ULL, 0x333c01ce018ea473ULL,
       0x9629c604a188d667ULL},
  };
  for (const Case& c : cases) {
    auto data = Make(c.seed, c.scale, c.exponent, 0);
    EXPECT_EQ(Digest(*data, 0, 0, 3000), c.stream0);
    EXPECT_EQ(Digest(*data, 5, 0, 3000), c.stream5);
    EXPECT_EQ(Digest(*data, uint64_t{1} << 40, 0, 3000), c.held_out);
    EXPECT_EQ(Digest(*data, 1, 123456789, 1000), c.far);
    // Without drift a position changes nothing.
    het::SyntheticCriteoRow at_own, elsewhere;
    data->Row(2, 40, &at_own);
    data->RowAt(2, 40, uint64_t{1} << 50, &elsewhere);
    EXPECT_EQ(het::SyntheticCriteo::FormatLine(at_own),
              het::SyntheticCriteo::FormatLine(elsewhere));
  }
}

HET_TEST(SyntheticDriftMovesEachLargeFieldsRanksByRPerRow) {
  // The definition, row by row against the still stream: the same draws,
  // with a large field's id (rank - floor(R t)) mod n and a small field's
  // id unmoved.
  const double drift = 0.37;
  auto still = Make(9, 0.01, 1.1, 0), drifting = Make(9, 0.01, 1.1, drift);
  int moved = 0;
  for (uint64_t r : {uint64_t{0}, uint64_t{2}, uint64_t{3}, uint64_t{1000}, uint64_t{123457},
                     uint64_t{1} << 33}) {
    het::SyntheticCriteoRow a, b;
    still->Row(4, r, &a);
    drifting->Row(4, r, &b);
    const auto shift = static_cast<int64_t>(std::floor(drift * static_cast<double>(r)));
    for (int f = 0; f < het::kCriteoCategoricalFields; ++f) {
      const int64_t n = drifting->cardinality(f);
      EXPECT_EQ(b.id_missing[f], a.id_missing[f]);
      if (a.id_missing[f]) continue;
      EXPECT_TRUE(b.ids[f] < n);
      const bool large = het::kCriteoKaggleCardinalities[f] > 64;
      const int64_t expected = large ? ((int64_t{a.ids[f]} - shift) % n + n) % n : a.ids[f];
      EXPECT_EQ(int64_t{b.ids[f]}, expected);
      moved += b.ids[f] != a.ids[f];
    }
    for (int d = 0; d < het::kCriteoDenseFields; ++d) EXPECT_EQ(b.counts[d], a.counts[d]);
  }
  EXPECT_TRUE(moved > 50);
}

HET_TEST(SyntheticDriftReplacesTheHotIdsAndKeepsTheSignal) {
  // 0.01 ids a row: by row 1M the ranking of C3 (101312 ids) has moved
  // 10000 ids, far past its hot ids, which a window early in the stream and
  // one late share none of.
  auto data = Make(0, 0.01, 1.1, 0.01);
  const std::set<uint32_t> early = HotIds(*data, 2, 0, 20000, 50);
  const std::set<uint32_t> late = HotIds(*data, 2, 1000000, 20000, 50);
  EXPECT_EQ(early.size(), size_t{50});
  EXPECT_EQ(late.size(), size_t{50});
  for (uint32_t id : late) EXPECT_TRUE(!early.count(id));
  // Rows depend on (seed, stream, row) alone, as without drift.
  auto again = Make(0, 0.01, 1.1, 0.01);
  EXPECT_EQ(Digest(*data, 3, 500000, 200), Digest(*again, 3, 500000, 200));
  EXPECT_TRUE(Digest(*data, 3, 500000, 200) != Digest(*data, 4, 500000, 200));
  // A row drawn as at its own position is the stream's row; elsewhere, not.
  het::SyntheticCriteoRow x, y, z;
  data->Row(1, 1000000, &x);
  data->RowAt(1, 1000000, 1000000, &y);
  data->RowAt(1, 1000000, 0, &z);
  EXPECT_EQ(het::SyntheticCriteo::FormatLine(x), het::SyntheticCriteo::FormatLine(y));
  EXPECT_TRUE(het::SyntheticCriteo::FormatLine(x) != het::SyntheticCriteo::FormatLine(z));
  // Effects stay with the ids: labels still follow the hidden model.
  std::vector<std::pair<double, int>> scored;
  for (uint64_t r = 1000000; r < 1020000; ++r) {
    het::SyntheticCriteoRow row;
    data->Row(0, r, &row);
    scored.emplace_back(row.logit, row.label);
  }
  EXPECT_TRUE(Auc(scored) > 0.75);
}

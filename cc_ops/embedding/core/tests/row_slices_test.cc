#include "cc_ops/embedding/core/row_slices.h"

#include <cstring>
#include <limits>
#include <map>
#include <random>
#include <vector>

#include "cc_ops/common/tests/harness.h"

namespace {

// n slices of dim floats with their places among `count` rows (Zipf-like:
// low rows repeat most), as a lookup's gradient gives them.
struct Slices {
  std::vector<float> values;
  std::vector<int32_t> at;
};

Slices RandomSlices(int64_t n, int64_t dim, int32_t count, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal;
  Slices s;
  for (int64_t i = 0; i < n; ++i) {
    const int32_t low = static_cast<int32_t>(rng() % count);
    s.at.push_back(static_cast<int32_t>(rng() % (low + 1)));
    for (int64_t d = 0; d < dim; ++d) s.values.push_back(normal(rng));
  }
  return s;
}

}  // namespace

HET_TEST(SumSlicesAddsEachRowsSlicesInOrder) {
  const int64_t n = 5000, dim = 16;
  const int32_t count = 700;
  const Slices s = RandomSlices(n, dim, count, 3);
  // The oracle: each row's slices listed apart, then added in their order.
  std::map<int32_t, std::vector<int64_t>> rows;
  for (int64_t i = 0; i < n; ++i) rows[s.at[i]].push_back(i);
  std::vector<float> sums(count * dim, -1.0f);
  bool finite = false;
  EXPECT_OK(het::SumSlices("t", s.values.data(), s.at.data(), n, dim, count, sums.data(), &finite));
  EXPECT_TRUE(finite);
  for (int32_t j = 0; j < count; ++j) {
    for (int64_t d = 0; d < dim; ++d) {
      float expected = 0.0f;
      for (int64_t i : rows[j]) expected += s.values[i * dim + d];
      EXPECT_TRUE(std::memcmp(&sums[j * dim + d], &expected, sizeof(float)) == 0);
    }
  }
}

HET_TEST(SumSlicesTellsWhetherEverySumIsFinite) {
  const float big = std::numeric_limits<float>::max();
  // Row 0: two finite slices whose sum overflows; row 1: finite.
  const std::vector<float> values = {big, 1.0f, big, 1.0f, 2.0f, 3.0f};
  std::vector<float> sums(4);
  bool finite = true;
  const std::vector<int32_t> overflowing = {0, 0, 1};
  EXPECT_OK(het::SumSlices("t", values.data(), overflowing.data(), 3, 2, 2, sums.data(), &finite));
  EXPECT_TRUE(!finite);
  const std::vector<int32_t> apart = {0, 1, 1};
  EXPECT_OK(het::SumSlices("t", values.data(), apart.data(), 3, 2, 2, sums.data(), &finite));
  EXPECT_TRUE(finite);
  const std::vector<float> nan = {std::nanf(""), 0.0f};
  const std::vector<int32_t> one = {0};
  EXPECT_OK(het::SumSlices("t", nan.data(), one.data(), 1, 2, 1, sums.data(), &finite));
  EXPECT_TRUE(!finite);
}

HET_TEST(SumSlicesRefusesAPlaceOutsideItsRowsAndWritesNothing) {
  const std::vector<float> values = {1.0f, 2.0f, 3.0f};
  for (int32_t bad : {-1, 2, 1 << 30}) {
    const std::vector<int32_t> at = {0, 1, bad};
    std::vector<float> sums = {7.0f, 7.0f};
    bool finite = false;
    EXPECT_INVALID(
        het::SumSlices("HetEmbedding 'e'", values.data(), at.data(), 3, 1, 2, sums.data(), &finite),
        "HetEmbedding 'e': place 2 is row");
    EXPECT_EQ(sums[0], 7.0f);
    EXPECT_EQ(sums[1], 7.0f);
  }
  std::vector<float> none;
  bool finite = false;
  EXPECT_OK(het::SumSlices("t", nullptr, nullptr, 0, 4, 0, none.data(), &finite));
  EXPECT_TRUE(finite);
}

HET_TEST(ExpandRowsGivesEachPlaceItsRowAndRefusesOneOutside) {
  const int64_t dim = 3;
  const std::vector<float> rows = {0, 1, 2, 10, 11, 12};
  const std::vector<int32_t> at = {1, 0, 1, 1};
  std::vector<float> out(at.size() * dim, -1.0f);
  EXPECT_OK(het::ExpandRows("t", rows.data(), 2, dim, at.data(), 4, out.data()));
  const std::vector<float> expected = {10, 11, 12, 0, 1, 2, 10, 11, 12, 10, 11, 12};
  EXPECT_TRUE(out == expected);
  const std::vector<int32_t> bad = {0, 2};
  std::vector<float> untouched(2 * dim, -1.0f);
  EXPECT_INVALID(
      het::ExpandRows("HetEmbedding 'e'", rows.data(), 2, dim, bad.data(), 2, untouched.data()),
      "HetEmbedding 'e': place 1 is row 2, outside the 2 rows");
  EXPECT_TRUE(untouched == std::vector<float>(2 * dim, -1.0f));
}

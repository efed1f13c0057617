#include "cc_ops/schedule/core/sample_assignment.h"

#include <random>
#include <vector>

#include "cc_ops/common/tests/harness.h"

HET_TEST(SamplesGoWhereTheirRowsAreCached) {
  // Worker 0 read samples 0 and 1, worker 1 samples 2 and 3.
  const std::vector<int32_t> scores = {0, 5,   // sample 0: all its rows on worker 1
                                       3, 0,   // sample 1: stays
                                       4, 0,   // sample 2: to worker 0
                                       0, 2};  // sample 3: stays
  const std::vector<int64_t> sizes = {2, 2};
  std::vector<int32_t> dest(4, -1);
  EXPECT_OK(het::AssignSamples(scores.data(), 4, 2, sizes.data(), 0, dest.data()));
  EXPECT_TRUE(dest == (std::vector<int32_t>{1, 0, 0, 1}));
}

HET_TEST(EveryWorkerKeepsItsCountAndTiesStayHome) {
  std::mt19937 rng(7);
  const std::vector<int64_t> sizes = {5, 3, 0, 4};
  const int64_t n = 12;
  std::vector<int32_t> scores(n * 4);
  for (auto& s : scores) s = rng() % 4;
  std::vector<int32_t> dest(n, -1), again(n, -1);
  EXPECT_OK(het::AssignSamples(scores.data(), n, 4, sizes.data(), 1, dest.data()));
  EXPECT_OK(het::AssignSamples(scores.data(), n, 4, sizes.data(), 1, again.data()));
  EXPECT_TRUE(dest == again);
  std::vector<int64_t> taken(4, 0);
  for (int32_t d : dest) {
    EXPECT_TRUE(d >= 0 && d < 4);
    ++taken[d];
  }
  EXPECT_TRUE(taken == sizes);
  // Equal scores everywhere: nothing moves.
  std::vector<int32_t> flat(n * 4, 2);
  EXPECT_OK(het::AssignSamples(flat.data(), n, 4, sizes.data(), 0, dest.data()));
  EXPECT_TRUE(dest == (std::vector<int32_t>{0, 0, 0, 0, 0, 1, 1, 1, 3, 3, 3, 3}));
}

HET_TEST(TheStayBonusKeepsSamplesThatGainLittle) {
  const std::vector<int32_t> scores = {0, 1, 1, 0};  // each would gain one row by swapping
  const std::vector<int64_t> sizes = {1, 1};
  std::vector<int32_t> dest(2);
  EXPECT_OK(het::AssignSamples(scores.data(), 2, 2, sizes.data(), 0, dest.data()));
  EXPECT_TRUE(dest == (std::vector<int32_t>{1, 0}));
  EXPECT_OK(het::AssignSamples(scores.data(), 2, 2, sizes.data(), 1, dest.data()));
  EXPECT_TRUE(dest == (std::vector<int32_t>{0, 1}));
}

HET_TEST(BadAssignmentsAreRefused) {
  const std::vector<int32_t> scores = {1, 0, -1, 0};
  std::vector<int32_t> dest(2);
  const std::vector<int64_t> sizes = {1, 1}, short_sizes = {1, 0};
  EXPECT_INVALID(het::AssignSamples(scores.data(), 2, 2, sizes.data(), 0, dest.data()),
                 "negative score");
  const std::vector<int32_t> good = {1, 0, 0, 1};
  EXPECT_INVALID(het::AssignSamples(good.data(), 2, 2, short_sizes.data(), 0, dest.data()),
                 "read 1 samples");
  EXPECT_INVALID(het::AssignSamples(good.data(), 2, 2, sizes.data(), -1, dest.data()),
                 "stay bonus");
}

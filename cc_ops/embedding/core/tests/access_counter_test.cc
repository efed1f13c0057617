#include "cc_ops/embedding/core/access_counter.h"

#include <algorithm>
#include <map>
#include <random>
#include <vector>

#include "cc_ops/common/tests/harness.h"

namespace {

std::unique_ptr<het::AccessCounter> MakeCounter(int64_t vocabulary_size) {
  het::AccessCounterConfig config;
  config.table_name = "emb";
  config.vocabulary_size = vocabulary_size;
  std::unique_ptr<het::AccessCounter> counter;
  if (!het::AccessCounter::Create(config, &counter).ok()) std::abort();
  return counter;
}

}  // namespace

HET_TEST(AccessCountsAreExactAndTheHottestComeInADeterminedOrder) {
  auto counter = MakeCounter(-1);
  std::mt19937_64 rng(5);
  std::map<int64_t, int64_t> expected;
  int64_t total = 0;
  for (int batch = 0; batch < 50; ++batch) {
    std::vector<int64_t> ids(1000);
    for (auto& id : ids) {
      id = static_cast<int64_t>(rng() % 3000) - 1500;  // negatives too: a dynamic table's
      ++expected[id];
    }
    EXPECT_OK(counter->Add(ids.data(), static_cast<int64_t>(ids.size())));
    total += static_cast<int64_t>(ids.size());
  }
  EXPECT_EQ(counter->total(), total);
  EXPECT_EQ(counter->distinct(), static_cast<int64_t>(expected.size()));
  std::vector<std::pair<int64_t, int64_t>> want(expected.begin(), expected.end());
  std::sort(want.begin(), want.end(), [](const auto& a, const auto& b) {
    return a.second != b.second ? a.second > b.second : a.first < b.first;
  });
  std::vector<int64_t> keys, counts;
  counter->Hottest(100, &keys, &counts);
  EXPECT_EQ(keys.size(), 100u);
  for (size_t i = 0; i < keys.size(); ++i) {
    EXPECT_EQ(keys[i], want[i].first);
    EXPECT_EQ(counts[i], want[i].second);
  }
  counter->Hottest(1 << 20, &keys, &counts);  // more than there are: all of them
  EXPECT_EQ(keys.size(), expected.size());
  counter->Clear();
  EXPECT_EQ(counter->total(), 0);
  counter->Hottest(10, &keys, &counts);
  EXPECT_TRUE(keys.empty());
}

HET_TEST(AccessCountsRefuseIdsOutsideTheVocabularyAndCountNothing) {
  auto counter = MakeCounter(10);
  const std::vector<int64_t> ids = {1, 2, 10};
  EXPECT_INVALID(counter->Add(ids.data(), 3), "table 'emb'");
  EXPECT_EQ(counter->total(), 0);
  EXPECT_EQ(counter->distinct(), 0);
  het::AccessCounterConfig bad;
  bad.table_name = "emb";
  bad.vocabulary_size = 0;
  std::unique_ptr<het::AccessCounter> none;
  EXPECT_INVALID(het::AccessCounter::Create(bad, &none), "vocabulary_size");
}

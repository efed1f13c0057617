#include "cc_ops/schedule/core/key_summary.h"

#include <memory>
#include <random>
#include <unordered_set>
#include <vector>

#include "cc_ops/common/tests/harness.h"

namespace {

std::vector<bool> Holds(const std::vector<uint64_t>& words, const std::vector<int64_t>& keys) {
  std::unique_ptr<bool[]> held(new bool[keys.size()]);
  het::KeySummaryHolds(words.data(), static_cast<int64_t>(words.size()), keys.data(),
                       static_cast<int64_t>(keys.size()), held.get());
  return std::vector<bool>(held.get(), held.get() + keys.size());
}

}  // namespace

HET_TEST(ASummaryHoldsEveryKeyItWasBuiltFromAndFewOthers) {
  std::mt19937_64 rng(11);
  std::vector<int64_t> keys;
  std::unordered_set<int64_t> in;
  while (keys.size() < 20000) {
    const int64_t key = static_cast<int64_t>(rng() >> 1) - (int64_t{1} << 61);
    if (in.insert(key).second) keys.push_back(key);
  }
  std::vector<uint64_t> words(het::KeySummaryWords(keys.size()));
  EXPECT_EQ(words.size(), (20000u * 10 + 63) / 64);
  het::BuildKeySummary(keys.data(), keys.size(), words.data());
  for (bool held : Holds(words, keys)) EXPECT_TRUE(held);
  // Keys it was not built from: consecutive ones, as a table's ids are.
  std::vector<int64_t> others;
  for (int64_t k = 0; others.size() < 100000; ++k) {
    if (!in.count(k)) others.push_back(k);
  }
  int64_t false_held = 0;
  for (bool held : Holds(words, others)) false_held += held;
  // 10 bits a key and 7 probes give about 0.8%.
  EXPECT_TRUE(false_held < 1500);
}

HET_TEST(AnEmptySummaryHoldsNothing) {
  EXPECT_EQ(het::KeySummaryWords(0), 0);
  const std::vector<int64_t> keys = {0, 1, -5};
  for (bool held : Holds({}, keys)) EXPECT_TRUE(!held);
  // A summary of one key is one word, and tells it from its neighbours.
  std::vector<uint64_t> one(het::KeySummaryWords(1));
  EXPECT_EQ(one.size(), 1u);
  const int64_t key = 42;
  het::BuildKeySummary(&key, 1, one.data());
  std::vector<int64_t> neighbours;
  for (int64_t k = 0; k < 100; ++k) neighbours.push_back(k);
  const std::vector<bool> held = Holds(one, neighbours);
  for (int64_t k = 0; k < 100; ++k) EXPECT_TRUE(held[k] == (k == 42));
}

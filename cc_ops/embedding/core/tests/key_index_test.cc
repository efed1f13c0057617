#include "cc_ops/embedding/core/key_index.h"

#include <random>
#include <unordered_map>

#include "cc_ops/common/tests/harness.h"

HET_TEST(KeyIndexMatchesUnorderedMapUnderRandomInsertsAndErases) {
  het::KeyIndex index;
  std::unordered_map<int64_t, uint32_t> reference;
  std::mt19937_64 rng(7);
  for (int step = 0; step < 200000; ++step) {
    // A small key range forces long probe chains, wrap-around and re-use.
    const int64_t key = static_cast<int64_t>(rng() % 3000) - 1500 + (rng() % 2 ? INT64_MIN / 2 : 0);
    const int op = rng() % 3;
    if (op == 0) {
      const uint32_t v = static_cast<uint32_t>(rng() % 1000);
      const uint32_t got = index.Insert(key, v);
      auto it = reference.emplace(key, v).first;
      EXPECT_EQ(got, it->second);
    } else if (op == 1) {
      EXPECT_EQ(index.Erase(key), reference.erase(key) == 1);
    } else {
      auto it = reference.find(key);
      EXPECT_EQ(index.Find(key), it == reference.end() ? het::KeyIndex::kAbsent : it->second);
    }
  }
  EXPECT_EQ(index.size(), reference.size());
  for (const auto& kv : reference) EXPECT_EQ(index.Find(kv.first), kv.second);
}

HET_TEST(KeyIndexHandlesExtremeKeys) {
  het::KeyIndex index;
  index.Insert(INT64_MIN, 1);
  index.Insert(INT64_MAX, 2);
  index.Insert(0, 3);
  index.Set(0, 4);
  EXPECT_EQ(index.Find(INT64_MIN), 1u);
  EXPECT_EQ(index.Find(INT64_MAX), 2u);
  EXPECT_EQ(index.Find(0), 4u);
  EXPECT_EQ(index.Find(-1), het::KeyIndex::kAbsent);
}

HET_TEST(KeyIndexResetEmptiesShrinksAndStillGrows) {
  het::KeyIndex index;
  for (int64_t k = 0; k < 10000; ++k) index.Insert(k, static_cast<uint32_t>(k));
  const size_t grown = index.MemoryBytes();
  // Sized for far fewer keys: it shrinks, empty.
  index.Reset(100);
  EXPECT_EQ(index.size(), 0u);
  EXPECT_TRUE(index.MemoryBytes() * 8 < grown);
  EXPECT_EQ(index.Find(5), het::KeyIndex::kAbsent);
  // More keys than it was sized for: it grows as Insert needs.
  for (int64_t k = 0; k < 5000; ++k) index.Insert(k * 7, static_cast<uint32_t>(k));
  EXPECT_EQ(index.size(), 5000u);
  for (int64_t k = 0; k < 5000; ++k) EXPECT_EQ(index.Find(k * 7), static_cast<uint32_t>(k));
  // Sized for about as many keys as it holds room for: emptied in place.
  const size_t before = index.MemoryBytes();
  index.Reset(5000);
  EXPECT_EQ(index.MemoryBytes(), before);
  EXPECT_EQ(index.size(), 0u);
  EXPECT_EQ(index.Find(7), het::KeyIndex::kAbsent);
}

#include "cc_ops/embedding/core/staged_batches.h"

#include <algorithm>
#include <deque>
#include <random>
#include <vector>

#include "cc_ops/common/tests/harness.h"

namespace {

// The staged batches kept plainly: each key's next read found by scanning
// the batches not taken, oldest first.
struct Plain {
  struct Batch {
    std::vector<int64_t> ids;
    uint32_t number;
    bool taken;
  };
  std::deque<Batch> batches;
  uint32_t NextRead(int64_t key) const {
    for (const Batch& b : batches) {
      if (b.taken) continue;
      for (int64_t id : b.ids) {
        if (id == key) return b.number;
      }
    }
    return het::StagedBatches::kNoRead;
  }
};

// Next gives the batch the next step takes (the oldest not taken) as a
// lookup deduplicates it, and nothing for other ids: that batch with one id
// changed, or with one more.
void CheckNext(const het::StagedBatches& staged, const Plain& plain, std::mt19937_64& rng) {
  const Plain::Batch* next = nullptr;
  for (const Plain::Batch& b : plain.batches) {
    if (!b.taken) {
      next = &b;
      break;
    }
  }
  std::vector<int64_t> keys;
  std::vector<int32_t> inverse;
  if (next == nullptr) {
    const std::vector<int64_t> any = {1};
    EXPECT_TRUE(!staged.Next(any.data(), 1, &keys, &inverse));
    return;
  }
  const std::vector<int64_t>& ids = next->ids;
  EXPECT_TRUE(staged.Next(ids.data(), ids.size(), &keys, &inverse));
  std::vector<int64_t> expected_keys;
  std::vector<int32_t> expected_inverse;
  for (int64_t id : ids) {
    const auto at = std::find(expected_keys.begin(), expected_keys.end(), id);
    expected_inverse.push_back(static_cast<int32_t>(at - expected_keys.begin()));
    if (at == expected_keys.end()) expected_keys.push_back(id);
  }
  EXPECT_TRUE(keys == expected_keys);
  EXPECT_TRUE(inverse == expected_inverse);
  std::vector<int64_t> changed = ids;
  changed[rng() % changed.size()] += 1000;
  EXPECT_TRUE(!staged.Next(changed.data(), changed.size(), &keys, &inverse));
  std::vector<int64_t> longer = ids;
  longer.push_back(ids.front());
  EXPECT_TRUE(!staged.Next(longer.data(), longer.size(), &keys, &inverse));
}

}  // namespace

// Batches staged, taken in order, skipped (staged and never trained), taken
// by position, repeated back to back and pushed out past the 80 kept: every
// key's next read is the first batch not taken that reads it, and the
// batches returned after a taken one are the plain scan's; the next batch
// to take comes deduplicated as a lookup would.
HET_TEST(StagedBatchesNextReadsMatchAPlainScan) {
  het::StagedBatches staged;
  Plain plain;
  std::mt19937_64 rng(3);
  uint32_t number = 0;
  std::vector<int64_t> moved;
  for (int round = 0; round < 2000; ++round) {
    // First only staged, past the 80 kept: the oldest, never taken, go.
    const int op = round < 150 ? 0 : static_cast<int>(rng() % 4);
    if (op < 2 || plain.batches.empty()) {
      std::vector<int64_t> ids(1 + rng() % 6);
      for (int64_t& id : ids) id = static_cast<int64_t>(rng() % 40);
      if (rng() % 8 == 0 && !plain.batches.empty()) ids = plain.batches.back().ids;
      staged.Add(ids.data(), ids.size(), &moved);
      if (plain.batches.size() == het::StagedBatches::kMaxStaged) plain.batches.pop_front();
      plain.batches.push_back({ids, number++, false});
    } else {
      // A step takes a staged batch: the next one, or one further on (the
      // batches between were never trained), or, by position, an unstaged one.
      size_t from = plain.batches.front().taken ? 1 : 0;
      const bool by_position = op == 3;
      std::vector<int64_t> current = {1000};
      size_t at = plain.batches.size();
      if (!by_position && from < plain.batches.size()) {
        at = from + rng() % std::min<size_t>(3, plain.batches.size() - from);
        current = plain.batches[at].ids;
        // Content finds the first equal batch.
        for (size_t i = from; i < at; ++i) {
          if (plain.batches[i].ids == current) at = i;
        }
      } else if (by_position) {
        at = from;
      }
      const std::vector<int64_t> after =
          staged.Take(current.data(), current.size(), 2, by_position, &moved);
      std::vector<int64_t> expected;
      if (at < plain.batches.size()) {
        plain.batches.erase(plain.batches.begin(), plain.batches.begin() + at);
        plain.batches.front().taken = true;
        for (size_t i = 1; i < plain.batches.size() && i <= 2; ++i) {
          std::vector<int64_t> keys;
          for (int64_t id : plain.batches[i].ids) {
            if (std::find(keys.begin(), keys.end(), id) == keys.end()) keys.push_back(id);
          }
          expected.insert(expected.end(), keys.begin(), keys.end());
        }
      }
      EXPECT_TRUE(after == expected);
    }
    for (int64_t key = 0; key < 40; ++key) EXPECT_EQ(staged.NextRead(key), plain.NextRead(key));
    CheckNext(staged, plain, rng);
  }
  EXPECT_TRUE(number > het::StagedBatches::kMaxStaged);
}

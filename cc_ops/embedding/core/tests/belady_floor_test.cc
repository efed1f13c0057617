// The Belady floor's replay (belady_floor.h) against brute force: on small
// random traces, no sequence of eviction choices that obeys the same rules
// (every row of a step cached for it when they fit; past that, any rows
// kept) misses less than the replay. Its bytes are the messages' encoded
// sizes.
#include "cc_ops/embedding/core/belady_floor.h"

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <vector>

#include "cc_ops/common/tests/harness.h"
#include "cc_ops/embedding/core/wire_sizes.h"

namespace {

using Trace = std::vector<std::vector<int64_t>>;  // each step's keys, repeats allowed

het::FloorConfig Config(int64_t capacity, int width) {
  het::FloorConfig config;
  config.capacity = capacity;
  config.width = width;
  return config;
}

het::FloorCounts Replay(const Trace& trace, const het::FloorConfig& config,
                        const std::vector<int64_t>& made = {}) {
  std::vector<int64_t> keys, offsets{0};
  for (const auto& step : trace) {
    keys.insert(keys.end(), step.begin(), step.end());
    offsets.push_back(static_cast<int64_t>(keys.size()));
  }
  het::FloorCounts counts;
  EXPECT_TRUE(het::ReplayBelady(keys.data(), offsets.data(), static_cast<int64_t>(trace.size()),
                                made.data(), static_cast<int64_t>(made.size()), config, &counts)
                  .ok());
  return counts;
}

// Every cache state the rules allow after a step, from `cached` and the
// step's unique keys: the step's rows, with any others of `cached` while
// there is room; a step with more rows than the capacity keeps any
// `capacity` rows of those it had and those it read.
std::vector<std::set<int64_t>> NextStates(const std::set<int64_t>& cached,
                                          const std::set<int64_t>& step, size_t capacity) {
  const bool fits = step.size() <= capacity;
  std::vector<int64_t> choices;
  for (int64_t k : cached) {
    if (!fits || !step.count(k)) choices.push_back(k);
  }
  for (int64_t k : step) {
    if (!fits && !cached.count(k)) choices.push_back(k);
  }
  const std::set<int64_t> base = fits ? step : std::set<int64_t>();
  const size_t keep = std::min(choices.size(), capacity - base.size());
  std::vector<std::set<int64_t>> out;
  for (uint32_t mask = 0; mask < (1u << choices.size()); ++mask) {
    if (static_cast<size_t>(__builtin_popcount(mask)) != keep) continue;
    std::set<int64_t> next = base;
    for (size_t i = 0; i < choices.size(); ++i) {
      if (mask >> i & 1) next.insert(choices[i]);
    }
    out.push_back(next);
  }
  return out;
}

// The fewest misses any allowed sequence of states makes.
int64_t FewestMisses(const Trace& trace, size_t capacity) {
  std::map<std::set<int64_t>, int64_t> states{{{}, 0}};  // state -> fewest misses so far
  for (const auto& ids : trace) {
    const std::set<int64_t> step(ids.begin(), ids.end());
    std::map<std::set<int64_t>, int64_t> next;
    for (const auto& [cached, misses] : states) {
      int64_t here = 0;
      for (int64_t k : step) here += !cached.count(k);
      for (const auto& state : NextStates(cached, step, capacity)) {
        auto it = next.find(state);
        if (it == next.end() || it->second > misses + here) next[state] = misses + here;
      }
    }
    states.swap(next);
  }
  int64_t best = -1;
  for (const auto& entry : states) {
    if (best < 0 || entry.second < best) best = entry.second;
  }
  return best;
}

HET_TEST(BeladyReplayMissesNoMoreThanAnyAllowedCache) {
  std::mt19937_64 rng(11);
  for (int trial = 0; trial < 300; ++trial) {
    const int universe = 3 + static_cast<int>(rng() % 6);
    const size_t capacity = 1 + rng() % 4;
    Trace trace(2 + rng() % 8);
    for (auto& step : trace) {
      step.resize(1 + rng() % 5);
      for (auto& k : step) k = static_cast<int64_t>(rng() % universe) * 7919;  // spread keys
    }
    het::FloorConfig config;
    config.capacity = static_cast<int64_t>(capacity);
    config.width = 3;
    const het::FloorCounts counts = Replay(trace, config);
    EXPECT_EQ(counts.misses, FewestMisses(trace, capacity));
    int64_t unique = 0;
    for (const auto& step : trace) unique += std::set<int64_t>(step.begin(), step.end()).size();
    EXPECT_EQ(counts.unique_keys, unique);
  }
}

HET_TEST(BeladyReplayEvictsTheRowUsedFurthestAhead) {
  // Capacity 2: after {1, 2}, step {3} must evict 2 (used again after 1).
  het::FloorConfig config = Config(2, 1);
  const het::FloorCounts counts = Replay({{1, 2}, {3}, {1}, {3}, {2}}, config);
  EXPECT_EQ(counts.misses, 4);  // 1, 2, 3, then 2 again
  EXPECT_EQ(counts.evictions, 2);
  // Every fetched row is pushed once: at its eviction or in the flush.
  EXPECT_EQ(counts.pushes, 4);
  EXPECT_EQ(counts.flushed, 2);
}

HET_TEST(TheWriteBoundPushesARowUsedPastIt) {
  het::FloorConfig config = Config(4, 2);
  config.write_staleness = 2;
  Trace trace(7, std::vector<int64_t>{5});
  const het::FloorCounts counts = Replay(trace, config);
  EXPECT_EQ(counts.misses, 1);
  // Pushed after its 3rd and 6th update; the 7th is flushed.
  EXPECT_EQ(counts.pushes, 3);
  EXPECT_EQ(counts.flushed, 1);
}

HET_TEST(CheckedStepsCostEveryKeyAndItsClock) {
  het::FloorConfig config = Config(8, 4);
  config.sync = het::SyncMode::kCheck;
  const het::FloorCounts counts = Replay({{1, 2, 2}, {1, 2}}, config);
  // Two pulls (2 keys each with clocks), the two misses' rows with each
  // pull's epoch, and the flush.
  EXPECT_EQ(counts.bytes_sent,
            2 * het::wire::PullRequest(2) + het::wire::PushRequest(2, 4, /*delta=*/true));
  EXPECT_EQ(counts.bytes_received, het::wire::PullAnswer(2, 4) + 2 * het::wire::EpochAnswer());
}

HET_TEST(RefreshStepsCostOnlyMissesAndPushes) {
  het::FloorConfig config = Config(8, 4);
  // A step of hits only moves the exchange's fixed part: the same bytes
  // whatever the keys looked up.
  const het::FloorCounts two = Replay({{1, 2}, {1, 2}}, config);
  const het::FloorCounts three = Replay({{1, 2}, {1, 2}, {2, 1}}, config);
  EXPECT_TRUE(three.bytes_received > two.bytes_received);
  EXPECT_EQ(three.bytes_received - two.bytes_received,
            two.bytes_received - Replay({{1, 2}}, config).bytes_received);
  // Two more rows fetched cost at least their states.
  const het::FloorCounts more = Replay({{1, 2}, {1, 2, 3, 4}}, config);
  EXPECT_TRUE(more.bytes_received - two.bytes_received >= 2 * het::wire::Row(4));
}

HET_TEST(TheRunsRefreshesCostTheirRowsAsTheProtocolSendsThem) {
  for (het::SyncMode sync : {het::SyncMode::kRefresh, het::SyncMode::kCheck}) {
    het::FloorConfig config = Config(8, 4);
    config.sync = sync;
    const het::FloorCounts none = Replay({{1, 2}, {1}}, config);
    config.refreshes = 10;
    const het::FloorCounts ten = Replay({{1, 2}, {1}}, config);
    config.refreshes = 20;
    const het::FloorCounts twenty = Replay({{1, 2}, {1}}, config);
    // Past the first, each costs the same: at least its state and a clock.
    const uint64_t each = (twenty.bytes_received - ten.bytes_received) / 10;
    EXPECT_EQ(twenty.bytes_received - ten.bytes_received, 10 * each);
    EXPECT_TRUE(each >= het::wire::Row(4) + 4);
    EXPECT_TRUE(ten.bytes_received - none.bytes_received >= 10 * each);
    if (sync == het::SyncMode::kCheck) EXPECT_EQ(each, het::wire::PullAnswer(1, 4));
    EXPECT_EQ(ten.bytes_sent, none.bytes_sent);
  }
}

HET_TEST(FirstTouchesTheShardMakesCostAClockUnderRefresh) {
  het::FloorConfig config = Config(8, 4);
  const Trace trace = {{1, 2, 3}, {1, 4}};
  const het::FloorCounts whole = Replay(trace, config);
  const het::FloorCounts lean = Replay(trace, config, {1, 3, 9});
  EXPECT_EQ(lean.made, 2);  // 9 never looked up
  EXPECT_EQ(lean.misses, whole.misses);
  // Two states saved; the step's bits cost a byte, padded to 4.
  EXPECT_EQ(whole.bytes_received - lean.bytes_received, 2 * het::wire::Row(4) - 4);
  config.sync = het::SyncMode::kCheck;  // HET's pull sends every row whole
  EXPECT_EQ(Replay(trace, config, {1, 3}).made, 0);
}

HET_TEST(BadFloorSettingsAreRefused) {
  const int64_t keys[] = {1, 2};
  const int64_t offsets[] = {0, 2};
  const int64_t backwards[] = {0, 2, 1};
  het::FloorConfig config;
  het::FloorCounts counts;
  EXPECT_TRUE(
      !het::ReplayBelady(keys, offsets, 1, nullptr, 0, config, &counts).ok());  // capacity 0
  config.capacity = 1;
  config.width = 1;
  EXPECT_TRUE(het::ReplayBelady(keys, offsets, 1, nullptr, 0, config, &counts).ok());
  EXPECT_TRUE(!het::ReplayBelady(keys, backwards, 2, nullptr, 0, config, &counts).ok());
}

}  // namespace

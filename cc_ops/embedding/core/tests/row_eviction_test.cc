// An evicting shard (on_full = kEvict): which rows go, against an exact LRU
// and LFU model of the same requests; what never goes (pinned rows, rows a
// worker's cache holds, the request's own); a key's clock never goes back;
// a request that cannot make room changes nothing; and the limit holds
// under concurrent requests.
#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "cc_ops/common/tests/harness.h"
#include "cc_ops/embedding/core/row_initializer.h"
#include "cc_ops/embedding/core/tests/local_cluster.h"

namespace {

het::TableConfig Evicting(int64_t max_rows, het::EvictionPolicy policy) {
  het::TableConfig c = het_test::SgdTable(2);
  c.initializer.seed = 7;
  c.max_rows = max_rows;
  c.on_full = het::OnFull::kEvict;
  c.eviction = policy;
  return c;
}

std::unique_ptr<het::TableShard> Make(const het::TableConfig& c) {
  std::unique_ptr<het::TableShard> t;
  if (!het::TableShard::Create(c, &t).ok()) std::abort();
  return t;
}

std::set<int64_t> Held(const het::TableShard& t) {
  het::TableChunk chunk;
  if (!t.Export(0, 1 << 30, &chunk).ok()) std::abort();
  return std::set<int64_t>(chunk.keys.begin(), chunk.keys.end());
}

// Exact LRU or LFU over single-key requests: what the shard must do while
// it holds fewer rows than it samples (it then looks at every row).
class ReferenceTable {
 public:
  ReferenceTable(size_t limit, bool lfu) : limit_(limit), lfu_(lfu) {}
  void Use(int64_t key) {
    ++now_;
    auto it = rows_.find(key);
    if (it != rows_.end()) {
      it->second.first = now_;
      ++it->second.second;
      return;
    }
    if (rows_.size() == limit_) {
      auto victim = rows_.begin();
      for (auto r = rows_.begin(); r != rows_.end(); ++r) {
        const auto& a = r->second;
        const auto& b = victim->second;
        if (lfu_ ? (a.second < b.second || (a.second == b.second && a.first < b.first))
                 : a.first < b.first) {
          victim = r;
        }
      }
      rows_.erase(victim);
    }
    rows_[key] = {now_, 1};
  }
  std::set<int64_t> Held() const {
    std::set<int64_t> out;
    for (const auto& r : rows_) out.insert(r.first);
    return out;
  }

 private:
  size_t limit_;
  bool lfu_;
  int64_t now_ = 0;
  std::map<int64_t, std::pair<int64_t, uint32_t>> rows_;  // key -> (last use, uses)
};

void FollowsTheReference(het::EvictionPolicy policy) {
  const int64_t limit = 16;
  auto t = Make(Evicting(limit, policy));
  ReferenceTable reference(limit, policy == het::EvictionPolicy::kLFU);
  std::mt19937_64 rng(3);
  std::vector<float> row(2);
  for (int request = 0; request < 3000; ++request) {
    // Skewed: a few keys come back often, most rarely.
    const int64_t key = static_cast<int64_t>(std::min<double>(
        60, std::floor(std::exp(std::uniform_real_distribution<double>(0, 4.2)(rng)))));
    EXPECT_OK(t->Gather(&key, 1, row.data()));
    reference.Use(key);
    EXPECT_TRUE(Held(*t) == reference.Held());
    EXPECT_TRUE(t->Size() <= limit);
  }
  EXPECT_TRUE(t->Counters().rows_evicted > 100u);
  EXPECT_EQ(t->Counters().rows_created - t->Counters().rows_evicted,
            static_cast<uint64_t>(t->Size()));
}

}  // namespace

HET_TEST(EvictionFollowsExactLruWhileTheShardIsSmall) {
  FollowsTheReference(het::EvictionPolicy::kLRU);
}

HET_TEST(EvictionFollowsExactLfuWhileTheShardIsSmall) {
  FollowsTheReference(het::EvictionPolicy::kLFU);
}

HET_TEST(ARecreatedRowStartsFromItsInitializerAndAClockThatNeverGoesBack) {
  auto t = Make(Evicting(2, het::EvictionPolicy::kLRU));
  const std::vector<int64_t> key = {5};
  const std::vector<float> grad = {1.0f, -1.0f};
  const std::vector<int64_t> count = {3};
  int64_t clock = -1;
  EXPECT_OK(t->Push(key.data(), grad.data(), count.data(), 1, 0.5f, nullptr, &clock));
  EXPECT_EQ(clock, int64_t{3});
  std::vector<float> row(2);
  for (int64_t other : {6, 7}) EXPECT_OK(t->Gather(&other, 1, row.data()));
  EXPECT_TRUE(Held(*t) == (std::set<int64_t>{6, 7}));
  // Back again: the initializer's row, at the evicted row's clock.
  het::PulledRows pulled;
  const int64_t none = -1;
  EXPECT_OK(t->Pull(key.data(), &none, 1, 0, false, &pulled));
  std::vector<float> initial(2);
  het::InitializeRow(t->config().initializer, 5, 2, initial.data());
  EXPECT_TRUE(pulled.values == initial);
  EXPECT_EQ(pulled.clocks[0], int64_t{3});
  // A copy at clock 3 that missed nothing since is still within any bound,
  // and a push on the new row moves its clock on from there.
  EXPECT_OK(t->Push(key.data(), grad.data(), count.data(), 1, 0.5f, nullptr, &clock));
  EXPECT_EQ(clock, int64_t{6});
}

HET_TEST(PinnedRowsAndTheRequestsOwnAreNeverEvicted) {
  auto t = Make(Evicting(4, het::EvictionPolicy::kLRU));
  const std::vector<int64_t> hot = {1, 2};
  het::TableChunk read;
  EXPECT_OK(t->Read(hot.data(), 2, &read));  // a hot block's rows: pinned
  std::vector<float> rows(8);
  for (int64_t key = 10; key < 40; ++key) {
    EXPECT_OK(t->Gather(&key, 1, rows.data()));
    const std::set<int64_t> held = Held(*t);
    EXPECT_TRUE(held.count(1) == 1 && held.count(2) == 1 && held.count(key) == 1);
    EXPECT_EQ(t->Size(), std::min<int64_t>(4, 2 + (key - 9)));
  }
  // Two new keys and two pinned rows fill the shard: a third new key
  // cannot find room, and the request changes nothing.
  const std::set<int64_t> before = Held(*t);
  const uint64_t evicted = t->Counters().rows_evicted;
  const std::vector<int64_t> three = {100, 101, 102};
  het::Status s = t->Gather(three.data(), 3, rows.data());
  EXPECT_TRUE(s.code() == het::StatusCode::kResourceExhausted);
  EXPECT_INVALID(het::Status::InvalidArgument(s.message()), "only 2 rows may go");
  EXPECT_TRUE(Held(*t) == before);
  EXPECT_EQ(t->Counters().rows_evicted, evicted);
  // Two fit: both of the others go.
  EXPECT_OK(t->Gather(three.data(), 2, rows.data()));
  EXPECT_TRUE(Held(*t) == (std::set<int64_t>{1, 2, 100, 101}));
}

HET_TEST(AHotSetReplacedReleasesThePinsOfTheRowsThatLeftIt) {
  // Each hot block load reads its set; the rows of the last set that are
  // not in the new one may go again. Before, every load's pins stayed until
  // the table was cleared and counted against max_rows for good.
  auto t = Make(Evicting(4, het::EvictionPolicy::kLRU));
  het::TableChunk read;
  const std::vector<int64_t> first = {1, 2, 3}, second = {3, 4};
  EXPECT_OK(t->Read(first.data(), 3, &read));
  EXPECT_OK(t->Read(second.data(), 2, &read));  // 1 and 2 left the set
  std::vector<float> rows(8);
  const std::vector<int64_t> two = {10, 11};
  EXPECT_OK(t->Gather(two.data(), 2, rows.data()));  // 1 and 2 go
  EXPECT_TRUE(Held(*t) == (std::set<int64_t>{3, 4, 10, 11}));
  // A set emptied releases every pin.
  EXPECT_OK(t->Read(nullptr, 0, &read));
  const std::vector<int64_t> four = {20, 21, 22, 23};
  EXPECT_OK(t->Gather(four.data(), 4, rows.data()));
  EXPECT_TRUE(Held(*t) == (std::set<int64_t>{20, 21, 22, 23}));
}

HET_TEST(HotSetsClearsAndRequestsRunTogether) {
  // A hot block's loads, restores and training reads at once: each takes
  // the hot set's lock before the room's, so none waits on another for
  // good (the sanitizer builds check the locks' order).
  auto t = Make(Evicting(64, het::EvictionPolicy::kLRU));
  std::vector<std::thread> pool;
  for (int w = 0; w < 3; ++w) {
    pool.emplace_back([&, w] {
      std::vector<float> rows(16);
      het::TableChunk read;
      for (int r = 0; r < 300; ++r) {
        std::vector<int64_t> keys = {w * 1000 + r % 7, w * 1000 + 100 + r};
        if (w == 0) EXPECT_OK(t->Read(keys.data(), 2, &read));
        if (w == 1 && r % 50 == 0) t->Clear();
        het::Status s = t->Gather(keys.data(), 2, rows.data());
        EXPECT_TRUE(s.ok() || s.code() == het::StatusCode::kResourceExhausted);
      }
    });
  }
  for (auto& th : pool) th.join();
  EXPECT_TRUE(t->Size() <= 64);
}

HET_TEST(AKeysClockNeverGoesBackAcrossAClear) {
  // A row evicted at clock 3, the table cleared (a restore): the key made
  // again starts at 3 or later, not at 0.
  auto t = Make(Evicting(1, het::EvictionPolicy::kLRU));
  const std::vector<int64_t> key = {5}, other = {6}, count = {3};
  const std::vector<float> grad = {1.0f, -1.0f};
  EXPECT_OK(t->Push(key.data(), grad.data(), count.data(), 1, 0.5f, nullptr, nullptr));
  std::vector<float> row(2);
  EXPECT_OK(t->Gather(other.data(), 1, row.data()));  // 5 goes, at clock 3
  t->Clear();
  het::TableChunk read;
  EXPECT_OK(t->Read(key.data(), 1, &read));
  EXPECT_TRUE(read.clocks[0] >= 3);
}

HET_TEST(RowsAWorkersCacheHoldsStayUntilItLetsThemGo) {
  const int dim = 2;
  het::TableConfig table = Evicting(6, het::EvictionPolicy::kLRU);
  het_test::LocalCluster cluster(table, 1);
  auto cache = het_test::RefreshCache(dim, 3, 0, 0, 1);
  het::LookupPlan plan;
  std::vector<float> rows;
  const std::vector<int64_t> first = {1, 2, 3};
  EXPECT_OK(cluster.Lookup(*cache, first, true, &plan, &rows));
  // Another worker's stream of new keys passes the limit many times over.
  for (int64_t key = 100; key < 160; ++key) {
    EXPECT_OK(cluster.GatherRows({key}, &rows));
    const std::set<int64_t> held = Held(cluster.shard(0));
    EXPECT_TRUE(held.count(1) && held.count(2) && held.count(3));
    EXPECT_TRUE(cluster.shard(0).Size() <= 6);
  }
  // The cache moves on to other keys; its next exchange reports that it
  // let 1, 2 and 3 go, and the shard may then evict them.
  EXPECT_OK(cluster.Lookup(*cache, {4, 5, 6}, true, &plan, &rows));
  EXPECT_OK(cluster.Lookup(*cache, {4, 5, 6}, true, &plan, &rows));
  for (int64_t key = 200; key < 210; ++key) EXPECT_OK(cluster.GatherRows({key}, &rows));
  const std::set<int64_t> held = Held(cluster.shard(0));
  EXPECT_TRUE(held.count(1) == 0 && held.count(4) && held.count(5) && held.count(6));
  // Caches that hold the whole limit leave nothing to evict.
  het_test::LocalCluster full(Evicting(3, het::EvictionPolicy::kLRU), 1);
  auto holder = het_test::RefreshCache(dim, 3, 0, 0, 1);
  EXPECT_OK(full.Lookup(*holder, first, true, &plan, &rows));
  het::Status s = full.GatherRows({9}, &rows);
  EXPECT_TRUE(s.code() == het::StatusCode::kResourceExhausted);
  EXPECT_EQ(full.shard(0).Size(), int64_t{3});
}

HET_TEST(ARestoreEvictsNothing) {
  auto t = Make(Evicting(4, het::EvictionPolicy::kLRU));
  std::vector<float> rows(2);
  for (int64_t key = 1; key <= 4; ++key) EXPECT_OK(t->Gather(&key, 1, rows.data()));
  het::TableChunk chunk;
  chunk.keys = {8, 9};
  chunk.values = {1, 1, 1, 1};
  chunk.clocks = {3, 3};
  chunk.steps = {0, 0};
  het::Status s = t->Import(chunk);
  EXPECT_TRUE(s.code() == het::StatusCode::kResourceExhausted);
  EXPECT_INVALID(het::Status::InvalidArgument(s.message()), "a restore evicts nothing");
  EXPECT_TRUE(Held(*t) == (std::set<int64_t>{1, 2, 3, 4}));
  chunk.keys = {3, 4};  // rows it holds take the restored states
  EXPECT_OK(t->Import(chunk));
}

HET_TEST(ARowPassingThroughStaysUntilItsUpdateIsOut) {
  // A cache of 2 rows looks up 4 (2 pass through), and the lookahead's
  // prefetch goes out before the step's update: it must not report the
  // rows passing through as let go, for their update is still to come;
  // another worker's stream of new ids meanwhile evicts what it can. After
  // the update and a flush every row is its two steps, none made again.
  const int dim = 2;
  het::TableConfig table = Evicting(10, het::EvictionPolicy::kLRU);
  het_test::LocalCluster cluster(table, 1);
  std::unique_ptr<het::WorkerCache> cache;
  het::CacheConfig c = het_test::RefreshCache(dim, 4, 0, 0, 1)->config();
  c.rows_leave = true;
  c.worker_id = 7;  // one worker: its next incarnation's record replaces this one's
  EXPECT_OK(het::WorkerCache::Create(c, &cache));
  const std::vector<int64_t> ids = {1, 2, 3, 4};
  het::LookupPlan plan;
  std::vector<float> rows;
  EXPECT_OK(cluster.Lookup(*cache, ids, true, &plan, &rows));
  EXPECT_OK(cluster.Update(*cache, plan.unique_keys, std::vector<float>(8, 1.0f), 0.5f));
  EXPECT_OK(cluster.Flush(*cache, 0.5f));
  c.capacity = 2;
  EXPECT_OK(het::WorkerCache::Create(c, &cache));  // a new incarnation, of 2 rows
  // A lookahead step: the step's exchange, then the next batch's prefetch,
  // which carries the updates due, before the step's own update.
  const std::vector<int64_t> next = {9};
  EXPECT_OK(cache->Stage(ids.data(), ids.size()));
  EXPECT_OK(cache->Stage(next.data(), next.size()));
  het::ExchangePlan step, ahead;
  EXPECT_OK(cluster.Exchange(*cache, ids, &step, &rows, /*carry_updates=*/false));
  EXPECT_OK(cluster.Prefetch(*cache, ids, &ahead));
  for (int64_t key = 100; key < 130; ++key) EXPECT_OK(cluster.GatherRows({key}, &rows));
  EXPECT_OK(cluster.Update(*cache, step.unique_keys, std::vector<float>(8, 1.0f), 0.5f));
  EXPECT_OK(cluster.Flush(*cache, 0.5f));
  std::map<int64_t, int64_t> clocks;
  const auto contents = cluster.Contents(&clocks);
  for (int64_t key : ids) {
    std::vector<float> expected(2);
    het::InitializeRow(table.initializer, key, 2, expected.data());
    EXPECT_TRUE(contents.count(key) == 1 && clocks[key] == 2);
    EXPECT_TRUE(contents.count(key) == 1 && contents.at(key)[0] == expected[0] - 1.0f);
  }
}

HET_TEST(AnAdamRowMadeAgainCountsItsStepsFromItsClock) {
  het::TableConfig c = Evicting(1, het::EvictionPolicy::kLRU);
  c.optimizer.kind = het::OptimizerKind::kAdam;
  auto t = Make(c);
  const std::vector<int64_t> key = {5}, other = {6};
  const std::vector<float> grad = {1.0f, -1.0f};
  const std::vector<int64_t> count = {3};
  EXPECT_OK(t->Push(key.data(), grad.data(), count.data(), 1, 0.01f, nullptr, nullptr));
  std::vector<float> row(2);
  EXPECT_OK(t->Gather(other.data(), 1, row.data()));  // evicts 5, at clock 3
  het::TableChunk read;
  EXPECT_OK(t->Read(key.data(), 1, &read));  // made again
  EXPECT_TRUE(read.clocks[0] == 3 && read.steps[0] == 3);
}

HET_TEST(TheLimitHoldsUnderConcurrentRequests) {
  auto t = Make(Evicting(64, het::EvictionPolicy::kLFU));
  std::vector<std::thread> workers;
  for (int w = 0; w < 4; ++w) {
    workers.emplace_back([&, w] {
      std::mt19937_64 rng(w);
      std::vector<int64_t> keys(8);
      std::vector<float> grads(16, 0.1f), rows(16);
      std::vector<int64_t> counts(8, 1);
      for (int r = 0; r < 1500; ++r) {
        for (auto& k : keys) k = static_cast<int64_t>(rng() % 5000);
        std::sort(keys.begin(), keys.end());
        keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
        const int64_t n = static_cast<int64_t>(keys.size());
        if (r % 2 == 0) {
          EXPECT_OK(t->Gather(keys.data(), n, rows.data()));
        } else {
          EXPECT_OK(t->Push(keys.data(), grads.data(), counts.data(), n, 0.1f, nullptr, nullptr));
        }
        keys.resize(8);
      }
    });
  }
  for (auto& w : workers) w.join();
  EXPECT_TRUE(t->Size() <= 64);
  EXPECT_EQ(static_cast<int64_t>(Held(*t).size()), t->Size());
  const het::TableCounters c = t->Counters();
  EXPECT_EQ(c.rows_created - c.rows_evicted, static_cast<uint64_t>(t->Size()));
  EXPECT_EQ(c.updates_applied, c.rows_pushed);  // every push landed
}

namespace {
int64_t fake_now = 1000;
int64_t FakeSeconds() { return fake_now; }
}  // namespace

HET_TEST(RowsUnusedForLongerThanTheTtlExpire) {
  het::TableConfig c = het_test::SgdTable(2);
  c.ttl_seconds = 10;
  c.seconds = FakeSeconds;
  fake_now = 1000;
  auto t = Make(c);
  std::vector<float> rows(4);
  auto gather = [&](int64_t key) { EXPECT_OK(t->Gather(&key, 1, rows.data())); };
  gather(1);
  gather(2);
  fake_now = 1006;
  gather(2);
  fake_now = 1011;  // 1 unused for 11 s, 2 for 5
  gather(3);
  EXPECT_TRUE(Held(*t) == (std::set<int64_t>{2, 3}));
  EXPECT_EQ(t->Counters().rows_expired, 1u);
  EXPECT_EQ(t->Counters().rows_evicted, 0u);
  const std::vector<int64_t> hot = {4};
  het::TableChunk read;
  EXPECT_OK(t->Read(hot.data(), 1, &read));  // pinned: never expires
  fake_now = 1012;
  gather(3);  // a sweep a quarter of the ttl after the last: not due yet
  EXPECT_TRUE(Held(*t) == (std::set<int64_t>{2, 3, 4}));
  fake_now = 1040;
  gather(5);
  EXPECT_TRUE(Held(*t) == (std::set<int64_t>{4, 5}));
  EXPECT_EQ(t->Counters().rows_expired, 3u);
  // A worker's copies stay, however long the shard has not seen them.
  het_test::LocalCluster cluster(c, 1);
  auto cache = het_test::RefreshCache(2, 4, 0, 0, 1);
  het::LookupPlan plan;
  std::vector<float> looked;
  EXPECT_OK(cluster.Lookup(*cache, {7, 8}, true, &plan, &looked));
  fake_now = 1100;
  EXPECT_OK(cluster.GatherRows({9}, &looked));
  EXPECT_TRUE(Held(cluster.shard(0)) == (std::set<int64_t>{7, 8, 9}));
}

HET_TEST(ARepeatedPushOfARowEvictedSinceMakesNoRow) {
  // The first time made and merged key 4; another request then took its
  // room. The repeat (its answer was lost) once made the row again with no
  // room reserved, past max_rows; it answers the row a read would make.
  auto t = Make(Evicting(1, het::EvictionPolicy::kLRU));
  const int64_t key = 4, other = 5, count = 1, base = 0;
  const std::vector<float> delta = {1, 1};
  het::Sender sender;
  sender.worker = 3;
  sender.generation = 1;
  sender.sequence = 1;
  std::vector<float> state(2);
  int64_t clock = -7;
  EXPECT_OK(
      t->PushDeltas(&key, delta.data(), &count, &base, 1, 1.0f, state.data(), &clock, sender, 0));
  EXPECT_EQ(clock, int64_t{1});
  std::vector<float> rows(2);
  EXPECT_OK(t->Gather(&other, 1, rows.data(), true));  // evicts 4
  EXPECT_TRUE(Held(*t) == (std::set<int64_t>{other}));
  EXPECT_OK(
      t->PushDeltas(&key, delta.data(), &count, &base, 1, 1.0f, state.data(), &clock, sender, 0));
  EXPECT_TRUE(Held(*t) == (std::set<int64_t>{other}));
  std::vector<float> initial(2);
  het::InitializeRow(t->config().initializer, key, 2, initial.data());
  EXPECT_TRUE(state == initial);
  EXPECT_EQ(clock, int64_t{1});  // the clock floor: 4's clock when evicted
  EXPECT_EQ(t->Counters().updates_applied, 1u);
}

HET_TEST(ARowsLastUseIsReadBackAcrossTheTicksWrap) {
  het::RowUse use;
  const int64_t wrap = int64_t{1} << het::RowUse::kTickBits;
  het::Touch(&use, wrap - 5);
  EXPECT_EQ(het::LastTick(use, wrap + 3), wrap - 5);
  EXPECT_EQ(het::LastTick(use, wrap - 5), wrap - 5);
  use.count = het::RowUse::kMaxCount;
  het::Touch(&use, 7);
  EXPECT_EQ(uint64_t{use.count}, het::RowUse::kMaxCount);  // saturates, never wraps
  EXPECT_EQ(uint64_t{use.pinned}, uint64_t{0});
}

HET_TEST(ExpiryMarksNeverExpireARowEarlyAndAtMostASpacingLate) {
  // Against the seconds of every request, kept here: a tick below the mark
  // ExpiredBelow gives was taken more than the ttl ago, and every tick
  // taken more than the ttl, a mark's spacing and the largest gap between
  // requests ago is below it.
  for (int64_t ttl : {int64_t{5}, int64_t{20}, int64_t{64}, int64_t{400}}) {
    const int64_t spacing = std::max<int64_t>(1, ttl / 16);
    std::mt19937_64 rng(ttl);
    het::ExpiryMarks marks(ttl);
    std::vector<int64_t> second_of = {0};  // second_of[tick]; ticks count from 1
    int64_t second = 100, checked = 0;
    for (int64_t tick = 1; tick <= 6000; ++tick) {
      second += static_cast<int64_t>(rng() % 4 == 0 ? rng() % 4 : 0);
      second_of.push_back(second);
      marks.Request(tick, second);
      if (rng() % 16 != 0) continue;
      const int64_t below = marks.ExpiredBelow(second);
      for (int64_t t = 1; t < tick; ++t) {
        if (t < below) EXPECT_TRUE(second - second_of[t] > ttl);
        if (second - second_of[t] > ttl + spacing + 3) EXPECT_TRUE(t < below);
      }
      ++checked;
    }
    EXPECT_TRUE(checked > 200);
  }
}

HET_TEST(EvictionSettingsAreChecked) {
  het::TableConfig c = Evicting(-1, het::EvictionPolicy::kLRU);
  std::unique_ptr<het::TableShard> t;
  EXPECT_INVALID(het::TableShard::Create(c, &t), "needs max_rows");
  c.max_rows = 10;
  c.vocabulary_size = 100;
  EXPECT_INVALID(het::TableShard::Create(c, &t), "fixed-vocabulary");
  c.vocabulary_size = -1;
  c.ttl_seconds = 0;
  EXPECT_INVALID(het::TableShard::Create(c, &t), "ttl must be a positive");
  het::OnFull on_full;
  het::EvictionPolicy policy;
  EXPECT_INVALID(het::ParseOnFull("drop", &on_full), "refuse");
  EXPECT_INVALID(het::ParseEvictionPolicy("fifo", &policy), "lfu");
}

// Every push merged exactly once, whatever is lost, refused or replayed
// around it (docs/consistency.md, "Exactly once"). The oracle is the data:
// with SGD each row ends at its initial value minus the learning rate times
// the sum of the gradients the workers trained it with, and its clock at the
// number of those updates, whatever the staleness; nothing here reads the
// counters the system keeps.
#include <map>
#include <random>
#include <vector>

#include "cc_ops/common/tests/harness.h"
#include "cc_ops/embedding/core/tests/local_cluster.h"

namespace {

using het_test::LocalCluster;
using het_test::RefreshCache;
using het_test::SgdTable;

constexpr float kLr = 0.5f;

// What the workers trained: each key's summed gradient and update count.
struct Oracle {
  explicit Oracle(int width) : dim(width) {}
  int dim;
  std::map<int64_t, std::vector<double>> sums;
  std::map<int64_t, int64_t> counts;

  void Trained(const std::vector<int64_t>& keys, const std::vector<float>& grads) {
    for (size_t i = 0; i < keys.size(); ++i) {
      auto& sum = sums[keys[i]];
      sum.resize(dim, 0.0);
      for (int j = 0; j < dim; ++j) sum[j] += grads[i * dim + j];
      ++counts[keys[i]];
    }
  }

  // Every row the cluster holds is its initial row (read from a fresh
  // table) moved by what was trained, with as many updates on its clock.
  bool Matches(LocalCluster& cluster, const het::TableConfig& table) {
    std::unique_ptr<het::TableShard> fresh;
    if (!het::TableShard::Create(table, &fresh).ok()) return false;
    std::map<int64_t, int64_t> clocks;
    const auto rows = cluster.Contents(&clocks);
    bool ok = true;
    for (const auto& [key, row] : rows) {
      std::vector<float> init(dim);
      fresh->Gather(&key, 1, init.data());
      const auto it = sums.find(key);
      for (int j = 0; j < dim; ++j) {
        const double moved = it == sums.end() ? 0.0 : -kLr * it->second[j];
        if (std::abs(row[j] - (init[j] + moved)) > 1e-3) {
          std::fprintf(stderr, "  key %lld [%d]: %f, the data says %f\n", (long long)key, j, row[j],
                       init[j] + moved);
          ok = false;
        }
      }
      const int64_t expected = counts.count(key) ? counts[key] : 0;
      if (clocks[key] != expected) {
        std::fprintf(stderr, "  key %lld: clock %lld, the data says %lld\n", (long long)key,
                     (long long)clocks[key], (long long)expected);
        ok = false;
      }
    }
    return ok;
  }
};

// One SGD shard of rows of 2 and a cache of 8 rows at staleness 0.
struct OneShard {
  het::TableConfig table = SgdTable(2);
  LocalCluster cluster{table, 1};
  std::unique_ptr<het::WorkerCache> cache = RefreshCache(2, 8, 0, 0, 1);
  het::LookupPlan plan;
  std::vector<float> rows;
};

std::vector<float> Grads(std::mt19937& rng, size_t rows, int dim) {
  std::uniform_real_distribution<float> g(-1.0f, 1.0f);
  std::vector<float> out(rows * dim);
  for (float& x : out) x = g(rng);
  return out;
}

}  // namespace

HET_TEST(ALostAnswerIsNotMergedAgain) {
  const int dim = 2;
  const het::TableConfig table = SgdTable(dim);
  LocalCluster cluster(table, 2);
  Oracle oracle(dim);
  auto cache = RefreshCache(dim, 8, 0, 0, 2);  // every update is due at once
  het::LookupPlan plan;
  std::vector<float> rows;
  const std::vector<int64_t> ids = {1, 2, 3, 4};
  EXPECT_OK(cluster.Lookup(*cache, ids, true, &plan, &rows));
  const std::vector<float> g = {1, 2, 3, 4, 5, 6, 7, 8};
  EXPECT_OK(cluster.Update(*cache, plan.unique_keys, g, kLr));
  oracle.Trained(plan.unique_keys, g);
  // The exchange that carries the pushes is merged, and its answers lost,
  // twice in a row; the third attempt gets through.
  EXPECT_TRUE(cluster.ExchangeLosingAnswers(*cache, ids).code() == het::StatusCode::kAborted);
  EXPECT_TRUE(cluster.ExchangeLosingAnswers(*cache, ids).code() == het::StatusCode::kAborted);
  EXPECT_OK(cluster.Lookup(*cache, ids, true, &plan, &rows));
  EXPECT_OK(cluster.Flush(*cache, kLr));
  EXPECT_TRUE(oracle.Matches(cluster, table));
  // The repeats were answered with the rows as merged: the cache holds them.
  std::vector<float> direct;
  EXPECT_OK(cluster.GatherRows(plan.unique_keys, &direct));
  EXPECT_OK(cluster.Lookup(*cache, ids, true, &plan, &rows));
  EXPECT_TRUE(rows == direct);
}

HET_TEST(APushOneShardRefusesIsMergedOnceByTheOther) {
  // The measurement: two shards, write bound 0, max_rows 16; one
  // update to two rows of shard 0, then a step whose new rows shard 1
  // refuses, then a step that fits.
  const int dim = 2;
  het::TableConfig table = SgdTable(dim);
  table.max_rows = 16;
  LocalCluster cluster(table, 2);
  Oracle oracle(dim);
  auto cache = RefreshCache(dim, 64, 0, 0, 2);
  std::vector<int64_t> on0, on1;
  for (int64_t k = 0; on0.size() < 2 || on1.size() < 40; ++k) {
    (het::ShardOf(k, 2) == 0 ? on0 : on1).push_back(k);
  }
  on0.resize(2);
  het::LookupPlan plan;
  std::vector<float> rows;
  EXPECT_OK(cluster.Lookup(*cache, on0, true, &plan, &rows));
  const std::vector<float> g = {1, 1, 1, 1};
  EXPECT_OK(cluster.Update(*cache, plan.unique_keys, g, kLr));
  oracle.Trained(plan.unique_keys, g);
  // Shard 0 merges the pushes; shard 1 refuses 40 new rows past its 16.
  het::Status refused = cluster.Lookup(*cache, on1, true, &plan, &rows);
  EXPECT_TRUE(refused.code() == het::StatusCode::kResourceExhausted);
  EXPECT_OK(cluster.Lookup(*cache, {on1[0]}, true, &plan, &rows));
  EXPECT_OK(cluster.Update(*cache, plan.unique_keys, {0, 0}, kLr));  // a zero update
  oracle.Trained(plan.unique_keys, {0, 0});
  EXPECT_OK(cluster.Flush(*cache, kLr));
  EXPECT_TRUE(oracle.Matches(cluster, table));
}

HET_TEST(AShardWithAnotherEpochMergesNothing) {
  OneShard one;
  auto& [table, cluster, cache, plan, rows] = one;
  EXPECT_OK(cluster.Lookup(*cache, {7}, true, &plan, &rows));
  // The checkpoint: the table as it is now.
  het::TableChunk saved;
  EXPECT_OK(cluster.shard(0).Read(plan.unique_keys.data(), 1, &saved));
  EXPECT_OK(cluster.Update(*cache, {7}, {3, 3}, kLr));  // pending, due
  cluster.shard(0).Clear();                             // restored
  EXPECT_OK(cluster.shard(0).Import(saved));
  het::Status s = cluster.Lookup(*cache, {7}, true, &plan, &rows);
  EXPECT_TRUE(s.code() == het::StatusCode::kAborted);
  // The restored row is as saved: the old timeline's push was not merged.
  het::TableChunk now;
  EXPECT_OK(cluster.shard(0).Read(plan.unique_keys.data(), 1, &now));
  EXPECT_TRUE(now.values == saved.values && now.clocks == saved.clocks);
  EXPECT_EQ(cluster.shard(0).Counters().refused_epoch, 1u);
  // A flush of the old timeline is refused the same way.
  het::Pushes pending;
  cache->Flush(&pending);
  EXPECT_TRUE(cluster.PushAndAck(*cache, pending, kLr).code() == het::StatusCode::kAborted);
  EXPECT_OK(cluster.shard(0).Read(plan.unique_keys.data(), 1, &now));
  EXPECT_TRUE(now.values == saved.values && now.clocks == saved.clocks);
}

HET_TEST(ARowFetchedWhileARoundIsResentKeepsItsOwnUpdates) {
  // The lookahead's own exchange sends only the misses' outbox rows. If its
  // round is resent, a new miss's outbox row is not in it: the fetched row
  // lacks the worker's own update, which the cache merges back itself.
  const int dim = 2;
  const het::TableConfig table = SgdTable(dim);
  LocalCluster cluster(table, 1);
  Oracle oracle(dim);
  auto cache = RefreshCache(dim, 2, 100, 100, 1);
  het::ExchangePlan plan;
  std::vector<float> rows;
  EXPECT_OK(cluster.Exchange(*cache, {9}, &plan, &rows));
  EXPECT_OK(cluster.Update(*cache, {9}, {1, 2}, kLr));  // pending, not due
  oracle.Trained({9}, {1, 2});
  EXPECT_OK(cluster.Exchange(*cache, {1, 2}, &plan, &rows));  // 9 evicted to the outbox
  EXPECT_TRUE(cluster.ExchangeLosingAnswers(*cache, {3}, /*carry_updates=*/false).code() ==
              het::StatusCode::kAborted);
  EXPECT_OK(cluster.Exchange(*cache, {9}, &plan, &rows, /*carry_updates=*/false));
  std::unique_ptr<het::TableShard> fresh;
  EXPECT_OK(het::TableShard::Create(table, &fresh));
  std::vector<float> init(dim);
  const int64_t nine = 9;
  EXPECT_OK(fresh->Gather(&nine, 1, init.data()));
  EXPECT_NEAR(rows[0], init[0] - kLr * 1, 1e-6);
  EXPECT_NEAR(rows[1], init[1] - kLr * 2, 1e-6);
  EXPECT_OK(cluster.Flush(*cache, kLr));
  EXPECT_TRUE(oracle.Matches(cluster, table));
}

HET_TEST(ACheckingCacheLearnsTheEpochAndStartsOverAfterTheShardIsCleared) {
  // A cache that checks its keys learns the shard's epoch from its pulls'
  // and pushes' answers: after a restore its next lookup fails with Aborted
  // (its copies are of the old table, whose rows it would read on), its
  // push, had it one, would merge nothing, and the lookup after starts from
  // an empty cache that trains on.
  const int dim = 2;
  LocalCluster cluster(SgdTable(dim), 1);
  het::CacheConfig c = RefreshCache(dim, 8, 0, 0, 1)->config();
  c.sync = het::SyncMode::kCheck;
  std::unique_ptr<het::WorkerCache> cache;
  EXPECT_OK(het::WorkerCache::Create(c, &cache));
  het::LookupPlan plan;
  std::vector<float> rows;
  for (int step = 0; step < 3; ++step) {
    EXPECT_OK(cluster.Lookup(*cache, {1, 2}, true, &plan, &rows));
    EXPECT_OK(cluster.Update(*cache, plan.unique_keys, {1, 1, 1, 1}, kLr));
  }
  cluster.shard(0).Clear();
  const het::Status refused = cluster.Lookup(*cache, {1, 2}, true, &plan, &rows);
  EXPECT_TRUE(refused.code() == het::StatusCode::kAborted);
  std::map<int64_t, int64_t> clocks;
  cluster.Contents(&clocks);
  EXPECT_EQ(clocks[1], 0);  // the pull made the row; nothing was merged
  for (int step = 0; step < 3; ++step) {
    EXPECT_OK(cluster.Lookup(*cache, {1, 2}, true, &plan, &rows));
    EXPECT_OK(cluster.Update(*cache, plan.unique_keys, {1, 1, 1, 1}, kLr));
  }
  cluster.Contents(&clocks);
  EXPECT_EQ(clocks[1], 3);
}

HET_TEST(AnOlderIncarnationIsRefusedAndTheNewRecordKept) {
  OneShard one;
  auto& [table, cluster, cache, plan, rows] = one;
  EXPECT_OK(cluster.Lookup(*cache, {1, 2}, true, &plan, &rows));
  EXPECT_OK(cluster.Update(*cache, {1, 2}, {1, 1, 1, 1}, kLr));
  // A request of this incarnation that is delayed in the network...
  het::ExchangePlan late;
  EXPECT_OK(cache->BeginExchange(std::vector<int64_t>{1}.data(), 1, &late));
  // ...while the worker restarts: a new incarnation of the same worker.
  cache->Clear();
  EXPECT_OK(cluster.Lookup(*cache, {3}, true, &plan, &rows));
  std::vector<uint8_t> answer;
  het::Status s =
      cluster.shard(0).Exchange(late.requests[0].data(), late.requests[0].size(), &answer);
  EXPECT_TRUE(s.code() == het::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(s.message().find("earlier incarnation") != std::string::npos);
  EXPECT_EQ(cluster.shard(0).Counters().refused_generation, 1u);
  // The live incarnation's record survived: another writer's update to row
  // 3 still refreshes its copy at once (read bound 0).
  auto other = RefreshCache(2, 8, 0, 0, 1);
  EXPECT_OK(cluster.Lookup(*other, {3}, true, &plan, &rows));
  EXPECT_OK(cluster.Update(*other, {3}, {2, 2}, kLr));
  EXPECT_OK(cluster.Flush(*other, kLr));
  std::vector<float> direct;
  EXPECT_OK(cluster.GatherRows({3}, &direct));
  EXPECT_OK(cluster.Lookup(*cache, {3}, true, &plan, &rows));
  EXPECT_TRUE(rows == direct);
  // The old incarnation's pending updates went with it; only the other
  // worker's update reached row 3.
  std::map<int64_t, int64_t> clocks;
  cluster.Contents(&clocks);
  EXPECT_EQ(clocks[3], 1);
}

HET_TEST(AnUpdateThatWouldOverflowIsRefusedAndTheCacheTrainsOn) {
  const int dim = 2;
  het::TableConfig table = SgdTable(dim);
  table.optimizer.kind = het::OptimizerKind::kAdagrad;
  LocalCluster cluster(table, 1);
  het::CacheConfig c;
  c.table_name = "emb";
  c.dim = dim;
  c.capacity = 8;
  c.optimizer = table.optimizer;
  c.read_staleness = c.write_staleness = 0;
  std::unique_ptr<het::WorkerCache> cache;
  EXPECT_OK(het::WorkerCache::Create(c, &cache));
  het::LookupPlan plan;
  std::vector<float> rows;
  EXPECT_OK(cluster.Lookup(*cache, {5}, true, &plan, &rows));
  // Finite, but its square overflows the squared-gradient slot.
  het::Status s = cluster.Update(*cache, {5}, {2e19f, 1.0f}, kLr);
  EXPECT_TRUE(s.code() == het::StatusCode::kInvalidArgument);
  EXPECT_TRUE(s.message().find("id 5") != std::string::npos);
  EXPECT_TRUE(s.message().find("table 'emb'") != std::string::npos);
  EXPECT_OK(cluster.Lookup(*cache, {5}, true, &plan, &rows));
  EXPECT_OK(cluster.Update(*cache, {5}, {1.0f, 1.0f}, kLr));  // trains on
  EXPECT_OK(cluster.Flush(*cache, kLr));
  std::map<int64_t, int64_t> clocks;
  const auto contents = cluster.Contents(&clocks);
  EXPECT_EQ(clocks[5], 1);
  for (float v : contents.at(5)) EXPECT_TRUE(std::isfinite(v));
}

// Two caches of one Adagrad shard, both having looked up ids 1 and 2, and
// a's update of them with `huge` merged. Each cache's accumulator of id 1
// stays finite after a step of 1.5e19 (2.25e38); the shard's would not
// after a second one: b's round.
struct TwoAdagradCaches {
  static het::TableConfig Table() {
    het::TableConfig t = SgdTable(2);
    t.optimizer.kind = het::OptimizerKind::kAdagrad;
    return t;
  }
  static het::CacheConfig Cache(het::SyncMode sync, int64_t write_staleness) {
    het::CacheConfig c = het_test::CacheConfigOf(Table(), 1);
    c.capacity = 8;
    c.sync = sync;
    c.read_staleness = 0;
    c.write_staleness = write_staleness;
    return c;
  }
  explicit TwoAdagradCaches(het::SyncMode sync, int64_t write_staleness = 0)
      : a(het_test::MakeCache(Cache(sync, write_staleness))),
        b(het_test::MakeCache(Cache(sync, write_staleness))) {
    EXPECT_OK(cluster.Lookup(*a, {1, 2}, true, &plan, &rows));
    EXPECT_OK(cluster.Lookup(*b, {1, 2}, true, &plan, &rows));
    EXPECT_OK(cluster.Update(*a, {1, 2}, huge, kLr));
    // By refresh a's round goes with its next exchange.
    if (sync == het::SyncMode::kRefresh) EXPECT_OK(cluster.Lookup(*a, {3}, true, &plan, &rows));
  }
  const std::vector<float> huge = {1.5e19f, 1.0f, 1.0f, 1.0f};  // ids 1 and 2
  LocalCluster cluster{Table(), 1};
  std::unique_ptr<het::WorkerCache> a, b;
  het::LookupPlan plan;
  std::vector<float> rows;
};

HET_TEST(ARoundAShardRefusesInPartEndsAndTheWorkerTrainsOn) {
  // b's round would overflow the shard's accumulator of id 1. The shard
  // refuses that update alone and merges the rest (id 2); the worker is
  // told once, its copy of id 1 is the shard's row again, and it trains
  // and flushes on.
  for (het::SyncMode sync : {het::SyncMode::kRefresh, het::SyncMode::kCheck}) {
    TwoAdagradCaches t(sync);
    LocalCluster& cluster = t.cluster;
    het::Status refused = cluster.Update(*t.b, {1, 2}, t.huge, kLr);
    if (sync == het::SyncMode::kRefresh) {
      EXPECT_OK(refused);
      refused = cluster.Lookup(*t.b, {3}, true, &t.plan, &t.rows);  // the round goes now
    }
    EXPECT_TRUE(refused.code() == het::StatusCode::kInvalidArgument);
    EXPECT_TRUE(refused.message().find("ids [1]") != std::string::npos);
    EXPECT_TRUE(refused.message().find("table 'emb'") != std::string::npos);
    std::map<int64_t, int64_t> clocks;
    auto contents = cluster.Contents(&clocks);
    EXPECT_EQ(clocks[1], 1);  // a's update alone
    EXPECT_EQ(clocks[2], 2);  // both
    // b reads the shard's row 1, not its own refused update.
    EXPECT_OK(cluster.Lookup(*t.b, {1}, true, &t.plan, &t.rows));
    EXPECT_NEAR(t.rows[0], contents.at(1)[0], 1e-6);
    EXPECT_NEAR(t.rows[1], contents.at(1)[1], 1e-6);
    EXPECT_OK(cluster.Update(*t.b, {1}, {1.0f, 1.0f}, kLr));  // trains on
    EXPECT_OK(cluster.Flush(*t.b, kLr));
    EXPECT_OK(cluster.Flush(*t.a, kLr));
    contents = cluster.Contents(&clocks);
    EXPECT_EQ(clocks[1], 2);
    for (const auto& [key, row] : contents) {
      for (float v : row) EXPECT_TRUE(std::isfinite(v));
    }
    EXPECT_EQ(cluster.shard(0).Counters().updates_refused_non_finite, 1u);
    EXPECT_EQ(t.b->Counters().rows_refused, 1u);
  }
}

HET_TEST(ARefreshThatWouldMakeACopyNonFiniteDropsItsPendingUpdates) {
  // b keeps its huge update of id 1 pending (write bound 5) after a's is
  // flushed: the refresh that a's push queued would merge b's pending
  // accumulator (2.25e38) into the shard's (2.25e38). b drops those
  // pending updates, as the shard would refuse them, names id 1 once and
  // trains on. Before, b's copy held inf: every later step of id 1 and
  // every flush were refused for good.
  TwoAdagradCaches t(het::SyncMode::kRefresh, /*write_staleness=*/5);
  LocalCluster& cluster = t.cluster;
  EXPECT_OK(cluster.Flush(*t.a, kLr));  // merged: b's copy of id 1 is queued
  EXPECT_OK(cluster.Update(*t.b, {1, 2}, t.huge, kLr));
  const het::Status dropped = cluster.Lookup(*t.b, {1}, true, &t.plan, &t.rows);
  EXPECT_TRUE(dropped.code() == het::StatusCode::kInvalidArgument);
  EXPECT_TRUE(dropped.message().find("ids [1]") != std::string::npos);
  EXPECT_EQ(t.b->Counters().rows_refused, 1u);
  EXPECT_OK(cluster.Lookup(*t.b, {1}, true, &t.plan, &t.rows));
  std::map<int64_t, int64_t> clocks;
  auto contents = cluster.Contents(&clocks);
  EXPECT_NEAR(t.rows[0], contents.at(1)[0], 1e-6);          // the shard's row
  EXPECT_OK(cluster.Update(*t.b, {1}, {1.0f, 1.0f}, kLr));  // trains on
  EXPECT_OK(cluster.Flush(*t.b, kLr));
  EXPECT_OK(cluster.Flush(*t.a, kLr));
  contents = cluster.Contents(&clocks);
  EXPECT_EQ(clocks[1], 2);  // a's huge update and b's last
  EXPECT_EQ(clocks[2], 2);
  for (const auto& [key, row] : contents) {
    for (float v : row) EXPECT_TRUE(std::isfinite(v));
  }
}

HET_TEST(ARefusalWhoseAnswerWasLostIsNamedByTheRepeat) {
  // As above, by refresh: b's round is refused for id 1 and its answer
  // lost. The round sent again is a repeat, which merges nothing and names
  // id 1 all the same: no refusal goes unsaid. Before, the repeat's answer
  // named nothing and id 1's update was gone without an error.
  TwoAdagradCaches t(het::SyncMode::kRefresh);
  LocalCluster& cluster = t.cluster;
  EXPECT_OK(cluster.Update(*t.b, {1, 2}, t.huge, kLr));
  EXPECT_TRUE(cluster.ExchangeLosingAnswers(*t.b, {3}).code() == het::StatusCode::kAborted);
  const het::Status refused = cluster.Lookup(*t.b, {3}, true, &t.plan, &t.rows);
  EXPECT_TRUE(refused.code() == het::StatusCode::kInvalidArgument);
  EXPECT_TRUE(refused.message().find("ids [1]") != std::string::npos);
  EXPECT_OK(cluster.Lookup(*t.b, {3}, true, &t.plan, &t.rows));
  std::map<int64_t, int64_t> clocks;
  cluster.Contents(&clocks);
  EXPECT_EQ(clocks[1], 1);
  EXPECT_EQ(clocks[2], 2);  // merged once, by the round's first sending
}

HET_TEST(ALostAnswerLeavesNoRecordOfCopiesTheCacheNeverTook) {
  // An evicting shard of 8 rows keeps every row a cache holds. An exchange
  // of 8 misses is served, recorded and its answer lost; the cache never
  // took those rows, so the round sent again (asking for 4 others) must
  // leave them free to go. Before, their records stayed for good: the
  // shard refused ("only 0 rows may go") and the record outgrew the cache.
  het::TableConfig table = SgdTable(2);
  table.max_rows = 8;
  table.on_full = het::OnFull::kEvict;
  LocalCluster cluster(table, 1);
  auto cache = RefreshCache(2, 8, 0, 0, 1);
  EXPECT_TRUE(cluster.ExchangeLosingAnswers(*cache, {0, 1, 2, 3, 4, 5, 6, 7}).code() ==
              het::StatusCode::kAborted);
  EXPECT_EQ(cluster.shard(0).Records().copies, 8u);
  het::ExchangePlan plan;
  std::vector<float> rows;
  EXPECT_OK(cluster.Exchange(*cache, {8, 9, 10, 11}, &plan, &rows));
  EXPECT_EQ(cluster.shard(0).Records().copies, 4u);
  EXPECT_EQ(cache->size(), 4);
  // A lost miss the repeat asks for again stays recorded once.
  EXPECT_TRUE(cluster.ExchangeLosingAnswers(*cache, {0, 1}).code() == het::StatusCode::kAborted);
  EXPECT_OK(cluster.Exchange(*cache, {1, 8}, &plan, &rows));
  EXPECT_EQ(cluster.shard(0).Records().copies, 5u);
  EXPECT_EQ(cache->size(), 5);
}

HET_TEST(APushThatWouldOverflowIsRefusedByTheShard) {
  // The no-cache path: the same gradient, pushed to the shard directly.
  het::TableConfig table = SgdTable(2);
  table.optimizer.kind = het::OptimizerKind::kAdagrad;
  LocalCluster cluster(table, 1);
  const std::vector<int64_t> keys = {4, 5};
  std::vector<float> rows;
  EXPECT_OK(cluster.GatherRows(keys, &rows));
  het::TableChunk before, after;
  EXPECT_OK(cluster.shard(0).Read(keys.data(), 2, &before));
  const std::vector<float> grads = {1.0f, 1.0f, 2e19f, 1.0f};
  const std::vector<int64_t> counts = {1, 1};
  het::Status s =
      cluster.shard(0).Push(keys.data(), grads.data(), counts.data(), 2, kLr, nullptr, nullptr);
  EXPECT_TRUE(s.code() == het::StatusCode::kInvalidArgument);
  EXPECT_TRUE(s.message().find("id 5") != std::string::npos);
  EXPECT_OK(cluster.shard(0).Read(keys.data(), 2, &after));
  // Not even the first row, whose update was fine, moved.
  EXPECT_TRUE(after.values == before.values && after.slots == before.slots &&
              after.clocks == before.clocks);
}

HET_TEST(RandomFaultsLoseNoUpdateAndMergeNoneTwice) {
  // Two workers, two shards, staleness 2, by refresh and by check; answers
  // lost at random (once, or several times in a row) before every kind of
  // push: the exchange, the check-mode push and the flush.
  const int dim = 2, shards = 2;
  const het::TableConfig table = SgdTable(dim);
  for (het::SyncMode mode : {het::SyncMode::kRefresh, het::SyncMode::kCheck}) {
    LocalCluster cluster(table, shards);
    Oracle oracle(dim);
    std::mt19937 rng(mode == het::SyncMode::kRefresh ? 7 : 11);
    std::vector<std::unique_ptr<het::WorkerCache>> caches;
    for (int w = 0; w < 2; ++w) {
      caches.push_back(RefreshCache(dim, 6, 2, 2, shards));
      if (mode == het::SyncMode::kCheck) {
        het::CacheConfig c = caches.back()->config();
        c.sync = het::SyncMode::kCheck;
        EXPECT_OK(het::WorkerCache::Create(c, &caches.back()));
      }
    }
    std::uniform_int_distribution<int64_t> key(0, 15);
    std::bernoulli_distribution lose(0.25);
    uint64_t lost = 0;
    for (int step = 0; step < 120; ++step) {
      het::WorkerCache& cache = *caches[step % 2];
      std::vector<int64_t> ids;
      for (int i = 0; i < 4; ++i) ids.push_back(key(rng));
      if (mode == het::SyncMode::kRefresh && lose(rng)) {
        EXPECT_TRUE(cluster.ExchangeLosingAnswers(cache, ids).code() == het::StatusCode::kAborted);
        ++lost;
        continue;
      }
      het::LookupPlan plan;
      std::vector<float> rows;
      EXPECT_OK(cluster.Lookup(cache, ids, true, &plan, &rows));
      const std::vector<float> g = Grads(rng, plan.unique_keys.size(), dim);
      het::Pushes due;
      EXPECT_OK(
          cache.Accumulate(plan.unique_keys.data(), plan.unique_keys.size(), g.data(), kLr, &due));
      oracle.Trained(plan.unique_keys, g);
      if (mode == het::SyncMode::kCheck) {
        const int drop = lose(rng) ? static_cast<int>(rng() % shards) : -1;
        het::Status s = cluster.PushAndAck(cache, due, kLr, drop);
        EXPECT_TRUE(drop < 0 ? s.ok() : s.code() == het::StatusCode::kAborted);
        lost += drop >= 0;
      }
    }
    for (auto& cache : caches) {
      het::Pushes pending;
      cache->Flush(&pending);
      if (pending.size() > 0) {  // a flush whose answer is lost, then the real one
        EXPECT_TRUE(cluster.PushAndAck(*cache, pending, kLr, 0).code() ==
                    het::StatusCode::kAborted);
      }
      EXPECT_OK(cluster.Flush(*cache, kLr));
    }
    EXPECT_TRUE(lost > 10);
    EXPECT_TRUE(oracle.Matches(cluster, table));
  }
}

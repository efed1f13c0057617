// Lean acknowledgements (docs/consistency.md): a push no other writer met
// since its base clock is acknowledged by its clock alone, and the cache
// holds the merge already (WorkerCache::StartRound computes it with the
// shard's own ApplyDelta). Checked against the shards' rows: after every
// flush, an evaluation read of every key (which reads a cached copy that is
// not behind its shard, and pulls the rest) returns each shard's row bit
// for bit, for two workers writing the same keys by refresh and by check,
// every optimizer, one and three shards, through lost answers. The NumPy
// model (tests/reference.py) checks the slots the same way, with whole
// answers.
#include <map>
#include <random>
#include <vector>

#include "cc_ops/common/tests/harness.h"
#include "cc_ops/embedding/core/tests/local_cluster.h"

namespace {

using het_test::LocalCluster;

constexpr int kKeys = 30;

std::unique_ptr<het::WorkerCache> Cache(const het::TableConfig& table, het::SyncMode sync,
                                        int shards) {
  het::CacheConfig c = het_test::CacheConfigOf(table, shards);
  c.capacity = 10;
  c.policy = het::CachePolicy::kLFU;
  c.read_staleness = 2;
  c.write_staleness = 3;
  c.sync = sync;
  return het_test::MakeCache(c);
}

// Every key's row as `cache` reads it for evaluation (a copy not behind its
// shard is read, the others pulled) equals the shards'.
bool ReadsTheShardsRows(LocalCluster& cluster, het::WorkerCache& cache) {
  std::vector<int64_t> all(kKeys);
  for (int k = 0; k < kKeys; ++k) all[k] = k;
  het::LookupPlan plan;
  if (!cache.Prepare(all.data(), kKeys, &plan).ok()) return false;
  std::vector<int32_t> positions;
  std::vector<float> pulled_rows;
  std::vector<int64_t> clocks;
  for (int i = 0; i < kKeys; ++i) {
    het::PulledRows pulled;
    if (!cluster.ShardOfKey(plan.unique_keys[i])
             .Pull(&plan.unique_keys[i], &plan.clocks[i], 1, /*read_staleness=*/0,
                   /*with_slots=*/false, &pulled, /*training=*/false)
             .ok()) {
      return false;
    }
    if (pulled.positions.empty()) continue;
    positions.push_back(i);
    pulled_rows.insert(pulled_rows.end(), pulled.values.begin(), pulled.values.end());
    clocks.push_back(pulled.clocks[0]);
  }
  const int dim = cache.dim();
  std::vector<float> rows(kKeys * dim);
  if (!cache
           .Complete(plan.unique_keys.data(), kKeys, positions.data(), positions.size(),
                     pulled_rows.data(), clocks.data(), /*training=*/false, rows.data())
           .ok()) {
    return false;
  }
  const std::map<int64_t, std::vector<float>> table = cluster.Contents();
  for (int i = 0; i < kKeys; ++i) {
    const std::vector<float>& row = table.at(plan.unique_keys[i]);
    if (!std::equal(row.begin(), row.end(), rows.begin() + i * dim)) return false;
  }
  return true;
}

}  // namespace

HET_TEST(ALeanAcknowledgementLeavesTheCacheWhereTheShardIs) {
  for (het::OptimizerKind kind : {het::OptimizerKind::kSGD, het::OptimizerKind::kAdagrad,
                                  het::OptimizerKind::kAdam, het::OptimizerKind::kFtrl}) {
    for (het::SyncMode sync : {het::SyncMode::kRefresh, het::SyncMode::kCheck}) {
      for (int shards : {1, 3}) {
        het::TableConfig table = het_test::SgdTable(3);
        table.optimizer.kind = kind;
        LocalCluster cluster(table, shards);
        auto a = Cache(table, sync, shards), b = Cache(table, sync, shards);
        std::mt19937_64 rng(static_cast<uint64_t>(kind) * 10 + shards);
        for (int t = 0; t < 60; ++t) {
          het::WorkerCache& cache = (t % 3 == 2) ? *b : *a;  // b writes a third of the steps
          std::vector<int64_t> ids(5);
          for (auto& id : ids) id = static_cast<int64_t>(rng() % kKeys);
          het::LookupPlan plan;
          std::vector<float> rows;
          EXPECT_OK(cluster.Lookup(cache, ids, true, &plan, &rows));
          std::vector<float> grads(rows.size());
          for (size_t i = 0; i < rows.size(); ++i) grads[i] = 0.3f * rows[i] + 0.01f * (i % 5);
          het::Pushes due;
          EXPECT_OK(cache.Accumulate(plan.unique_keys.data(), plan.unique_keys.size(), grads.data(),
                                     0.1f, &due));
          // Now and then a check-mode push's answer is lost: the round goes
          // again with the next, and its repeat is answered whole.
          const bool lose = sync == het::SyncMode::kCheck && due.size() > 0 && rng() % 5 == 0;
          (void)cluster.PushAndAck(cache, due, 0.1f, lose ? 0 : -1);
          if (t % 15 == 14) {
            EXPECT_OK(cluster.Flush(*a, 0.1f));
            EXPECT_OK(cluster.Flush(*b, 0.1f));
            EXPECT_TRUE(ReadsTheShardsRows(cluster, *a));
            EXPECT_TRUE(ReadsTheShardsRows(cluster, *b));
          }
        }
        const het::CacheCounters ca = a->Counters(), cb = b->Counters();
        // FTRL's pushes are answered whole (its rows follow the learning
        // rate, which a flush may carry otherwise than the last step).
        if (kind == het::OptimizerKind::kFtrl) {
          EXPECT_EQ(ca.rows_pushed_lean + cb.rows_pushed_lean, 0u);
        } else {
          EXPECT_TRUE(ca.rows_pushed_lean > 0 && cb.rows_pushed_lean > 0);
        }
        // Both wrote some rows the other held: not every push is lean.
        EXPECT_TRUE(ca.rows_pushed_lean + cb.rows_pushed_lean <
                    ca.rows_pushed - ca.dirty_evictions + cb.rows_pushed - cb.dirty_evictions);
      }
    }
  }
}

// The bytes a lean acknowledgement saves are the state it leaves out: one
// worker alone is acknowledged lean for every push it makes.
HET_TEST(ALoneWritersPushesComeBackAsClocks) {
  het::TableConfig table = het_test::SgdTable(4);
  table.optimizer.kind = het::OptimizerKind::kAdagrad;
  LocalCluster cluster(table, 2);
  auto cache = Cache(table, het::SyncMode::kCheck, 2);
  std::vector<int64_t> ids = {1, 2, 3};
  for (int t = 0; t < 6; ++t) {
    het::LookupPlan plan;
    std::vector<float> rows;
    EXPECT_OK(cluster.Lookup(*cache, ids, true, &plan, &rows));
    EXPECT_OK(
        cluster.Update(*cache, plan.unique_keys, std::vector<float>(rows.size(), 0.5f), 0.1f));
  }
  const het::CacheCounters before = cache->Counters();
  EXPECT_OK(cluster.Flush(*cache, 0.1f));
  const het::CacheCounters after = cache->Counters();
  EXPECT_EQ(after.rows_pushed - before.rows_pushed, 3u);
  EXPECT_EQ(after.rows_pushed_lean - before.rows_pushed_lean, 3u);
  // Three clocks and flags and two shards' epochs back; no state.
  EXPECT_EQ(after.bytes_received - before.bytes_received, 3u * (8 + 1) + 2 * 8);
  EXPECT_TRUE(ReadsTheShardsRows(cluster, *cache));
}

// A copy fetched again while its round waits to be sent again (one shard
// never got it; the entry was dropped meanwhile) is the row before the
// merge: when the round goes again and the shard acknowledges it lean, the
// copy takes the round's updates, which this worker must read.
HET_TEST(ACopyFetchedBeforeItsRoundIsMergedTakesTheMerge) {
  const het::TableConfig table = het_test::SgdTable(2);
  LocalCluster cluster(table, 2);
  het::CacheConfig c = het_test::CacheConfigOf(table, 2);
  c.capacity = 10;
  c.policy = het::CachePolicy::kLRU;
  c.read_staleness = 100;  // a stale copy would be read as it is
  c.write_staleness = 0;
  c.sync = het::SyncMode::kCheck;
  std::unique_ptr<het::WorkerCache> cache = het_test::MakeCache(c);
  int64_t k = 0, j = 0;
  while (het::ShardOf(k, 2) != 1) ++k;
  while (het::ShardOf(j, 2) != 0) ++j;
  het::LookupPlan plan;
  std::vector<float> rows;
  EXPECT_OK(cluster.Lookup(*cache, {k, j}, true, &plan, &rows));
  het::Pushes due;
  const std::vector<float> grads = {1.0f, 2.0f, 3.0f, 4.0f};
  EXPECT_OK(cache->Accumulate(plan.unique_keys.data(), 2, grads.data(), 0.5f, &due));
  // Shard 0 merges its part; shard 1 never gets the round.
  EXPECT_TRUE(!cluster.PushAndAck(*cache, due, 0.5f, /*drop_answer=*/0).ok());
  cache->Drop(&k, 1);
  EXPECT_OK(cluster.Lookup(*cache, {k}, true, &plan, &rows));  // the row before the merge
  EXPECT_OK(cluster.Lookup(*cache, {j}, true, &plan, &rows));
  EXPECT_OK(cache->Accumulate(&j, 1, grads.data(), 0.5f, &due));
  EXPECT_OK(cluster.PushAndAck(*cache, due, 0.5f));  // the round again: k's is lean
  EXPECT_TRUE(cache->Counters().rows_pushed_lean >= 1);
  EXPECT_OK(cluster.Lookup(*cache, {k}, true, &plan, &rows));
  const std::vector<float> merged = cluster.Contents().at(k);
  EXPECT_TRUE(std::equal(merged.begin(), merged.end(), rows.begin()));
}

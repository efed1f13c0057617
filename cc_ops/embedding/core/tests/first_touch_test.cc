// A first touch moves no row (initial_state.h, exchange_wire.h): a shard
// that makes a row for a cache's miss sends its clock alone when the cache
// makes rows from the same initial states, and the cache makes it. Checked
// against a twin cluster whose cache makes none: every row a lookup returns,
// and the table after training, are the same bit for bit; rows written
// otherwise (imported) and caches with other initial states get whole rows.
#include <map>
#include <random>
#include <vector>

#include "cc_ops/common/tests/harness.h"
#include "cc_ops/embedding/core/tests/local_cluster.h"
#include "cc_ops/embedding/core/wire_sizes.h"

namespace {

using het_test::LocalCluster;

het::TableConfig AdagradTable(int64_t seed,
                              het::InitializerKind kind = het::InitializerKind::kUniform) {
  het::TableConfig c = het_test::SgdTable(4);
  c.optimizer.kind = het::OptimizerKind::kAdagrad;
  c.initializer.kind = kind;
  c.initializer.a = -0.3f;
  c.initializer.b = 0.3f;
  c.initializer.seed = seed;
  return c;
}

std::unique_ptr<het::WorkerCache> Cache(const het::TableConfig& table, bool rebuilds, int shards) {
  het::CacheConfig c = het_test::CacheConfigOf(table, shards);
  c.capacity = 12;
  c.policy = het::CachePolicy::kLFU;
  c.read_staleness = 2;
  c.write_staleness = 2;
  c.rebuilds_rows = rebuilds;
  return het_test::MakeCache(c);
}

// Trains `steps` random batches through `cache`, returning every row the
// lookups returned, in order.
std::vector<float> Train(LocalCluster& cluster, het::WorkerCache& cache, int steps) {
  std::mt19937_64 rng(5);
  std::vector<float> seen;
  for (int t = 0; t < steps; ++t) {
    std::vector<int64_t> ids(6);
    for (auto& id : ids) id = static_cast<int64_t>(rng() % 40) - 3;
    het::LookupPlan plan;
    std::vector<float> rows;
    EXPECT_OK(cluster.Lookup(cache, ids, true, &plan, &rows));
    seen.insert(seen.end(), rows.begin(), rows.end());
    std::vector<float> grads(rows.size());
    for (size_t i = 0; i < rows.size(); ++i) grads[i] = 0.5f * rows[i] + 0.01f * (i % 7);
    EXPECT_OK(cluster.Update(cache, plan.unique_keys, grads, 0.1f));
  }
  EXPECT_OK(cluster.Flush(cache, 0.1f));
  return seen;
}

uint64_t Created(LocalCluster& cluster) {
  uint64_t n = 0;
  for (int s = 0; s < cluster.num_shards(); ++s) n += cluster.shard(s).Counters().rows_created;
  return n;
}

}  // namespace

HET_TEST(AFirstTouchMovesOnlyTheClockAndTheRowIsTheShards) {
  for (int shards : {1, 3}) {
    const het::TableConfig table = AdagradTable(9);
    LocalCluster lean(table, shards), whole(table, shards);
    auto rebuilding = Cache(table, true, shards), fetching = Cache(table, false, shards);
    const std::vector<float> a = Train(lean, *rebuilding, 30);
    const std::vector<float> b = Train(whole, *fetching, 30);
    EXPECT_TRUE(a == b);
    std::map<int64_t, int64_t> clocks_a, clocks_b;
    EXPECT_TRUE(lean.Contents(&clocks_a) == whole.Contents(&clocks_b));
    EXPECT_TRUE(clocks_a == clocks_b);
    // Every row the shards made went out as a clock; none of the others.
    const het::CacheCounters ca = rebuilding->Counters(), cb = fetching->Counters();
    EXPECT_EQ(ca.rows_rebuilt, Created(lean));
    EXPECT_TRUE(ca.rows_rebuilt > 0 && ca.rows_rebuilt < ca.rows_pulled);
    EXPECT_EQ(cb.rows_rebuilt, 0u);
    EXPECT_EQ(ca.rows_pulled, cb.rows_pulled);
    // Each made row saved its state (8 floats); the bits and the 8-byte
    // name of the initial states cost far less.
    EXPECT_TRUE(cb.bytes_received - ca.bytes_received >=
                ca.rows_rebuilt * het::wire::Row(8) - 4 * 30 * shards);
  }
}

HET_TEST(ACacheWithOtherInitialStatesGetsWholeRows) {
  const het::TableConfig table = AdagradTable(9);
  het::TableConfig seed = table, low = table, kind = table, optimizer = table;
  seed.initializer.seed = 10;
  low.initializer.a = -0.2f;
  kind.initializer.kind = het::InitializerKind::kConstant;
  optimizer.optimizer.initial_accumulator = 0.2f;
  for (const het::TableConfig& other : {seed, low, kind, optimizer}) {
    LocalCluster lean(table, 2), whole(table, 2);
    auto mismatched = Cache(other, true, 2), fetching = Cache(table, false, 2);
    // The cache's own settings differ (its local steps may too): only the
    // rows it gets are compared, on its first lookup.
    het::LookupPlan plan;
    std::vector<float> a, b;
    EXPECT_OK(lean.Lookup(*mismatched, {1, 2, 3}, true, &plan, &a));
    EXPECT_OK(whole.Lookup(*fetching, {1, 2, 3}, true, &plan, &b));
    EXPECT_TRUE(a == b);
    EXPECT_EQ(mismatched->Counters().rows_rebuilt, 0u);
  }
}

HET_TEST(NormalInitializersSendWholeRows) {
  // Their rows call the C library's log and cos, whose last bit may differ
  // between a worker's machine and its shard's: no cache makes them.
  for (auto kind : {het::InitializerKind::kNormal, het::InitializerKind::kTruncatedNormal}) {
    const het::TableConfig table = AdagradTable(9, kind);
    LocalCluster lean(table, 1), whole(table, 1);
    auto rebuilding = Cache(table, true, 1), fetching = Cache(table, false, 1);
    EXPECT_TRUE(Train(lean, *rebuilding, 10) == Train(whole, *fetching, 10));
    EXPECT_EQ(rebuilding->Counters().rows_rebuilt, 0u);
  }
}

HET_TEST(RowsWrittenOtherwiseComeWhole) {
  // Imported rows (a restore, weights) are not the initializer's: a miss of
  // one gets it whole; a key never written is made by the cache.
  const het::TableConfig table = AdagradTable(9);
  LocalCluster cluster(table, 1);
  het::TableChunk chunk;
  chunk.keys = {1, 2};
  chunk.values = {1, 2, 3, 4, 5, 6, 7, 8};
  chunk.slots = std::vector<float>(8, 0.5f);
  chunk.clocks = {3, 0};
  chunk.steps = {3, 0};
  EXPECT_OK(cluster.shard(0).Import(chunk));
  auto cache = Cache(table, true, 1);
  het::LookupPlan plan;
  std::vector<float> rows;
  EXPECT_OK(cluster.Lookup(*cache, {1, 2, 30}, true, &plan, &rows));
  EXPECT_EQ(cache->Counters().rows_rebuilt, 1u);  // key 30
  EXPECT_TRUE(std::vector<float>(rows.begin(), rows.begin() + 8) == chunk.values);
  std::vector<float> direct;
  EXPECT_OK(cluster.GatherRows({30}, &direct));
  EXPECT_TRUE(std::vector<float>(rows.begin() + 8, rows.end()) == direct);
}

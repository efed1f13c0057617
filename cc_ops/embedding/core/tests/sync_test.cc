#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <vector>

#include "cc_ops/common/tests/harness.h"
#include "cc_ops/embedding/core/tests/local_cluster.h"

namespace {

using het_test::LocalCluster;

het::TableConfig Table(het::OptimizerKind kind, int dim) {
  het::TableConfig c;
  c.name = "emb";
  c.dim = dim;
  c.optimizer.kind = kind;
  c.initializer.seed = 3;
  return c;
}

het::CacheConfig Cache(int dim, int64_t capacity, het::CachePolicy policy, int64_t s_read,
                       int64_t s_write, het::OptimizerKind kind = het::OptimizerKind::kSGD) {
  het::CacheConfig c;
  c.optimizer.kind = kind;  // the table's
  c.table_name = "emb";
  c.dim = dim;
  c.capacity = capacity;
  c.policy = policy;
  c.pin_threshold = 5;
  c.read_staleness = s_read;
  c.write_staleness = s_write;
  return c;
}

// A cache of a table split over `shards` shards.
std::unique_ptr<het::WorkerCache> MakeCache(het::CacheConfig c, int shards = 1) {
  c.num_shards = shards;
  std::unique_ptr<het::WorkerCache> cache;
  if (!het::WorkerCache::Create(c, &cache).ok()) std::abort();
  return cache;
}

// Zipf-skewed batches over `vocab` keys.
std::vector<std::vector<int64_t>> Batches(int count, int size, int vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<double> weights(vocab);
  for (int k = 0; k < vocab; ++k) weights[k] = 1.0 / std::pow(k + 1.0, 1.1);
  std::discrete_distribution<int> zipf(weights.begin(), weights.end());
  std::vector<std::vector<int64_t>> out(count);
  for (auto& batch : out) {
    for (int i = 0; i < size; ++i) batch.push_back(zipf(rng) * 37 - 500);  // spread, with negatives
  }
  return out;
}

// A deterministic fake gradient from the row, as a model's would be.
std::vector<float> Gradients(const std::vector<float>& rows, int dim, int step) {
  std::vector<float> g(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) g[i] = std::sin(rows[i] * 10.0f + step + i % dim) * 0.1f;
  return g;
}

// Trains one worker's cache and the no-cache path on the same batches with
// the same gradients, checking at every step that both read the same rows.
void TrainSideBySide(LocalCluster& cached, het::WorkerCache& cache, LocalCluster& direct,
                     const std::vector<std::vector<int64_t>>& batches, int dim) {
  for (int step = 0; step < static_cast<int>(batches.size()); ++step) {
    het::LookupPlan plan;
    std::vector<float> via_cache, via_table;
    EXPECT_OK(cached.Lookup(cache, batches[step], true, &plan, &via_cache));
    EXPECT_OK(direct.GatherRows(plan.unique_keys, &via_table));
    EXPECT_TRUE(via_cache == via_table);
    auto grads = Gradients(via_table, dim, step);
    EXPECT_OK(cached.Update(cache, plan.unique_keys, grads, 0.05f));
    EXPECT_OK(direct.PushGradients(plan.unique_keys, grads, 0.05f));
  }
}

}  // namespace

HET_TEST(StalenessZeroMatchesTheNoCachePathExactly) {
  const int dim = 5;
  for (auto kind : {het::OptimizerKind::kSGD, het::OptimizerKind::kAdagrad,
                    het::OptimizerKind::kAdam, het::OptimizerKind::kFtrl}) {
    for (auto policy :
         {het::CachePolicy::kLRU, het::CachePolicy::kLFU, het::CachePolicy::kLFUOpt}) {
      LocalCluster cached(Table(kind, dim), 2), direct(Table(kind, dim), 2);
      auto cache = MakeCache(Cache(dim, 40, policy, 0, 0, kind), 2);  // small: evicts every step
      TrainSideBySide(cached, *cache, direct, Batches(60, 24, 300, 11), dim);
      EXPECT_OK(cached.Flush(*cache, 0.05f));  // the last step's pushes wait for an exchange
      std::map<int64_t, int64_t> ca, cb;
      EXPECT_TRUE(cached.Contents(&ca) == direct.Contents(&cb));
      EXPECT_TRUE(ca == cb);
      EXPECT_TRUE(cache->Counters().evictions > 0);
    }
  }
}

// Reads see a worker's own writes as the table's optimizer makes them: with
// one worker and nothing pushed, every cached read equals the no-cache path
// to the bit, whatever the optimizer (the local step is the shard's step on
// the same state). After the flush the shard holds the same rows, up to the
// rounding of merging the summed increments.
HET_TEST(LocalStepsFollowTheTablesOptimizer) {
  const int dim = 4;
  for (auto kind : {het::OptimizerKind::kSGD, het::OptimizerKind::kAdagrad,
                    het::OptimizerKind::kAdam, het::OptimizerKind::kFtrl}) {
    LocalCluster cached(Table(kind, dim), 2), direct(Table(kind, dim), 2);
    // Unbounded write bound and a cache that holds every key: no push at all.
    auto cache = MakeCache(Cache(dim, 400, het::CachePolicy::kLFU, -1, -1, kind), 2);
    TrainSideBySide(cached, *cache, direct, Batches(40, 32, 300, 17), dim);
    EXPECT_EQ(cache->Counters().rows_pushed, 0u);
    EXPECT_OK(cached.Flush(*cache, 0.05f));
    std::map<int64_t, int64_t> ca, cb;
    auto a = cached.Contents(&ca), b = direct.Contents(&cb);
    EXPECT_TRUE(ca == cb);
    double worst = 0;
    for (const auto& kv : b) {
      for (int j = 0; j < dim; ++j) {
        const double want = kv.second[j], got = a[kv.first][j];
        worst = std::max(worst, std::fabs(got - want) / std::max(1e-3, std::fabs(want)));
      }
    }
    // Up to 40 increments summed apart from the row: a few float ulps.
    EXPECT_TRUE(worst < 1e-5);
  }
}

// Two workers' runs of Adam updates merge as one run: each moment decays
// from the shard's value and takes each worker's average, so with the same
// gradient throughout the shard ends as if all 60 updates were applied in
// turn. Adding the workers' changes instead would decay the starting
// moment twice (by 2 * 0.9^30 - 1, flipping its sign).
HET_TEST(TwoWorkersAdamMomentsMergeAsOneRun) {
  const int dim = 3;
  LocalCluster cluster(Table(het::OptimizerKind::kAdam, dim), 1),
      sequential(Table(het::OptimizerKind::kAdam, dim), 1);
  const std::vector<int64_t> ids = {9};
  const std::vector<float> warm = {1.0f, -2.0f, 0.5f}, g = {-0.3f, 0.2f, 0.1f};
  EXPECT_OK(cluster.PushGradients(ids, warm, 0.01f));  // moments far from g's
  EXPECT_OK(sequential.PushGradients(ids, warm, 0.01f));
  auto a = MakeCache(Cache(dim, 4, het::CachePolicy::kLFU, -1, -1, het::OptimizerKind::kAdam));
  auto b = MakeCache(Cache(dim, 4, het::CachePolicy::kLFU, -1, -1, het::OptimizerKind::kAdam));
  het::LookupPlan plan;
  std::vector<float> rows;
  EXPECT_OK(cluster.Lookup(*a, ids, true, &plan, &rows));
  EXPECT_OK(cluster.Lookup(*b, ids, true, &plan, &rows));
  const std::vector<float> start = rows;
  for (int i = 0; i < 30; ++i) {
    EXPECT_OK(cluster.Update(*a, ids, g, 0.01f));
    EXPECT_OK(cluster.Update(*b, ids, g, 0.01f));
  }
  std::vector<float> moved;  // each worker's own copy: start + the same delta
  EXPECT_OK(cluster.Lookup(*a, ids, false, &plan, &moved));
  EXPECT_OK(cluster.Flush(*a, 0.01f));
  EXPECT_OK(cluster.Flush(*b, 0.01f));
  for (int i = 0; i < 60; ++i) EXPECT_OK(sequential.PushGradients(ids, g, 0.01f));
  het::TableChunk merged, applied;
  EXPECT_OK(cluster.shard(0).Export(0, 10, &merged));
  EXPECT_OK(sequential.shard(0).Export(0, 10, &applied));
  EXPECT_EQ(merged.clocks[0], 61);
  EXPECT_EQ(merged.steps[0], 61);
  for (int j = 0; j < 2 * dim; ++j) {
    EXPECT_NEAR(merged.slots[j], applied.slots[j], 1e-6 + 1e-5 * std::fabs(applied.slots[j]));
  }
  // The row keeps a's whole delta (no other writer had pushed) and half of
  // b's (30 of its 30 updates' time had a's 30 too): 1.5 deltas, not the 2
  // that would carry it past where either worker's copy was.
  for (int j = 0; j < dim; ++j) {
    const float delta = moved[j] - start[j];
    EXPECT_NEAR(merged.values[j], start[j] + 1.5f * delta, 1e-6);
  }
}

HET_TEST(DirtyEvictionsAndFlushLoseNoUpdate) {
  const int dim = 3;
  auto table = Table(het::OptimizerKind::kSGD, dim);
  table.initializer.kind = het::InitializerKind::kConstant;
  table.initializer.a = 0;
  LocalCluster cluster(table, 3);
  // Unbounded staleness: nothing is pushed but by eviction or flush.
  auto cache = MakeCache(Cache(dim, 30, het::CachePolicy::kLFU, -1, -1), 3);
  auto batches = Batches(80, 20, 500, 5);
  std::map<int64_t, int64_t> updates;
  for (const auto& batch : batches) {
    het::LookupPlan plan;
    std::vector<float> rows;
    EXPECT_OK(cluster.Lookup(*cache, batch, true, &plan, &rows));
    std::vector<float> grads(rows.size(), 0.25f);  // exact in any order
    EXPECT_OK(cluster.Update(*cache, plan.unique_keys, grads, 1.0f));
    for (int64_t k : plan.unique_keys) ++updates[k];
  }
  EXPECT_TRUE(cache->Counters().dirty_evictions > 0);
  EXPECT_OK(cluster.Flush(*cache, 1.0f));
  het::Pushes left;
  cache->Flush(&left);
  EXPECT_EQ(left.size(), 0u);
  std::map<int64_t, int64_t> clocks;
  auto contents = cluster.Contents(&clocks);
  uint64_t total = 0;
  for (const auto& kv : updates) {
    EXPECT_EQ(clocks[kv.first], kv.second);
    EXPECT_EQ(contents[kv.first][0], -0.25f * kv.second);
    total += kv.second;
  }
  EXPECT_EQ(cache->Counters().updates_pushed, total);
  uint64_t applied = 0;
  for (int s = 0; s < 3; ++s) applied += cluster.shard(s).Counters().updates_applied;
  EXPECT_EQ(applied, total);
}

HET_TEST(ReadBoundDecidesWhenAnotherWorkersUpdatesAreSeen) {
  const int dim = 2;
  LocalCluster cluster(Table(het::OptimizerKind::kSGD, dim), 1);
  auto a = MakeCache(Cache(dim, 8, het::CachePolicy::kLRU, 3, 0));
  auto b = MakeCache(Cache(dim, 8, het::CachePolicy::kLRU, 3, 0));
  std::vector<int64_t> ids = {7};
  het::LookupPlan plan;
  std::vector<float> seen_a, seen_b;
  EXPECT_OK(cluster.Lookup(*a, ids, true, &plan, &seen_a));
  const std::vector<float> first = seen_a;
  for (int i = 0; i < 3; ++i) {  // b pushes 3 updates: a is exactly at its bound
    EXPECT_OK(cluster.Lookup(*b, ids, true, &plan, &seen_b));
    EXPECT_OK(cluster.Update(*b, ids, std::vector<float>(dim, 1.0f), 0.5f));
    EXPECT_OK(cluster.Flush(*b, 0.5f));  // delivered now, not with b's next exchange
  }
  EXPECT_OK(cluster.Lookup(*a, ids, true, &plan, &seen_a));
  EXPECT_TRUE(seen_a == first);
  EXPECT_EQ(a->Counters().hits, 1u);
  EXPECT_OK(cluster.Lookup(*b, ids, true, &plan, &seen_b));
  EXPECT_OK(cluster.Update(*b, ids, std::vector<float>(dim, 1.0f), 0.5f));  // 4 behind now
  EXPECT_OK(cluster.Flush(*b, 0.5f));
  EXPECT_OK(cluster.Lookup(*a, ids, true, &plan, &seen_a));
  EXPECT_EQ(a->Counters().stale_refreshes, 1u);
  EXPECT_NEAR(seen_a[0], first[0] - 4 * 0.5f, 1e-6);
}

// HET's check: the copy is valid while c_g <= c_c + s_r, so a worker's own
// pending updates extend its copy's life.
HET_TEST(RefreshKeepsTheWorkersOwnPendingUpdates) {
  const int dim = 2;
  LocalCluster cluster(Table(het::OptimizerKind::kSGD, dim), 2);
  auto checking = Cache(dim, 8, het::CachePolicy::kLFU, 0, 100);  // a never pushes here
  checking.sync = het::SyncMode::kCheck;
  auto a = MakeCache(checking, 2);
  auto b = MakeCache(Cache(dim, 8, het::CachePolicy::kLFU, 0, 0), 2);
  std::vector<int64_t> ids = {-42};
  het::LookupPlan plan;
  std::vector<float> row_a, row_b;
  EXPECT_OK(cluster.Lookup(*a, ids, true, &plan, &row_a));
  const float init = row_a[0];
  EXPECT_OK(cluster.Update(*a, ids, {1.0f, 1.0f}, 0.1f));  // local: -0.1
  EXPECT_OK(cluster.Update(*a, ids, {2.0f, 2.0f}, 0.1f));  // local: -0.2 more
  // a's local clock is 2: b's first two updates keep a's copy valid at bound 0.
  for (int i = 0; i < 3; ++i) {
    EXPECT_OK(cluster.Lookup(*b, ids, true, &plan, &row_b));
    EXPECT_OK(cluster.Update(*b, ids, {2.0f, 2.0f}, 0.125f));  // server: -0.25 each,
    EXPECT_OK(cluster.Flush(*b, 0.125f));                      // delivered now
    EXPECT_OK(cluster.Lookup(*a, ids, true, &plan, &row_a));
    EXPECT_EQ(a->Counters().stale_refreshes, i < 2 ? 0u : 1u);
  }
  EXPECT_NEAR(row_a[0], init - 0.75f - 0.3f, 1e-6);  // server row plus a's own steps
  EXPECT_OK(cluster.Flush(*a, 0.1f));                // server applies a's sum of 2 with SGD at 0.1
  std::map<int64_t, int64_t> clocks;
  auto contents = cluster.Contents(&clocks);
  EXPECT_NEAR(contents[-42][0], init - 0.75f - 0.3f, 1e-6);
  EXPECT_EQ(clocks[-42], 5);
}

// With a ramp of 10 steps the bounds in force are a tenth of the cache's
// training steps until they reach the configured 4 (read) and 6 (write).
HET_TEST(StalenessRampBoundsGrowWithTrainingSteps) {
  const int dim = 2;
  LocalCluster cluster(Table(het::OptimizerKind::kAdagrad, dim), 1);
  auto config = Cache(dim, 8, het::CachePolicy::kLRU, 4, 6, het::OptimizerKind::kAdagrad);
  config.staleness_ramp = 10;
  auto cache = MakeCache(config);
  const std::vector<int64_t> ids = {3};
  uint64_t expected_pushes = 0;
  int64_t pending = 0;
  for (int step = 0; step < 100; ++step) {
    het::LookupPlan plan;
    std::vector<float> rows;
    EXPECT_OK(cluster.Lookup(*cache, ids, true, &plan, &rows));
    EXPECT_EQ(plan.read_staleness, std::min<int64_t>(4, step / 10));
    // The exchange delivered what the last step made due.
    EXPECT_EQ(cache->Counters().rows_pushed, expected_pushes);
    EXPECT_OK(cluster.Update(*cache, ids, {0.5f, 0.5f}, 0.1f));
    // The one row is due once its pending updates pass the bound in force.
    if (++pending > std::min<int64_t>(6, step / 10)) {
      ++expected_pushes;
      pending = 0;
    }
  }
  EXPECT_EQ(cache->Counters().steps, 100u);
  config.staleness_ramp = -1;
  std::unique_ptr<het::WorkerCache> bad;
  EXPECT_INVALID(het::WorkerCache::Create(config, &bad), "staleness ramp must be >= 0");
}

HET_TEST(EvaluationLookupsChangeNothing) {
  const int dim = 2;
  LocalCluster cluster(Table(het::OptimizerKind::kSGD, dim), 1);
  auto cache = MakeCache(Cache(dim, 4, het::CachePolicy::kLRU, 10, 10));
  het::LookupPlan plan;
  std::vector<float> rows;
  EXPECT_OK(cluster.Lookup(*cache, {1, 2}, true, &plan, &rows));
  EXPECT_OK(cluster.Update(*cache, plan.unique_keys, {1, 1, 1, 1}, 0.5f));
  // More ids than the cache holds is fine out of training: nothing is inserted.
  EXPECT_OK(cluster.Lookup(*cache, {1, 2, 3, 4, 5, 6}, false, &plan, &rows));
  EXPECT_EQ(cache->size(), 2);
  het::Pushes pending;
  cache->Flush(&pending);
  EXPECT_EQ(pending.size(), 2u);
  EXPECT_EQ(cache->Counters().rows_pushed, 0u);
  // Row 1 is served with this worker's own pending step on top.
  std::vector<float> server;
  EXPECT_OK(cluster.GatherRows({1}, &server));
  EXPECT_NEAR(rows[0], server[0] - 0.5f, 1e-6);
}

// Resident memory of this process, from /proc/self/statm.
size_t ResidentBytes() {
  std::ifstream statm("/proc/self/statm");
  size_t pages = 0, resident = 0;
  statm >> pages >> resident;
  return resident * static_cast<size_t>(sysconf(_SC_PAGESIZE));
}

HET_TEST(ACacheTakesMemoryAsItFillsNotWhenMade) {
  // 1M rows of dim 16 with Adagrad: 290 MB when full. A cache that only
  // evaluates (the chief's) must cost nothing like that.
  const int dim = 16;
  const size_t before = ResidentBytes();
  LocalCluster cluster(Table(het::OptimizerKind::kAdagrad, dim), 1);
  auto cache =
      MakeCache(Cache(dim, 1 << 20, het::CachePolicy::kLFU, 10, 10, het::OptimizerKind::kAdagrad));
  EXPECT_TRUE(ResidentBytes() < before + (16u << 20));
  het::LookupPlan plan;
  std::vector<float> rows;
  std::vector<int64_t> ids(4096);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int64_t>(i) * 7919;
  EXPECT_OK(cluster.Lookup(*cache, ids, false, &plan, &rows));
  EXPECT_EQ(cache->size(), 0);
  const size_t empty = cache->MemoryBytes();
  EXPECT_TRUE(empty < (1u << 20));
  // Training fills it: the slots it used are counted, and no more.
  EXPECT_OK(cluster.Lookup(*cache, ids, true, &plan, &rows));
  EXPECT_EQ(cache->size(), 4096);
  EXPECT_TRUE(cache->MemoryBytes() > empty + 4096 * 2 * 32 * sizeof(float));
  EXPECT_TRUE(cache->MemoryBytes() < empty + 4096 * 1024);
  EXPECT_TRUE(ResidentBytes() < before + (32u << 20));
  // Emptied and filled again, the same slots serve.
  cache->Clear();
  EXPECT_OK(cluster.Lookup(*cache, ids, true, &plan, &rows));
  EXPECT_EQ(cache->size(), 4096);
  EXPECT_TRUE(ResidentBytes() < before + (32u << 20));
}

// An SGD table of rows of 2 and a 3-row LFU cache that just looked up ids
// 1 and 2, as a training step's update finds them.
struct TwoRowsLookedUp {
  LocalCluster cluster{Table(het::OptimizerKind::kSGD, 2), 1};
  std::unique_ptr<het::WorkerCache> cache = MakeCache(Cache(2, 3, het::CachePolicy::kLFU, 1, 1));
  het::Pushes due;
  TwoRowsLookedUp() {
    het::LookupPlan plan;
    std::vector<float> rows;
    EXPECT_OK(cluster.Lookup(*cache, {1, 2}, true, &plan, &rows));
  }
};

HET_TEST(KeysNotCachedAreHandedBackForTheCallerToPush) {
  // A later lookup of the same step may evict a row the step's update
  // needs: its gradient comes back to be pushed as without a cache, and the
  // cached rows take their steps.
  TwoRowsLookedUp step;
  const std::vector<int64_t> keys = {9, 1, 7};
  const std::vector<float> grads = {1, 1, 2, 2, 3, 3};
  std::vector<int64_t> uncached;
  EXPECT_OK(
      step.cache->Accumulate(keys.data(), 3, grads.data(), 0.5f, &step.due, nullptr, &uncached));
  EXPECT_TRUE(uncached == (std::vector<int64_t>{0, 2}));
  EXPECT_EQ(step.cache->Counters().pushed_uncached, 2u);
  step.cache->Flush(&step.due);
  EXPECT_TRUE(step.due.keys == (std::vector<int64_t>{1}));  // only the cached row moved
  EXPECT_EQ(step.due.deltas[0], -0.5f * 2);
}

HET_TEST(EveryRowAStepReadIsThereForItsUpdate) {
  // A step reads five rows through a 3-row cache (two pass through), then
  // the same layer reads three of them again, taking the places of rows the
  // step read: those pass through from then on. The update finds every
  // row, cached or passing, and pushes each once, with nothing handed back.
  TwoRowsLookedUp step;  // a step before, whose update never came
  het::LookupPlan plan;
  std::vector<float> rows;
  const std::vector<int64_t> keys = {3, 4, 5, 6, 7};
  EXPECT_OK(step.cluster.Lookup(*step.cache, keys, true, &plan, &rows));
  EXPECT_OK(step.cluster.Lookup(*step.cache, {7, 6, 5}, true, &plan, &rows));
  EXPECT_EQ(step.cache->Counters().passed_through, 2u);  // read past the cache: 6 and 7
  const std::vector<float> grads = {1, 1, 2, 2, 3, 3, 4, 4, 5, 5};
  std::vector<int64_t> uncached;
  EXPECT_OK(
      step.cache->Accumulate(keys.data(), 5, grads.data(), 0.5f, &step.due, nullptr, &uncached));
  EXPECT_TRUE(uncached.empty());
  step.cache->Flush(&step.due);
  std::vector<std::pair<int64_t, float>> pushed;
  for (size_t i = 0; i < step.due.size(); ++i) {
    pushed.push_back({step.due.keys[i], step.due.deltas[i * 2]});
  }
  std::sort(pushed.begin(), pushed.end());
  EXPECT_TRUE(pushed == (std::vector<std::pair<int64_t, float>>{
                            {3, -0.5f}, {4, -1.0f}, {5, -1.5f}, {6, -2.0f}, {7, -2.5f}}));
}

HET_TEST(RowsAStepsLaterLookupEvictsStillTakeItsUpdate) {
  // The step reads three rows into the 3-row cache, then two new ones,
  // whose places the first two give up: those pass through from then on
  // (their pending updates, from the step before, went to the outbox), so
  // the update still takes its step on the copies the step read.
  TwoRowsLookedUp step;
  const std::vector<int64_t> before = {1, 2};
  const std::vector<float> ones = {1, 1, 1, 1};
  EXPECT_OK(step.cache->Accumulate(before.data(), 2, ones.data(), 0.5f, &step.due));
  het::LookupPlan plan;
  std::vector<float> rows;
  EXPECT_OK(step.cluster.Lookup(*step.cache, {1, 3, 4}, true, &plan, &rows));
  EXPECT_OK(step.cluster.Lookup(*step.cache, {5, 6}, true, &plan, &rows));
  const std::vector<int64_t> keys = {1, 3, 4, 5, 6};
  const std::vector<float> grads = {1, 1, 2, 2, 3, 3, 4, 4, 5, 5};
  std::vector<int64_t> uncached;
  EXPECT_OK(
      step.cache->Accumulate(keys.data(), 5, grads.data(), 0.5f, &step.due, nullptr, &uncached));
  EXPECT_TRUE(uncached.empty());
  // Each key's delta over every push, first dimension (2's went out with
  // the lookup whose row took its place).
  std::map<int64_t, float> moved;
  for (int round = 0; round < 3; ++round) {  // a key goes once a round
    step.cache->Flush(&step.due);
    for (size_t i = 0; i < step.due.size(); ++i) moved[step.due.keys[i]] += step.due.deltas[i * 2];
    step.cache->AckPush(step.due.keys.data(), static_cast<int64_t>(step.due.size()),
                        step.due.counts.data(), nullptr, nullptr, 0, nullptr);
  }
  EXPECT_TRUE(moved == (std::map<int64_t, float>{
                           {1, -1.0f}, {3, -1.0f}, {4, -1.5f}, {5, -2.0f}, {6, -2.5f}}));
}

HET_TEST(BadCacheUseIsRejectedWithoutSideEffects) {
  const int dim = 2;
  TwoRowsLookedUp step;
  auto& cache = step.cache;
  het::Pushes& due = step.due;
  het::LookupPlan plan;
  std::vector<float> rows;
  const std::vector<int64_t> keys = {1, 2};
  const std::vector<float> bad = {1, 1, 1, INFINITY};
  EXPECT_INVALID(cache->Accumulate(keys.data(), 2, bad.data(), 0.1f, &due), "non-finite");
  const std::vector<int64_t> twice = {1, 1};
  const std::vector<float> good = {1, 1, 1, 1};
  EXPECT_INVALID(cache->Accumulate(twice.data(), 2, good.data(), 0.1f, &due), "appears twice");
  const std::vector<int64_t> uncached = {1, 9};
  EXPECT_TRUE(!cache->Accumulate(uncached.data(), 2, good.data(), 0.1f, &due).ok());
  cache->Flush(&due);
  EXPECT_EQ(due.size(), 0u);  // none of the rejected calls left anything pending
  het::CacheConfig config = Cache(dim, 0, het::CachePolicy::kLFU, 1, 1);
  std::unique_ptr<het::WorkerCache> none;
  EXPECT_INVALID(het::WorkerCache::Create(config, &none), "cache capacity");
  config = Cache(dim, 4, het::CachePolicy::kLFU, 1, 1);
  config.vocabulary_size = 100;
  auto fixed = MakeCache(config);
  EXPECT_INVALID(step.cluster.Lookup(*fixed, {5, 100}, true, &plan, &rows), "id 100 is outside");
}

HET_TEST(CountersAddUpAndLfuBeatsLruOnSkewedKeys) {
  const int dim = 4;
  double hit_rate[2];
  int i = 0;
  for (auto policy : {het::CachePolicy::kLRU, het::CachePolicy::kLFU}) {
    LocalCluster cluster(Table(het::OptimizerKind::kAdagrad, dim), 2);
    auto cache = MakeCache(Cache(dim, 200, policy, 10, 10, het::OptimizerKind::kAdagrad), 2);
    auto batches = Batches(300, 64, 5000, 9);
    for (int step = 0; step < 300; ++step) {
      het::LookupPlan plan;
      std::vector<float> rows;
      EXPECT_OK(cluster.Lookup(*cache, batches[step], true, &plan, &rows));
      EXPECT_OK(cluster.Update(*cache, plan.unique_keys, Gradients(rows, dim, step), 0.1f));
    }
    const het::CacheCounters c = cache->Counters();
    EXPECT_EQ(c.lookups, 300u * 64u);
    EXPECT_EQ(c.hits + c.misses + c.stale_refreshes, c.unique_keys);
    EXPECT_EQ(c.rows_pulled, c.misses + c.stale_refreshes);
    uint64_t received = 0, applied = 0;
    for (int s = 0; s < 2; ++s) {
      received += cluster.shard(s).Counters().rows_pushed;
      applied += cluster.shard(s).Counters().updates_applied;
    }
    EXPECT_EQ(c.rows_pushed, received);
    EXPECT_EQ(c.updates_pushed, applied);
    hit_rate[i++] = double(c.hits) / c.unique_keys;
  }
  EXPECT_TRUE(hit_rate[1] > hit_rate[0]);
}

// A row constraint projects each row its update or merge changes, as Keras'
// constraint computes it for that row.
HET_TEST(RowConstraintsProjectAsKerasDoes) {
  het::RowConstraint k;
  std::vector<float> row = {-1.0f, 2.0f};
  EXPECT_OK(het::ParseConstraintKind("non_neg", &k.kind));
  het::ApplyConstraint(k, 2, row.data());
  EXPECT_TRUE(row == std::vector<float>({0.0f, 2.0f}));

  const float epsilon = 1e-7f;
  row = {3.0f, 4.0f};
  EXPECT_OK(het::ParseConstraintKind("max_norm", &k.kind));
  k.max_value = 1.0f;
  het::ApplyConstraint(k, 2, row.data());
  EXPECT_EQ(row[0], 3.0f * (1.0f / (epsilon + 5.0f)));
  row = {0.3f, 0.4f};  // within the norm: only Keras' epsilon moves it
  het::ApplyConstraint(k, 2, row.data());
  EXPECT_EQ(row[1], 0.4f * (0.5f / (epsilon + 0.5f)));

  EXPECT_OK(het::ParseConstraintKind("min_max_norm", &k.kind));
  k.min_value = 1.0f;
  k.max_value = 2.0f;
  k.rate = 0.5f;
  row = {0.3f, 0.4f};  // norm 0.5: desired 0.5 * 1 + 0.5 * 0.5
  het::ApplyConstraint(k, 2, row.data());
  EXPECT_TRUE(std::fabs(row[0] - 0.45f) < 1e-6f && std::fabs(row[1] - 0.6f) < 1e-6f);

  EXPECT_OK(het::ParseConstraintKind("unit_norm", &k.kind));
  row = {3.0f, 4.0f};
  het::ApplyConstraint(k, 2, row.data());
  EXPECT_TRUE(std::fabs(row[0] - 0.6f) < 1e-6f && std::fabs(row[1] - 0.8f) < 1e-6f);

  EXPECT_INVALID(het::ParseConstraintKind("radial", &k.kind), "radial");
  het::OptimizerConfig bad;
  bad.constraint.kind = het::ConstraintKind::kMinMaxNorm;
  bad.constraint.min_value = 2.0f;
  bad.constraint.max_value = 1.0f;
  EXPECT_INVALID(het::ValidateOptimizer(bad), "min_max_norm");
  bad.constraint.kind = het::ConstraintKind::kMaxNorm;
  bad.constraint.max_value = -1.0f;
  EXPECT_INVALID(het::ValidateOptimizer(bad), "max_value");
}

// The cache's local steps project as the shards' steps do, so reads equal
// the no-cache path to the bit; the flushed deltas, projected again by the
// shards, land within float rounding of it, and every row the training
// changed holds the constraint on both paths.
HET_TEST(ConstrainedRowsAgreeWithAndWithoutTheCache) {
  const int dim = 4;
  for (auto constraint : {het::ConstraintKind::kNonNeg, het::ConstraintKind::kMaxNorm,
                          het::ConstraintKind::kUnitNorm, het::ConstraintKind::kMinMaxNorm}) {
    for (auto kind : {het::OptimizerKind::kSGD, het::OptimizerKind::kAdagrad,
                      het::OptimizerKind::kAdam, het::OptimizerKind::kFtrl}) {
      het::TableConfig table = Table(kind, dim);
      table.optimizer.constraint = {constraint, 0.02f, 0.03f, 1.0f};
      het::CacheConfig cache_config = Cache(dim, 400, het::CachePolicy::kLFU, -1, -1, kind);
      cache_config.optimizer = table.optimizer;
      LocalCluster cached(table, 2), direct(table, 2);
      auto cache = MakeCache(cache_config, 2);
      const auto batches = Batches(30, 32, 300, 23);
      TrainSideBySide(cached, *cache, direct, batches, dim);
      EXPECT_OK(cached.Flush(*cache, 0.05f));
      auto a = cached.Contents(), b = direct.Contents();
      std::set<int64_t> trained;
      for (const auto& batch : batches) trained.insert(batch.begin(), batch.end());
      double worst = 0;
      for (int64_t key : trained) {
        double norm_a = 0, norm_b = 0;
        for (int j = 0; j < dim; ++j) {
          const double want = b[key][j], got = a[key][j];
          worst = std::max(worst, std::fabs(got - want) / std::max(1e-3, std::fabs(want)));
          norm_a += got * got;
          norm_b += want * want;
          if (constraint == het::ConstraintKind::kNonNeg) EXPECT_TRUE(got >= 0 && want >= 0);
        }
        for (double norm : {std::sqrt(norm_a), std::sqrt(norm_b)}) {
          if (constraint == het::ConstraintKind::kMaxNorm) EXPECT_TRUE(norm <= 0.03 + 1e-6);
          if (constraint == het::ConstraintKind::kUnitNorm) EXPECT_TRUE(std::fabs(norm - 1) < 1e-5);
          if (constraint == het::ConstraintKind::kMinMaxNorm) {
            EXPECT_TRUE(norm >= 0.02 - 1e-6 && norm <= 0.03 + 1e-6);
          }
        }
      }
      EXPECT_TRUE(worst < 1e-4);
    }
  }
}

// Every read sees this worker's writes: with one worker, a cache smaller
// than a step's rows (rows evicted with pending updates wait in the outbox,
// rows pass through) reads in training what the no-cache path reads, and
// an evaluation lookup after any step, which pushes nothing, reads every
// row as the no-cache path holds it: the outbox's rows merged in.
HET_TEST(EveryReadSeesTheOutbox) {
  const int dim = 3;
  for (auto kind : {het::OptimizerKind::kSGD, het::OptimizerKind::kAdagrad}) {
    for (auto sync : {het::SyncMode::kRefresh, het::SyncMode::kCheck}) {
      LocalCluster cached(Table(kind, dim), 2), direct(Table(kind, dim), 2);
      het::CacheConfig config = Cache(dim, 6, het::CachePolicy::kLRU, 100, 100, kind);
      config.sync = sync;
      auto cache = MakeCache(config, 2);
      const auto batches = Batches(30, 12, 40, 5);
      std::vector<int64_t> all;
      for (const auto& batch : batches) all.insert(all.end(), batch.begin(), batch.end());
      for (int step = 0; step < static_cast<int>(batches.size()); ++step) {
        het::LookupPlan plan;
        std::vector<float> via_cache, via_table, read, expected;
        EXPECT_OK(cached.Lookup(*cache, batches[step], true, &plan, &via_cache));
        EXPECT_OK(direct.GatherRows(plan.unique_keys, &via_table));
        for (size_t i = 0; i < via_table.size(); ++i) {
          EXPECT_TRUE(std::fabs(via_cache[i] - via_table[i]) < 1e-6f);
        }
        auto grads = Gradients(via_table, dim, step);
        EXPECT_OK(cached.Update(*cache, plan.unique_keys, grads, 0.05f));
        EXPECT_OK(direct.PushGradients(plan.unique_keys, grads, 0.05f));
        het::LookupPlan evaluated;
        EXPECT_OK(cached.Lookup(*cache, all, false, &evaluated, &read));
        EXPECT_OK(direct.GatherRows(evaluated.unique_keys, &expected));
        for (size_t i = 0; i < expected.size(); ++i) {
          EXPECT_TRUE(std::fabs(read[i] - expected[i]) < 1e-6f);
        }
      }
      EXPECT_TRUE(cache->Counters().dirty_evictions > 0);
      EXPECT_TRUE(cache->Counters().passed_through > 0);
    }
  }
}

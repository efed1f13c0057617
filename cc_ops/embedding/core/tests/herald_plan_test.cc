// Herald's exact mode on the cache (docs/herald.md): with the read bound 0,
// no write bound, and each worker pushing before every step the pending rows
// the other workers read in it, every read sees every update made before it,
// as a single synchronous table would give.
#include <map>
#include <random>
#include <set>
#include <vector>

#include "cc_ops/common/tests/harness.h"
#include "cc_ops/embedding/core/tests/local_cluster.h"

namespace {

using het_test::LocalCluster;
using het_test::RefreshCache;
using het_test::SgdTable;

// One step of `workers` caches under the plan: each pushes what the others
// read, all pushes land (the barrier), then each looks up and updates.
// `sync` is the synchronous table (key -> row) the reads must equal.
void HeraldStep(LocalCluster& cluster, std::vector<std::unique_ptr<het::WorkerCache>>& caches,
                const std::vector<std::vector<int64_t>>& batches, bool plan,
                std::map<int64_t, std::vector<float>>* sync, float lr, int dim, float* worst) {
  const size_t workers = caches.size();
  for (size_t w = 0; w < workers && plan; ++w) {
    std::vector<int64_t> others;
    for (size_t o = 0; o < workers; ++o) {
      if (o != w) others.insert(others.end(), batches[o].begin(), batches[o].end());
    }
    if (caches[w]->MarkDue(others.data(), others.size()) == 0) continue;
    het::ExchangePlan exchange;
    std::vector<float> none;
    EXPECT_OK(cluster.Exchange(*caches[w], {}, &exchange, &none));
  }
  std::map<int64_t, std::vector<float>> next = *sync;
  for (size_t w = 0; w < workers; ++w) {
    het::LookupPlan lookup;
    std::vector<float> rows;
    EXPECT_OK(cluster.Lookup(*caches[w], batches[w], true, &lookup, &rows));
    std::vector<float> grads;
    for (size_t i = 0; i < lookup.unique_keys.size(); ++i) {
      const int64_t key = lookup.unique_keys[i];
      auto row = sync->find(key);
      if (row == sync->end()) {  // first read anywhere: the table's initial row
        row = sync->emplace(
                      key, std::vector<float>(rows.begin() + i * dim, rows.begin() + (i + 1) * dim))
                  .first;
        next[key] = row->second;
      }
      for (int j = 0; j < dim; ++j) {
        const float diff = rows[i * dim + j] - row->second[j];
        *worst = std::max(*worst, diff < 0 ? -diff : diff);
        // A gradient that depends on the worker and the row read.
        const float g = 0.1f * float(w + 1) + 0.01f * float(key % 7) + rows[i * dim + j];
        grads.push_back(g);
        next[key][j] -= lr * g;
      }
    }
    EXPECT_OK(cluster.Update(*caches[w], lookup.unique_keys, grads, lr));
  }
  *sync = next;
}

float WorstDeviation(bool plan, int workers, int64_t capacity, uint64_t seed,
                     uint64_t* rows_pushed = nullptr) {
  const int dim = 3, shards = 2;
  const float lr = 0.05f;
  LocalCluster cluster(SgdTable(dim), shards);
  std::vector<std::unique_ptr<het::WorkerCache>> caches;
  for (int w = 0; w < workers; ++w) caches.push_back(RefreshCache(dim, capacity, 0, -1, shards));
  std::mt19937_64 rng(seed);
  std::map<int64_t, std::vector<float>> sync;
  float worst = 0.0f;
  for (int step = 0; step < 60; ++step) {
    std::vector<std::vector<int64_t>> batches(workers);
    for (auto& batch : batches) {
      std::set<int64_t> unique;
      // Skewed: most ids among a few rows every worker shares.
      while (unique.size() < 5) unique.insert(rng() % 4 == 0 ? int64_t(rng() % 40) : rng() % 6);
      batch.assign(unique.begin(), unique.end());
    }
    HeraldStep(cluster, caches, batches, plan, &sync, lr, dim, &worst);
  }
  if (rows_pushed != nullptr) {
    *rows_pushed = 0;
    for (auto& cache : caches) *rows_pushed += cache->Counters().rows_pushed;
  }
  return worst;
}

}  // namespace

HET_TEST(TheHeraldPlanReadsEveryEarlierUpdate) {
  for (int workers : {2, 3}) {
    for (int64_t capacity : {4, 8, 64}) {  // tight caches evict pending rows
      for (uint64_t seed = 1; seed <= 3; ++seed) {
        EXPECT_TRUE(WorstDeviation(true, workers, capacity, seed) < 1e-5f);
      }
    }
  }
  // Without the plan the same caches read rows other workers moved.
  EXPECT_TRUE(WorstDeviation(false, 2, 64, 1) > 1e-3f);
}

HET_TEST(TheHeraldPlanPushesOnlyWhatOthersRead) {
  // One worker alone never pushes before the end: nobody else reads.
  uint64_t alone = 0, pair = 0;
  EXPECT_TRUE(WorstDeviation(true, 1, 64, 1, &alone) < 1e-5f);
  EXPECT_EQ(alone, 0u);
  EXPECT_TRUE(WorstDeviation(true, 2, 64, 1, &pair) < 1e-5f);
  // Two workers push, but fewer rows than the 2 x 60 x 5 that every
  // update pushed at once (s=0) would send.
  EXPECT_TRUE(pair > 0u && pair < 600u);
}

HET_TEST(MarkDueSkipsRowsNotCachedOrNotPending) {
  const int dim = 2;
  LocalCluster cluster(SgdTable(dim), 1);
  auto cache = RefreshCache(dim, 8, 0, -1, 1);
  het::LookupPlan plan;
  std::vector<float> rows;
  EXPECT_OK(cluster.Lookup(*cache, {1, 2}, true, &plan, &rows));
  const std::vector<int64_t> asked = {1, 2, 3, -5};
  EXPECT_EQ(cache->MarkDue(asked.data(), asked.size()), 0);  // nothing pending
  EXPECT_OK(cluster.Update(*cache, {1, 2}, {1, 1, 1, 1}, 0.1f));
  const std::vector<int64_t> one = {2, 3, 2};
  EXPECT_TRUE(cache->MarkDue(one.data(), one.size()) > 0);
  het::ExchangePlan exchange;
  std::vector<float> none;
  EXPECT_OK(cluster.Exchange(*cache, {}, &exchange, &none));
  EXPECT_EQ(cache->Counters().rows_pushed, 1u);  // key 2 once; key 1 stays pending
  EXPECT_EQ(cache->MarkDue(one.data(), one.size()), 0);
}

HET_TEST(MostUsedListsTheMostTouchedCachedKeys) {
  const int dim = 2;
  LocalCluster cluster(SgdTable(dim), 1);
  auto cache = RefreshCache(dim, 8, 0, -1, 1);
  het::LookupPlan plan;
  std::vector<float> rows;
  for (const std::vector<int64_t>& ids :
       {std::vector<int64_t>{5, 6, 7}, {6, 7}, {7}, {9}, {6, 7}}) {
    EXPECT_OK(cluster.Lookup(*cache, ids, true, &plan, &rows));
  }
  EXPECT_TRUE(cache->MostUsed(2) == (std::vector<int64_t>{7, 6}));
  EXPECT_TRUE(cache->MostUsed(10) == (std::vector<int64_t>{7, 6, 5, 9}));
  EXPECT_TRUE(cache->MostUsed(0).empty());
}

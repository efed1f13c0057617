// Herald's exact mode on the cache (docs/herald.md): before each step every
// worker pushes the gradients its last step gave the rows several workers
// read, and drops its copies of the rows another worker reads now (pushing
// their pending updates); rows read by several workers in a step are read
// from the shards, rows read by one alone come from its cache. Every read
// then sees every update of the steps before it, and none of its own
// step's, as one synchronous table gives.
#include <algorithm>
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

using Batches = std::vector<std::vector<int64_t>>;  // each worker's unique ids

std::vector<int64_t> OthersOf(const Batches& batches, size_t w) {
  std::set<int64_t> others;
  for (size_t o = 0; o < batches.size(); ++o) {
    if (o != w) others.insert(batches[o].begin(), batches[o].end());
  }
  return std::vector<int64_t>(others.begin(), others.end());
}

// A gradient that depends on the worker and the row read.
float Gradient(size_t w, int64_t key, float value) {
  return 0.1f * float(w + 1) + 0.01f * float(key % 7) + value;
}

// Each worker's gradients of the rows several workers read in its last
// step, pushed before the next step reads.
struct Deferred {
  std::vector<int64_t> keys;
  std::vector<float> grads;
};

// One step of the caches under the plan (or, with plan false, every row
// through the caches and nothing dropped); `sync` is the synchronous table
// the reads must equal. Returns the largest deviation seen.
float Step(LocalCluster& cluster, std::vector<std::unique_ptr<het::WorkerCache>>& caches,
           const Batches& batches, bool plan, std::map<int64_t, std::vector<float>>* sync,
           std::vector<Deferred>* deferred, float lr, int dim) {
  float worst = 0.0f;
  for (size_t w = 0; w < caches.size() && plan; ++w) {
    EXPECT_OK(cluster.PushGradients((*deferred)[w].keys, (*deferred)[w].grads, lr));
    const std::vector<int64_t> others = OthersOf(batches, w);
    if (caches[w]->Drop(others.data(), others.size()) == 0) continue;
    het::ExchangePlan exchange;
    std::vector<float> none;
    EXPECT_OK(cluster.Exchange(*caches[w], {}, &exchange, &none));
  }
  // The barrier: every push has landed. Then each worker reads and updates.
  std::map<int64_t, std::vector<float>> next = *sync;
  for (size_t w = 0; w < caches.size(); ++w) {
    const std::vector<int64_t> others = OthersOf(batches, w);
    std::vector<int64_t> shared, own;
    for (int64_t key : batches[w]) {
      (plan && std::binary_search(others.begin(), others.end(), key) ? shared : own).push_back(key);
    }
    std::vector<float> shared_rows, own_rows;
    EXPECT_OK(cluster.GatherRows(shared, &shared_rows));
    het::LookupPlan lookup;
    EXPECT_OK(cluster.Lookup(*caches[w], own, true, &lookup, &own_rows));
    std::vector<float> shared_grads, own_grads;
    const auto read = [&](const std::vector<int64_t>& keys, const std::vector<float>& rows,
                          std::vector<float>* grads) {
      for (size_t i = 0; i < keys.size(); ++i) {
        auto row = sync->find(keys[i]);
        if (row == sync->end()) {  // first read anywhere: the table's initial row
          row = sync->emplace(keys[i], std::vector<float>(rows.begin() + i * dim,
                                                          rows.begin() + (i + 1) * dim))
                    .first;
          next[keys[i]] = row->second;
        }
        for (int j = 0; j < dim; ++j) {
          const float value = rows[i * dim + j];
          worst = std::max(worst, std::abs(value - row->second[j]));
          grads->push_back(Gradient(w, keys[i], value));
          next[keys[i]][j] -= lr * grads->back();
        }
      }
    };
    read(shared, shared_rows, &shared_grads);
    read(lookup.unique_keys, own_rows, &own_grads);
    (*deferred)[w] = Deferred{shared, shared_grads};
    EXPECT_OK(cluster.Update(*caches[w], lookup.unique_keys, own_grads, lr));
  }
  *sync = next;
  return worst;
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
  std::vector<Deferred> deferred(workers);
  float worst = 0.0f;
  for (int step = 0; step < 60; ++step) {
    Batches batches(workers);
    for (auto& batch : batches) {
      std::set<int64_t> unique;
      // Skewed: most ids among a few rows every worker shares.
      while (unique.size() < 5) unique.insert(rng() % 4 == 0 ? int64_t(rng() % 40) : rng() % 6);
      batch.assign(unique.begin(), unique.end());
    }
    worst = std::max(worst, Step(cluster, caches, batches, plan, &sync, &deferred, lr, dim));
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
  EXPECT_TRUE(pair > 0u);
}

HET_TEST(DropPushesPendingRowsAndFreesTheirSlots) {
  const int dim = 2;
  LocalCluster cluster(SgdTable(dim), 1);
  auto cache = RefreshCache(dim, 2, 0, -1, 1);
  het::LookupPlan plan;
  std::vector<float> rows;
  EXPECT_OK(cluster.Lookup(*cache, {1, 2}, true, &plan, &rows));
  const std::vector<int64_t> asked = {3, -5, 1};
  EXPECT_EQ(cache->Drop(asked.data(), asked.size()), 0);  // 1 had nothing pending
  EXPECT_EQ(cache->size(), 1);
  EXPECT_OK(cluster.Lookup(*cache, {2}, true, &plan, &rows));
  EXPECT_OK(cluster.Update(*cache, {2}, {1, 1}, 0.1f));
  const std::vector<int64_t> two = {2, 2};
  EXPECT_EQ(cache->Drop(two.data(), two.size()), 1);  // listed twice, dropped once
  EXPECT_EQ(cache->size(), 0);
  het::ExchangePlan exchange;
  std::vector<float> none;
  EXPECT_OK(cluster.Exchange(*cache, {}, &exchange, &none));
  EXPECT_EQ(cache->Counters().rows_pushed, 1u);
  std::map<int64_t, int64_t> clocks;
  cluster.Contents(&clocks);
  EXPECT_EQ(clocks[2], 1);
  // The freed slots take new rows; nothing was evicted for them.
  const uint64_t evictions = cache->Counters().evictions;
  EXPECT_OK(cluster.Lookup(*cache, {7, 8}, true, &plan, &rows));
  EXPECT_EQ(cache->size(), 2);
  EXPECT_EQ(cache->Counters().evictions, evictions);
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

HET_TEST(TheWindowListsTheBatchesStagedAfterAStep) {
  auto cache = RefreshCache(2, 8, 0, -1, 1);
  const Batches staged = {{4, 1}, {3, 1}, {9, 3}, {2}};
  for (const auto& batch : staged) EXPECT_OK(cache->Stage(batch.data(), batch.size()));
  // Found by its ids: the next two batches' distinct ids, ascending.
  EXPECT_TRUE(cache->Staged(staged[0].data(), 2, 2) == (std::vector<int64_t>{1, 3, 9}));
  // A batch staged as other ids (its samples moved) is the oldest not taken.
  const std::vector<int64_t> reallocated = {3, 7};
  EXPECT_TRUE(cache->Staged(reallocated.data(), 2, 2) == (std::vector<int64_t>{2, 3, 9}));
  EXPECT_TRUE(cache->Staged(staged[2].data(), 2, 5) == (std::vector<int64_t>{2}));
  EXPECT_TRUE(cache->Staged(staged[3].data(), 1, 5).empty());    // nothing staged after
  EXPECT_TRUE(cache->Staged(reallocated.data(), 2, 5).empty());  // nothing left
}

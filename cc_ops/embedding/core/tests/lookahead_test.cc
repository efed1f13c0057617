// The lookahead (sync="refresh" with staged batches): the prefetch brings
// the next batch in and carries the step's pushes, the step's own exchange
// then asks for nothing, and no read or update differs from the path
// without a cache.
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

std::vector<std::vector<int64_t>> Batches(int steps, int ids_per_batch, int64_t keys,
                                          uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::vector<int64_t>> batches(steps);
  for (auto& b : batches) {
    for (int i = 0; i < ids_per_batch; ++i) b.push_back(static_cast<int64_t>(rng() % keys));
  }
  return batches;
}

}  // namespace

// With both bounds 0 and one worker, every row read and the final table
// equal the no-cache path's bit for bit, with the cache roomy, tight (the
// prefetch drops rows that do not fit beside the step's batch) and smaller
// than a batch (rows pass through); a staged batch that no step takes
// wastes a prefetch and changes nothing. With room for everything, every
// step after the first asks the shards for nothing of its own.
HET_TEST(TheLookaheadReadsAndWritesAsTheNoCachePath) {
  for (int64_t capacity : {100, 36, 20}) {
    const int dim = 2, shards = 2, steps = 30;
    LocalCluster cached(SgdTable(dim), shards), direct(SgdTable(dim), shards);
    auto cache = RefreshCache(dim, capacity, 0, 0, shards);
    const auto batches = Batches(steps, 24, 50, 11);
    EXPECT_OK(cache->Stage(batches[0].data(), batches[0].size()));
    for (int t = 0; t < steps; ++t) {
      if (t == 7) {
        const std::vector<int64_t> junk = {40, 41, 42, 43};
        EXPECT_OK(cache->Stage(junk.data(), junk.size()));
      }
      if (t + 1 < steps) EXPECT_OK(cache->Stage(batches[t + 1].data(), batches[t + 1].size()));
      het::ExchangePlan plan, ahead;
      std::vector<float> rows, expected;
      EXPECT_OK(cached.Exchange(*cache, batches[t], &plan, &rows, /*carry_updates=*/false));
      // A staged batch is not deduplicated again: its keys and inverse are
      // still the batch's, in order of first appearance.
      std::vector<int64_t> keys;
      for (size_t i = 0; i < batches[t].size(); ++i) {
        const auto at = std::find(keys.begin(), keys.end(), batches[t][i]);
        EXPECT_EQ(plan.inverse[i], static_cast<int32_t>(at - keys.begin()));
        if (at == keys.end()) keys.push_back(batches[t][i]);
      }
      EXPECT_TRUE(plan.unique_keys == keys);
      if (capacity == 100 && t > 0 && t != 8) {
        // Only the header, sender, settings and empty sections went out.
        for (const auto& request : plan.requests) EXPECT_EQ(request.size(), 100u);
      }
      EXPECT_OK(cached.Prefetch(*cache, batches[t], &ahead));
      EXPECT_OK(direct.GatherRows(plan.unique_keys, &expected));
      EXPECT_TRUE(rows == expected);
      if (rows != expected) std::fprintf(stderr, "capacity %d step %d\n", int(capacity), t);
      std::vector<float> grads(rows.size());
      for (size_t i = 0; i < grads.size(); ++i) grads[i] = 0.01f * float((i + t) % 7) - 0.02f;
      EXPECT_OK(cached.Update(*cache, plan.unique_keys, grads, 0.5f));
      EXPECT_OK(direct.PushGradients(plan.unique_keys, grads, 0.5f));
    }
    const het::CacheCounters c = cache->Counters();
    EXPECT_TRUE(c.prefetched > 0u);
    EXPECT_TRUE(c.prefetch_hits > 0u);
    EXPECT_TRUE(c.prefetch_hits <= c.prefetched);
    EXPECT_EQ(c.hits + c.misses + c.prefetch_hits, c.unique_keys);
    if (capacity == 20) EXPECT_TRUE(c.passed_through > 0u);
    if (capacity == 100) EXPECT_TRUE(c.misses < 60u);  // the first batch's, the junk's follower
    EXPECT_TRUE(cached.FlushedEquals(*cache, direct, 0.5f));
    // The shards' records hold only what the cache holds.
    het::ExchangePlan plan;
    std::vector<float> rows;
    EXPECT_OK(cached.Exchange(*cache, {}, &plan, &rows));
    uint64_t copies = 0;
    for (int s = 0; s < shards; ++s) copies += cached.shard(s).Records().copies;
    EXPECT_EQ(copies, static_cast<uint64_t>(cache->size()));
  }
}

// A row that a staged batch reads is evicted only when no other row can be,
// the one read furthest ahead first; a step taking its batch moves the
// batch's rows on to their next reads (here, none).
HET_TEST(RowsStagedBatchesReadGoLastTheFurthestReadFirst) {
  const int dim = 2;
  LocalCluster cluster(SgdTable(dim), 1);
  auto cache = RefreshCache(dim, 3, 100, 100, 1);  // LRU: 1 would go first
  const auto step = [&](const std::vector<int64_t>& ids) {
    het::ExchangePlan plan;
    std::vector<float> rows;
    EXPECT_OK(cluster.Exchange(*cache, ids, &plan, &rows));
    EXPECT_OK(cluster.Update(*cache, plan.unique_keys, std::vector<float>(rows.size(), 0.1f), 1));
  };
  const auto cached = [&](const std::vector<int64_t>& ids) {
    // Looked up, the rows still cached are hits.
    const uint64_t hits = cache->Counters().hits;
    step(ids);
    return cache->Counters().hits - hits == ids.size();
  };
  const std::vector<int64_t> one = {1}, two = {2}, four = {4};
  step({1, 2, 3});
  EXPECT_OK(cache->Stage(one.data(), one.size()));
  EXPECT_OK(cache->Stage(two.data(), two.size()));
  step({4});  // 3 goes: 1 and 2 are read ahead
  EXPECT_OK(cache->Stage(four.data(), four.size()));
  step({5});  // every row is read ahead: 4, read furthest, goes
  EXPECT_TRUE(cached({1, 2}));
  EXPECT_TRUE(!cached({4}));
  // The step of batch {2} takes it (and drops {1}, staged before it and
  // never trained): 1 and 2 are read ahead no more, 4 still is.
  het::ExchangePlan plan;
  const uint64_t prefetched = cache->Counters().prefetched;
  EXPECT_OK(cluster.Prefetch(*cache, two, &plan));
  EXPECT_EQ(cache->Counters().prefetched, prefetched);  // 4, staged after it, is cached
  step({1, 2});                                         // the least recently used first: 4, 1, 2
  step({6});                                            // 1 goes, not 4
  step({7});                                            // 2 goes, not 6
  EXPECT_TRUE(cached({4, 6}));
}

// A step whose batch was never staged prefetches nothing; the staged
// batches are bounded, and a bad staged id is refused naming the table.
HET_TEST(StagingIsBoundedAndChecked) {
  const int dim = 2, shards = 1;
  LocalCluster cluster(SgdTable(dim), shards);
  het::CacheConfig c;
  c.table_name = "emb";
  c.dim = dim;
  c.capacity = 10;
  c.vocabulary_size = 100;
  c.num_shards = shards;
  std::unique_ptr<het::WorkerCache> cache;
  EXPECT_OK(het::WorkerCache::Create(c, &cache));
  const std::vector<int64_t> bad = {3, 100};
  const het::Status refused = cache->Stage(bad.data(), bad.size());
  EXPECT_TRUE(!refused.ok());
  EXPECT_TRUE(refused.message().find("emb") != std::string::npos);
  const size_t empty = cache->MemoryBytes();
  for (int i = 0; i < 1000; ++i) {
    const std::vector<int64_t> batch = {i % 100, (i + 1) % 100};
    EXPECT_OK(cache->Stage(batch.data(), batch.size()));
  }
  EXPECT_TRUE(cache->MemoryBytes() < empty + 64 * 1024);
  const std::vector<int64_t> unstaged = {5, 6, 7};
  het::ExchangePlan plan;
  EXPECT_OK(cluster.Prefetch(*cache, unstaged, &plan));
  EXPECT_TRUE(plan.unique_keys.empty());
  const std::vector<int64_t> before_last = {98, 99}, last = {99, 0};
  EXPECT_OK(cluster.Prefetch(*cache, before_last, &plan));
  EXPECT_TRUE(plan.unique_keys == last);
  EXPECT_OK(cluster.Prefetch(*cache, last, &plan));
  EXPECT_TRUE(plan.unique_keys.empty());                    // nothing staged after the last
  EXPECT_OK(cluster.Prefetch(*cache, before_last, &plan));  // dropped with the ones before
  EXPECT_TRUE(plan.unique_keys.empty());
  // Two equal batches in a row: each step prefetches what follows its own.
  const std::vector<int64_t> x = {1, 2}, y = {3};
  for (const auto* batch : {&x, &x, &y}) EXPECT_OK(cache->Stage(batch->data(), batch->size()));
  EXPECT_OK(cluster.Prefetch(*cache, x, &plan));
  EXPECT_TRUE(plan.unique_keys == x);
  EXPECT_OK(cluster.Prefetch(*cache, x, &plan));
  EXPECT_TRUE(plan.unique_keys == y);
}

// The prefetch's inserts evict neither the step's own rows (its update comes
// next) nor the next batch's while another row can go; a row it could not
// fit means only those were left. Random batches, a cache about the size of
// two of them.
HET_TEST(ThePrefetchSparesTheStepsAndTheNextBatchsRows) {
  const int dim = 2, steps = 60;
  const int64_t capacity = 40;
  LocalCluster cluster(SgdTable(dim), 1);
  auto cache = RefreshCache(dim, capacity, 100, 100, 1);
  const auto batches = Batches(steps, 24, 120, 5);
  const auto cached = [&] {
    const std::vector<int64_t> keys = cache->MostUsed(capacity);
    return std::set<int64_t>(keys.begin(), keys.end());
  };
  uint64_t evictions = 0, dropped = 0;
  EXPECT_OK(cache->Stage(batches[0].data(), batches[0].size()));
  for (int t = 0; t + 1 < steps; ++t) {
    EXPECT_OK(cache->Stage(batches[t + 1].data(), batches[t + 1].size()));
    het::ExchangePlan plan, ahead;
    std::vector<float> rows;
    EXPECT_OK(cluster.Exchange(*cache, batches[t], &plan, &rows, /*carry_updates=*/false));
    const std::set<int64_t> before = cached();
    const uint64_t prefetched = cache->Counters().prefetched;
    EXPECT_OK(cluster.Prefetch(*cache, batches[t], &ahead));
    const std::set<int64_t> after = cached();
    std::set<int64_t> spared(batches[t].begin(), batches[t].end());
    spared.insert(batches[t + 1].begin(), batches[t + 1].end());
    for (int64_t key : before) {
      if (after.count(key)) continue;
      ++evictions;
      EXPECT_TRUE(!spared.count(key));
    }
    const uint64_t inserted = cache->Counters().prefetched - prefetched;
    uint64_t missing = 0;
    for (int64_t key : ahead.unique_keys) missing += before.count(key) == 0;
    if (inserted < missing) {
      ++dropped;
      for (int64_t key : after) EXPECT_TRUE(spared.count(key) > 0);
    }
    EXPECT_OK(cluster.Update(*cache, plan.unique_keys, std::vector<float>(rows.size(), 0.1f), 1));
  }
  EXPECT_TRUE(evictions > 100u);  // the property was put to the test
  std::fprintf(stderr, "  %llu evictions, %llu prefetches short of room\n",
               static_cast<unsigned long long>(evictions),
               static_cast<unsigned long long>(dropped));
}

// A row the step read and keeps as a last resort (the layer called again
// before its update) stays one when a prefetch sets it aside: a third
// lookup of the step evicts the row only prefetched, not it.
HET_TEST(APrefetchKeepsTheStepsLastResortRows) {
  const int dim = 2;
  LocalCluster cluster(SgdTable(dim), 1);
  auto cache = RefreshCache(dim, 4, 100, 100, 1);  // LRU
  const std::vector<int64_t> first = {1, 2}, second = {3, 4}, next = {1, 5}, third = {6};
  EXPECT_OK(cache->Stage(second.data(), second.size()));
  EXPECT_OK(cache->Stage(next.data(), next.size()));
  het::ExchangePlan plan;
  std::vector<float> rows;
  EXPECT_OK(cluster.Exchange(*cache, first, &plan, &rows, /*carry_updates=*/false));
  // Called again: 1 and 2 are kept as a last resort; the cache is full.
  EXPECT_OK(cluster.Exchange(*cache, second, &plan, &rows, /*carry_updates=*/false));
  het::ExchangePlan ahead;
  // 5 needs room: 3 and 4 (the step's) and 1 (the next batch's) are spared,
  // 2 goes.
  EXPECT_OK(cluster.Prefetch(*cache, second, &ahead));
  const auto cached = [&] {
    const std::vector<int64_t> keys = cache->MostUsed(4);
    return std::set<int64_t>(keys.begin(), keys.end());
  };
  EXPECT_TRUE(cached() == (std::set<int64_t>{1, 3, 4, 5}));
  EXPECT_OK(cluster.Exchange(*cache, third, &plan, &rows, /*carry_updates=*/false));
  EXPECT_TRUE(cached() == (std::set<int64_t>{1, 3, 4, 6}));
}

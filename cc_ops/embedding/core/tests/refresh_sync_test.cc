// The sync in which a hit costs no bytes (sync="refresh"): what it sends,
// when it refreshes, and how the shards' records of the copies stay bounded
// and follow restarts.
#include <map>
#include <random>
#include <thread>
#include <vector>

#include "cc_ops/common/tests/harness.h"
#include "cc_ops/embedding/core/tests/local_cluster.h"
#include "cc_ops/embedding/core/wire_sizes.h"

namespace {

using het_test::LocalCluster;
using het_test::RefreshCache;
using het_test::SgdTable;

uint64_t RecordedCopies(LocalCluster& cluster) {
  uint64_t total = 0;
  for (int s = 0; s < cluster.num_shards(); ++s) total += cluster.shard(s).Records().copies;
  return total;
}

}  // namespace

HET_TEST(HitsCostNoBytes) {
  const int dim = 4, shards = 2;
  LocalCluster cluster(SgdTable(dim), shards);
  auto cache = RefreshCache(dim, 16, 10, 10, shards);
  const std::vector<int64_t> ids = {1, 2, 3, 4, 5, 1, 2};
  het::LookupPlan plan;
  std::vector<float> rows;
  EXPECT_OK(cluster.Lookup(*cache, ids, true, &plan, &rows));  // 5 misses
  const het::CacheCounters before = cache->Counters();
  uint64_t checked_before = 0;
  for (int s = 0; s < shards; ++s) checked_before += cluster.shard(s).Counters().keys_checked;
  for (int step = 0; step < 5; ++step) EXPECT_OK(cluster.Lookup(*cache, ids, true, &plan, &rows));
  const het::CacheCounters after = cache->Counters();
  uint64_t checked_after = 0;
  for (int s = 0; s < shards; ++s) checked_after += cluster.shard(s).Counters().keys_checked;
  EXPECT_EQ(after.hits - before.hits, 25u);
  EXPECT_EQ(checked_after, checked_before);  // no key reached a shard
  // Only each request's header, sender (with its round and the epoch it
  // saw), settings and six empty sections went out (100 bytes), and each
  // shard's header, epoch and ten empty sections came back (64 bytes).
  EXPECT_EQ(after.bytes_sent - before.bytes_sent, 5u * shards * 100);
  EXPECT_EQ(after.bytes_received - before.bytes_received, 5u * shards * 64);
  // The shards counted the same bytes.
  uint64_t received = 0, sent = 0;
  for (int s = 0; s < shards; ++s) {
    received += cluster.shard(s).Counters().bytes_received;
    sent += cluster.shard(s).Counters().bytes_sent;
  }
  EXPECT_EQ(received, after.bytes_sent);
  EXPECT_EQ(sent, after.bytes_received);
}

// The shard counts the updates other writers made since the copy; the
// worker's own pending updates neither extend nor shorten its copy's life.
HET_TEST(ACopyIsRefreshedOnceOtherWritersPassTheReadBound) {
  const int dim = 2;
  LocalCluster cluster(SgdTable(dim), 1);
  auto a = RefreshCache(dim, 8, 2, 100, 1);  // a's own updates stay pending
  auto b = RefreshCache(dim, 8, 0, 0, 1);    // b pushes every update
  const std::vector<int64_t> ids = {9};
  het::LookupPlan plan;
  std::vector<float> row_a, row_b;
  EXPECT_OK(cluster.Lookup(*a, ids, true, &plan, &row_a));
  const float init = row_a[0];
  EXPECT_OK(cluster.Update(*a, ids, {1.0f, 1.0f}, 0.5f));  // a: -0.5, pending
  for (int i = 1; i <= 4; ++i) {
    EXPECT_OK(cluster.Lookup(*b, ids, true, &plan, &row_b));
    EXPECT_OK(cluster.Update(*b, ids, {1.0f, 1.0f}, 0.25f));  // server: -0.25 each,
    EXPECT_OK(cluster.Flush(*b, 0.25f));  // delivered now rather than with b's next exchange
    EXPECT_OK(cluster.Lookup(*a, ids, true, &plan, &row_a));
    // Refreshed once b's updates since a's copy exceed 2: after the third.
    EXPECT_EQ(a->Counters().stale_refreshes, i < 3 ? 0u : 1u);
    // a always reads its own write; after the refresh, b's three as well.
    EXPECT_NEAR(row_a[0], init - 0.5f - (i < 3 ? 0.0f : 0.75f), 1e-6);
  }
  EXPECT_EQ(cluster.shard(0).Counters().rows_refreshed, 1u);
  EXPECT_OK(cluster.Flush(*a, 0.5f));
  std::vector<float> row;
  EXPECT_OK(cluster.GatherRows(ids, &row));
  EXPECT_NEAR(row[0], init - 0.5f - 1.0f, 1e-6);  // nothing lost
}

HET_TEST(EvictionReportsKeepTheRecordWithinTheCache) {
  const int dim = 2, shards = 2, capacity = 10;
  LocalCluster cluster(SgdTable(dim), shards);
  auto cache = RefreshCache(dim, capacity, 5, 5, shards);
  std::mt19937_64 rng(7);
  het::LookupPlan plan;
  std::vector<float> rows;
  for (int step = 0; step < 200; ++step) {
    std::vector<int64_t> ids;
    for (int i = 0; i < 6; ++i) ids.push_back(static_cast<int64_t>(rng() % 60));
    EXPECT_OK(cluster.Lookup(*cache, ids, true, &plan, &rows));
    EXPECT_OK(cluster.Update(*cache, plan.unique_keys,
                             std::vector<float>(plan.unique_keys.size() * dim, 0.1f), 0.1f));
    // The cache's rows and at most one step's evictions, not yet reported.
    EXPECT_TRUE(RecordedCopies(cluster) <= uint64_t(capacity + 6));
  }
  EXPECT_TRUE(cache->Counters().evictions > 100u);
  EXPECT_OK(cluster.Lookup(*cache, {plan.unique_keys[0]}, true, &plan, &rows));  // a hit
  EXPECT_EQ(RecordedCopies(cluster), uint64_t(cache->size()));
  EXPECT_EQ(cache->Counters().evictions_reported, cache->Counters().evictions);
}

HET_TEST(ANewGenerationReplacesTheRecordAndAShardRestartClearsTheCache) {
  const int dim = 2;
  LocalCluster cluster(SgdTable(dim), 1);
  auto cache = RefreshCache(dim, 8, 3, 3, 1);
  het::LookupPlan plan;
  std::vector<float> rows;
  EXPECT_OK(cluster.Lookup(*cache, {1, 2, 3}, true, &plan, &rows));
  const het::Sender first = cache->sender();
  cache->Clear();  // as after a restore: a new generation
  EXPECT_TRUE(cache->sender().generation != first.generation);
  EXPECT_EQ(cache->sender().worker, first.worker);
  EXPECT_OK(cluster.Lookup(*cache, {4}, true, &plan, &rows));
  EXPECT_EQ(cluster.shard(0).Records().workers, 1u);
  EXPECT_EQ(cluster.shard(0).Records().copies, 1u);  // the old generation's 3 are gone

  // A shard that lost its record (restarted or restored) is seen by its epoch.
  EXPECT_OK(cluster.Update(*cache, {4}, {1.0f, 1.0f}, 0.1f));  // pending, not pushed
  cluster.shard(0).Clear();
  het::Status s = cluster.Lookup(*cache, {4}, true, &plan, &rows);
  EXPECT_TRUE(s.code() == het::StatusCode::kAborted);
  EXPECT_EQ(cache->size(), 1);                                 // the failed call changed nothing
  EXPECT_OK(cluster.Lookup(*cache, {5}, true, &plan, &rows));  // the next step runs
  EXPECT_EQ(cache->size(), 1);                                 // on an emptied cache
  het::Pushes pending;
  cache->Flush(&pending);
  EXPECT_EQ(pending.size(), 0u);  // the old timeline's updates are dropped with it
  EXPECT_EQ(cluster.shard(0).Records().copies, 1u);
}

// Workers syncing and pushing at once: TSan checks the locking, and the
// clocks account for every update.
HET_TEST(ConcurrentSyncsAndPushesLoseNothing) {
  const int dim = 2, shards = 2, workers = 3, steps = 300;
  LocalCluster cluster(SgdTable(dim), shards);
  std::vector<std::unique_ptr<het::WorkerCache>> caches;
  for (int w = 0; w < workers; ++w) caches.push_back(RefreshCache(dim, 12, 2, 3, shards));
  std::vector<std::thread> pool;
  std::vector<int> failures(workers, 0);
  for (int w = 0; w < workers; ++w) {
    pool.emplace_back([&, w] {
      std::mt19937_64 rng(w);
      het::LookupPlan plan;
      std::vector<float> rows;
      for (int step = 0; step < steps; ++step) {
        std::vector<int64_t> ids;
        for (int i = 0; i < 5; ++i) ids.push_back(static_cast<int64_t>(rng() % 30));
        if (!cluster.Lookup(*caches[w], ids, true, &plan, &rows).ok()) ++failures[w];
        if (!cluster
                 .Update(*caches[w], plan.unique_keys,
                         std::vector<float>(plan.unique_keys.size() * dim, 0.01f), 0.1f)
                 .ok()) {
          ++failures[w];
        }
      }
      if (!cluster.Flush(*caches[w], 0.1f).ok()) ++failures[w];
    });
  }
  for (auto& t : pool) t.join();
  uint64_t updates = 0, applied = 0;
  for (int w = 0; w < workers; ++w) {
    EXPECT_EQ(failures[w], 0);
    updates += caches[w]->Counters().updates_pushed;
  }
  for (int s = 0; s < shards; ++s) applied += cluster.shard(s).Counters().updates_applied;
  EXPECT_EQ(applied, updates);
}

// A batch with more unique ids than the cache holds still trains: the rows
// that do not fit pass through, read from the shards, and their updates are
// pushed in the same step; nothing is lost, and with the write bound 0 the
// rows equal the no-cache path's. Both syncs.
HET_TEST(ABatchLargerThanTheCacheTrainsAndLosesNothing) {
  for (het::SyncMode sync : {het::SyncMode::kRefresh, het::SyncMode::kCheck}) {
    const int dim = 2, shards = 2;
    LocalCluster cached(SgdTable(dim), shards), direct(SgdTable(dim), shards);
    het::CacheConfig c;
    c.table_name = "emb";
    c.dim = dim;
    c.capacity = 25;
    c.read_staleness = 0;
    c.write_staleness = 0;
    c.num_shards = shards;
    c.sync = sync;
    std::unique_ptr<het::WorkerCache> cache;
    EXPECT_OK(het::WorkerCache::Create(c, &cache));
    std::mt19937_64 rng(3);
    for (int step = 0; step < 20; ++step) {
      std::vector<int64_t> ids;
      for (int i = 0; i < 48; ++i) ids.push_back(static_cast<int64_t>(rng() % 50));  // > 25 unique
      het::LookupPlan plan;
      std::vector<float> rows, expected;
      EXPECT_OK(cached.Lookup(*cache, ids, true, &plan, &rows));
      EXPECT_OK(direct.GatherRows(plan.unique_keys, &expected));
      EXPECT_TRUE(rows == expected);
      std::vector<float> grads(rows.size());
      for (size_t i = 0; i < grads.size(); ++i) grads[i] = 0.01f * float(i % 7) - 0.02f;
      EXPECT_OK(cached.Update(*cache, plan.unique_keys, grads, 0.5f));
      EXPECT_OK(direct.PushGradients(plan.unique_keys, grads, 0.5f));
    }
    EXPECT_TRUE(cache->Counters().passed_through > 0u);
    EXPECT_TRUE(cache->size() <= 25);
    EXPECT_TRUE(cached.FlushedEquals(*cache, direct, 0.5f));
    EXPECT_TRUE(cache->FirstPassThrough());  // warned once
    EXPECT_TRUE(!cache->FirstPassThrough());
  }
}

HET_TEST(AStepsEarlierRowsAreEvictedLastUntilItsUpdate) {
  // A layer called twice in a step: the second lookup evicts other rows
  // before the first lookup's, which the step's update needs.
  const int dim = 2;
  LocalCluster cluster(SgdTable(dim), 1);
  het::CacheConfig config = RefreshCache(dim, 4, 10, 10, 1)->config();
  config.policy = het::CachePolicy::kLFU;  // 4 rows
  std::unique_ptr<het::WorkerCache> cache;
  EXPECT_OK(het::WorkerCache::Create(config, &cache));
  het::LookupPlan plan;
  std::vector<float> rows;
  het::Pushes due;
  const std::vector<int64_t> old = {7, 8};
  const std::vector<float> grads(4 * dim, 1.0f);
  for (int step = 0; step < 3; ++step) {  // touched more than the step's rows will be
    EXPECT_OK(cluster.Lookup(*cache, old, true, &plan, &rows));
    EXPECT_OK(cache->Accumulate(old.data(), 2, grads.data(), 0.1f, &due));
  }
  EXPECT_OK(cluster.Lookup(*cache, {1, 2}, true, &plan, &rows));  // the step's first call
  EXPECT_OK(cluster.Lookup(*cache, {3, 4}, true, &plan, &rows));  // its second: 7, 8 go
  const std::vector<int64_t> step = {1, 2, 3, 4};
  std::vector<int64_t> uncached;
  EXPECT_OK(cache->Accumulate(step.data(), 4, grads.data(), 0.1f, &due, nullptr, &uncached));
  EXPECT_TRUE(uncached.empty());
  EXPECT_EQ(cache->Counters().pushed_uncached, 0u);
  // Released: the next steps' lookups may evict them again.
  for (int64_t key : {5, 6, 9, 10}) {
    const std::vector<int64_t> one = {key};
    EXPECT_OK(cluster.Lookup(*cache, one, true, &plan, &rows));
    EXPECT_OK(cache->Accumulate(one.data(), 1, grads.data(), 0.1f, &due));
  }
  const uint64_t hits = cache->Counters().hits;
  EXPECT_OK(cluster.Lookup(*cache, {1, 2, 3, 4}, true, &plan, &rows));
  EXPECT_TRUE(cache->Counters().hits - hits < 4u);
}

HET_TEST(PinnedRowsStayCachedWhateverThePolicy) {
  const int dim = 2;
  LocalCluster cluster(SgdTable(dim), 1);
  auto cache = RefreshCache(dim, 4, 10, 10, 1);  // LRU, 4 rows
  het::LookupPlan plan;
  std::vector<float> rows;
  const std::vector<int64_t> hot = {1, 2};
  // Two other keys a step push every older row out of an LRU cache of 4.
  auto stream = [&](int64_t from) {
    for (int64_t k = from; k < from + 6; k += 2) {
      EXPECT_OK(cluster.Lookup(*cache, {k, k + 1}, true, &plan, &rows));
    }
  };
  auto hits_of_hot = [&]() {
    const uint64_t before = cache->Counters().hits;
    EXPECT_OK(cluster.Lookup(*cache, hot, true, &plan, &rows));
    return cache->Counters().hits - before;
  };
  EXPECT_OK(cluster.Lookup(*cache, hot, true, &plan, &rows));
  stream(100);
  EXPECT_EQ(hits_of_hot(), 0u);          // not pinned: evicted
  EXPECT_OK(cache->Pin(hot.data(), 2));  // cached now: pinned in place
  EXPECT_EQ(cache->pinned_keys(), 2);
  stream(200);
  EXPECT_EQ(hits_of_hot(), 2u);
  cache->Clear();  // the pins outlive it; the rows come back on a miss
  EXPECT_EQ(hits_of_hot(), 0u);
  stream(300);
  EXPECT_EQ(hits_of_hot(), 2u);
  EXPECT_OK(cache->Pin(nullptr, 0));  // unpinned in place
  stream(400);
  EXPECT_EQ(hits_of_hot(), 0u);
}

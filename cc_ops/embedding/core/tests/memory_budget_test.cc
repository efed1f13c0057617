#include "cc_ops/embedding/core/memory_budget.h"

#include <memory>

#include "cc_ops/common/tests/harness.h"
#include "cc_ops/embedding/core/sparse_optimizer.h"
#include "cc_ops/embedding/core/table_shard.h"
#include "cc_ops/embedding/core/worker_cache.h"

namespace {

HET_TEST(CacheLargerThanMemoryIsRefusedBeforeAllocating) {
  het::CacheConfig c;
  c.table_name = "wide";
  c.dim = 4096;
  c.capacity = (int64_t{1} << 31) - 1;  // about 100 TiB of rows
  std::unique_ptr<het::WorkerCache> cache;
  het::Status s = het::WorkerCache::Create(c, &cache);
  EXPECT_TRUE(s.code() == het::StatusCode::kResourceExhausted);
  EXPECT_TRUE(s.message().find("table 'wide'") != std::string::npos);
  EXPECT_TRUE(cache == nullptr);
  c.capacity = 1000;
  EXPECT_OK(het::WorkerCache::Create(c, &cache));
}

HET_TEST(DimBeyondTheLimitIsRefusedAndNotWrapped) {
  EXPECT_EQ(het::ClampDim(int64_t{1} << 32 | 3), static_cast<int>(het::kMaxDim + 1));
  EXPECT_EQ(het::ClampDim(-5), -1);
  EXPECT_EQ(het::ClampDim(16), 16);
  het::TableConfig t;
  t.name = "huge";
  t.dim = het::ClampDim(int64_t{1} << 40);
  std::unique_ptr<het::TableShard> shard;
  EXPECT_INVALID(het::TableShard::Create(t, &shard), "dim must be between 1 and 65536");
  het::CacheConfig c;
  c.dim = het::ClampDim(het::kMaxDim + 1);
  c.capacity = 1;
  std::unique_ptr<het::WorkerCache> cache;
  EXPECT_INVALID(het::WorkerCache::Create(c, &cache), "dim must be between 1 and 65536");
}

}  // namespace

namespace {

// With no write bound a hot row could gather more pending updates than one
// push may carry; the cache pushes it when it reaches the most a push takes.
HET_TEST(UnboundedWriteStalenessPushesAtTheMostAPushCarries) {
  het::CacheConfig c;
  c.table_name = "hot";
  c.dim = 1;
  c.capacity = 4;
  c.read_staleness = -1;
  c.write_staleness = -1;
  c.sync = het::SyncMode::kCheck;  // Accumulate hands over what is due
  std::unique_ptr<het::WorkerCache> cache;
  EXPECT_OK(het::WorkerCache::Create(c, &cache));
  const int64_t key = 7;
  het::LookupPlan plan;
  EXPECT_OK(cache->Prepare(&key, 1, &plan));
  const int32_t position = 0;
  const float row = 0.0f;
  const int64_t clock = 0;
  float out = 0.0f;
  EXPECT_OK(cache->Complete(&key, 1, &position, 1, &row, &clock, true, &out));
  const float grad = 1.0f;
  int64_t pushed_at = 0, pushed_count = 0;
  for (int64_t step = 1; step <= het::kMaxUpdatesPerPush && pushed_at == 0; ++step) {
    het::Pushes due;
    EXPECT_OK(cache->Accumulate(&key, 1, &grad, 0.1f, &due));
    if (due.size() > 0) {
      pushed_at = step;
      pushed_count = due.counts[0];
    }
  }
  EXPECT_EQ(pushed_at, het::kMaxUpdatesPerPush);
  EXPECT_EQ(pushed_count, het::kMaxUpdatesPerPush);
}

}  // namespace

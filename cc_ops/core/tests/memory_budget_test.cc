#include <memory>

#include "cc_ops/core/memory_budget.h"
#include "cc_ops/core/table_shard.h"
#include "cc_ops/core/tests/harness.h"
#include "cc_ops/core/worker_cache.h"

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

// A shard's Gather and Push on lent threads (Parallel) against the same
// calls on one thread, and a push's second pass finding its rows again.
#include <cmath>
#include <random>
#include <vector>

#include "cc_ops/common/parallel.h"
#include "cc_ops/common/tests/harness.h"
#include "cc_ops/embedding/core/table_shard.h"

namespace {

het::TableConfig Config(int64_t max_rows = -1) {
  het::TableConfig c;
  c.name = "t";
  c.dim = 16;
  c.optimizer.kind = het::OptimizerKind::kAdagrad;
  c.initializer.seed = 7;
  c.max_rows = max_rows;
  if (max_rows > 0) c.on_full = het::OnFull::kEvict;
  return c;
}

std::unique_ptr<het::TableShard> Make(const het::TableConfig& c) {
  std::unique_ptr<het::TableShard> t;
  if (!het::TableShard::Create(c, &t).ok()) std::abort();
  return t;
}

// Distinct random keys, `n` of them, from [0, range).
std::vector<int64_t> Keys(std::mt19937_64* rng, int64_t n, int64_t range) {
  std::vector<int64_t> keys;
  std::vector<uint8_t> taken(range, 0);
  std::uniform_int_distribution<int64_t> pick(0, range - 1);
  while (static_cast<int64_t>(keys.size()) < n) {
    const int64_t k = pick(*rng);
    if (!taken[k]) keys.push_back(k), taken[k] = 1;
  }
  return keys;
}

// Batches over a table, each gathered and then pushed, on both tables: the
// rows, clocks and counters must agree bit for bit.
void ExpectParallelMatchesSerial(const het::TableConfig& config) {
  auto serial = Make(config);
  auto lent = Make(config);
  const het::Parallel parallel = het::ThreadPerPart(2);
  std::mt19937_64 rng(3);
  std::normal_distribution<float> grad(0, 1);
  for (int batch = 0; batch < 12; ++batch) {
    // Above the size a request is split at; new keys among old ones.
    const std::vector<int64_t> keys = Keys(&rng, 5000, 20000);
    const int64_t n = static_cast<int64_t>(keys.size());
    std::vector<float> a(n * 16), b(n * 16), grads(n * 16), pa(n * 16), pb(n * 16);
    std::vector<int64_t> ones(n, 1), ca(n), cb(n);
    for (float& g : grads) g = grad(rng);
    EXPECT_OK(serial->Gather(keys.data(), n, a.data()));
    EXPECT_OK(lent->Gather(keys.data(), n, b.data(), true, &parallel));
    EXPECT_TRUE(a == b);
    EXPECT_OK(serial->Push(keys.data(), grads.data(), ones.data(), n, 0.1f, pa.data(), ca.data()));
    EXPECT_OK(lent->Push(keys.data(), grads.data(), ones.data(), n, 0.1f, pb.data(), cb.data(),
                         &parallel));
    EXPECT_TRUE(pa == pb);
    EXPECT_TRUE(ca == cb);
  }
  EXPECT_EQ(serial->Size(), lent->Size());
  const het::TableCounters x = serial->Counters(), y = lent->Counters();
  EXPECT_EQ(x.updates_applied, y.updates_applied);
  EXPECT_EQ(x.rows_created, y.rows_created);
  EXPECT_EQ(x.rows_evicted, y.rows_evicted);
}

}  // namespace

HET_TEST(AGatherAndAPushOnLentThreadsMatchTheSerialOnes) { ExpectParallelMatchesSerial(Config()); }

HET_TEST(AnEvictingShardOnLentThreadsMatchesTheSerialOne) {
  // 5,000 keys a batch from 20,000 into 12,000 rows: most batches evict.
  ExpectParallelMatchesSerial(Config(12000));
}

HET_TEST(ANonFinitePushOnLentThreadsChangesNothingAndNamesTheFirstId) {
  auto t = Make(Config());
  const het::Parallel parallel = het::ThreadPerPart(2);
  std::mt19937_64 rng(5);
  const std::vector<int64_t> keys = Keys(&rng, 4096, 1 << 20);
  const int64_t n = static_cast<int64_t>(keys.size());
  std::vector<float> before(n * 16), after(n * 16), grads(n * 16, 0.5f);
  std::vector<int64_t> ones(n, 1);
  EXPECT_OK(t->Gather(keys.data(), n, before.data()));
  // Two rows would overflow their accumulator (g^2 = inf); the one first in
  // the request's order is named, whichever thread visits it.
  for (int j = 0; j < 16; ++j) grads[1000 * 16 + j] = grads[3000 * 16 + j] = 2e19f;
  EXPECT_INVALID(
      t->Push(keys.data(), grads.data(), ones.data(), n, 0.1f, nullptr, nullptr, &parallel),
      "the update of id " + std::to_string(keys[1000]) + " would make");
  EXPECT_OK(t->Gather(keys.data(), n, after.data(), true, &parallel));
  EXPECT_TRUE(before == after);
  EXPECT_EQ(t->Counters().updates_applied, 0u);
}

HET_TEST(APushFindsRowsDroppedBetweenItsPassesAnew) {
  // The second pass reuses the slots the first found, unless the stripe
  // dropped a row since: rows erased between the passes (injected) are made
  // again and take the update, and no freed slot is written.
  for (bool clear : {false, true}) {
    auto t = Make(Config());
    std::vector<int64_t> keys;
    for (int64_t k = 0; k < 3000; ++k) keys.push_back(k * 7);
    const int64_t n = static_cast<int64_t>(keys.size());
    std::vector<float> rows(n * 16), grads(n * 16, 0.25f);
    std::vector<int64_t> ones(n, 1), clocks(n);
    EXPECT_OK(t->Gather(keys.data(), n, rows.data()));
    const std::vector<int64_t> erased(keys.begin(), keys.begin() + 1500);
    t->SetBetweenPushPasses([&] {
      t->SetBetweenPushPasses(nullptr);
      if (clear) {
        t->Clear();
      } else {
        EXPECT_OK(t->Erase(erased.data(), static_cast<int64_t>(erased.size())));
      }
    });
    EXPECT_OK(t->Push(keys.data(), grads.data(), ones.data(), n, 0.1f, rows.data(), clocks.data()));
    EXPECT_EQ(t->Size(), n);
    het::TableChunk held;
    std::vector<int64_t> absent;
    EXPECT_OK(t->ReadHeld(keys.data(), n, &held, &absent));
    EXPECT_EQ(absent.size(), 0u);
    EXPECT_EQ(held.keys.size(), static_cast<size_t>(n));
    // Each row holds the update once: its answer, and what the table holds.
    std::vector<float> again(n * 16);
    EXPECT_OK(t->Gather(keys.data(), n, again.data()));
    EXPECT_TRUE(again == rows);
    for (int64_t c : clocks) EXPECT_EQ(c, 1);
  }
}

// Rows on a 16-bit wire (row_codec.h): the codec rounds as documented, a
// run whose exchange travels in bfloat16 or float16 ends where the float32
// run ends once flushed (the rounding of each push stays on the worker and
// joins the next, or goes in float32 when the row leaves or is flushed),
// whatever answers are lost on the way, and a round sent again is the same
// bytes. The oracle is the data: SGD moves each row by the learning rate
// times its summed gradients, which do not depend on the rows read.
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "cc_ops/common/tests/harness.h"
#include "cc_ops/embedding/core/exchange_wire.h"
#include "cc_ops/embedding/core/row_codec.h"
#include "cc_ops/embedding/core/tests/local_cluster.h"

namespace {

using het::RowShape;
using het::RowType;
using het_test::LocalCluster;

constexpr float kLr = 0.5f;

float Round(RowType type, RowShape shape, int non_negative, int column, float x) {
  std::vector<float> row(shape.width, 0.0f);
  row[column] = x;
  het::RoundDelta(type, shape, non_negative, row.data());
  return row[column];
}

struct Run {
  uint64_t bytes = 0;
  std::map<int64_t, std::vector<float>> rows;
  std::map<int64_t, int64_t> clocks;
  int64_t resent_identical = 0;
};

// Two workers of a small cache (evictions, pass-through) and two shards,
// write bound 2; the same ids and gradients whatever the type; about one
// exchange in five loses its answers after the shards merged it, and the
// retry's request must be the lost one's bytes.
Run Train(RowType type, const het::TableConfig& table) {
  LocalCluster cluster(table, 2);
  std::vector<std::unique_ptr<het::WorkerCache>> caches;
  for (int w = 0; w < 2; ++w) {
    het::CacheConfig c = het_test::CacheConfigOf(table, 2);
    c.capacity = 6;
    c.read_staleness = c.write_staleness = 2;
    c.wire_type = type;
    caches.push_back(het_test::MakeCache(c));
  }
  std::mt19937 rng(5);
  std::uniform_int_distribution<int64_t> key(0, 11);
  std::uniform_real_distribution<float> grad(-1.0f, 1.0f);
  Run run;
  for (int step = 0; step < 200; ++step) {
    het::WorkerCache& cache = *caches[step % 2];
    std::vector<int64_t> ids;
    for (int i = 0; i < 4; ++i) ids.push_back(key(rng));
    if (step % 5 == 3) {
      std::vector<std::vector<uint8_t>> lost, again;
      EXPECT_TRUE(cluster.ExchangeLosingAnswers(cache, ids, true, &lost).code() ==
                  het::StatusCode::kAborted);
      EXPECT_TRUE(cluster.ExchangeLosingAnswers(cache, ids, true, &again).code() ==
                  het::StatusCode::kAborted);
      for (size_t s = 0; s < lost.size(); ++s) {
        // The header and the pushes: the misses may differ (none here).
        run.resent_identical += lost[s] == again[s];
      }
    }
    het::LookupPlan plan;
    std::vector<float> rows;
    EXPECT_OK(cluster.Lookup(cache, ids, true, &plan, &rows));
    std::vector<float> g(plan.unique_keys.size() * table.dim);
    // Gradients spanning magnitudes, so that many deltas round.
    for (float& x : g) x = grad(rng) * std::pow(10.0f, static_cast<float>(rng() % 5) - 3.0f);
    EXPECT_OK(cluster.Update(cache, plan.unique_keys, g, kLr));
  }
  for (auto& cache : caches) {
    EXPECT_OK(cluster.Flush(*cache, kLr));
    run.bytes += cache->Counters().bytes_sent + cache->Counters().bytes_received;
  }
  run.rows = cluster.Contents(&run.clocks);
  return run;
}

}  // namespace

HET_TEST(SixteenBitRowsRoundToNearestEvenAndClampToTheirRange) {
  const RowShape shape{2, 6};  // Adam's: values, first moment, second moment
  const float tie = 1.0f + std::ldexp(1.0f, -8), odd_tie = 1.0f + 3 * std::ldexp(1.0f, -8);
  EXPECT_EQ(Round(RowType::kBFloat16, shape, -1, 0, tie), 1.0f);  // to even
  EXPECT_EQ(Round(RowType::kBFloat16, shape, -1, 0, odd_tie), 1.0f + std::ldexp(1.0f, -6));
  EXPECT_EQ(Round(RowType::kBFloat16, shape, -1, 0, -odd_tie), -1.0f - std::ldexp(1.0f, -6));
  // The second moment (slot 1: columns 4 and 5) rounds toward zero.
  EXPECT_EQ(Round(RowType::kBFloat16, shape, 1, 4, odd_tie), 1.0f + std::ldexp(1.0f, -7));
  EXPECT_EQ(Round(RowType::kBFloat16, shape, 1, 2, odd_tie), 1.0f + std::ldexp(1.0f, -6));
  EXPECT_EQ(Round(RowType::kBFloat16, shape, -1, 0, 3.4e38f), 0x1.fep127f);  // not infinity
  EXPECT_TRUE(std::isnan(Round(RowType::kBFloat16, shape, -1, 0, NAN)));
  // float16 carries the values with 10 bits and up to 65,504; the slots in bfloat16.
  EXPECT_EQ(Round(RowType::kFloat16, shape, -1, 0, 1.0f + std::ldexp(1.0f, -11)), 1.0f);
  EXPECT_EQ(Round(RowType::kFloat16, shape, -1, 1, 1.0f + 3 * std::ldexp(1.0f, -11)),
            1.0f + std::ldexp(1.0f, -9));
  EXPECT_EQ(Round(RowType::kFloat16, shape, -1, 0, 1e5f), 65504.0f);
  EXPECT_EQ(Round(RowType::kFloat16, shape, -1, 4, 1e5f), 99840.0f);  // a slot: bfloat16
  EXPECT_EQ(Round(RowType::kFloat16, shape, -1, 0, 1e-9f), 0.0f);     // below float16's least
  // Rounded rows encode and decode exactly, in two bytes a float.
  for (RowType type : {RowType::kBFloat16, RowType::kFloat16}) {
    std::vector<float> row = {0.1f, -3e-5f, 2.5f, 1e-3f, 7e-9f, 4e4f};
    het::RoundDelta(type, shape, 1, row.data());
    std::vector<uint8_t> bytes(shape.width * het::RowTypeBytes(type));
    het::EncodeRows(type, shape, row.data(), 1, bytes.data());
    std::vector<float> back(shape.width);
    het::DecodeRows(type, shape, bytes.data(), 1, back.data());
    EXPECT_TRUE(back == row);
  }
  RowType parsed;
  EXPECT_INVALID(het::ParseRowType("float64", &parsed), "float32, bfloat16 or float16");
}

HET_TEST(ASixteenBitRunEndsWhereTheFloat32RunEndsOnceFlushed) {
  const het::TableConfig table = het_test::SgdTable(4);
  const Run exact = Train(RowType::kFloat32, table);
  for (RowType type : {RowType::kBFloat16, RowType::kFloat16}) {
    const Run run = Train(type, table);
    EXPECT_TRUE(run.clocks == exact.clocks);
    float worst = 0.0f;
    for (const auto& [key, row] : exact.rows) {
      for (size_t j = 0; j < row.size(); ++j) {
        worst = std::max(worst,
                         std::abs(run.rows.at(key)[j] - row[j]) / std::max(1.0f, std::abs(row[j])));
      }
    }
    // float32's own rounding of sums of a few hundred terms, far below
    // one 16-bit rounding (2^-9 = 2e-3).
    EXPECT_TRUE(worst < 2e-6f);
    std::fprintf(stderr, "  %s: worst relative gap %.2g, %llu bytes against %llu\n",
                 het::RowTypeName(type), worst, (unsigned long long)run.bytes,
                 (unsigned long long)exact.bytes);
    EXPECT_TRUE(run.bytes < exact.bytes);
    EXPECT_EQ(run.resent_identical, 40 * 2);  // every retry's request, per shard
  }
}

HET_TEST(AnAnswerInAnotherRowTypeIsRefusedByName) {
  const het::TableConfig table = het_test::SgdTable(2);
  LocalCluster cluster(table, 1);
  het::CacheConfig c = het_test::CacheConfigOf(table, 1);
  c.capacity = 4;
  c.wire_type = RowType::kBFloat16;
  auto cache = het_test::MakeCache(c);
  const std::vector<int64_t> ids = {1, 2};
  het::ExchangePlan plan;
  EXPECT_OK(cache->BeginExchange(ids.data(), ids.size(), &plan));
  // A float32 answer, as a shard of another build would send.
  het::wire::ExchangeAnswer answer;
  answer.width = answer.dim = 2;
  const std::vector<float> states(4, 0.5f);
  answer.miss_states = {states.data(), 2};
  answer.miss_clocks = {0, 0};
  std::vector<uint8_t> bytes;
  het::wire::EncodeAnswer(answer, &bytes);
  const uint8_t* data = bytes.data();
  const size_t size = bytes.size();
  std::vector<float> rows(4);
  EXPECT_INVALID(cache->EndExchange(plan.unique_keys.data(), 2, &data, &size, 1, rows.data()),
                 "rows in float32, but this cache asked for bfloat16");
  // A cache that checks its keys sends float32: the setting is refused.
  c.sync = het::SyncMode::kCheck;
  std::unique_ptr<het::WorkerCache> refused;
  EXPECT_INVALID(het::WorkerCache::Create(c, &refused), "sync 'check' sends float32");
}

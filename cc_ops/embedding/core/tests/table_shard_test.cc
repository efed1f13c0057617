#include "cc_ops/embedding/core/table_shard.h"

#include <cmath>
#include <thread>
#include <vector>

#include "cc_ops/common/tests/harness.h"
#include "cc_ops/embedding/core/row_initializer.h"

namespace {

het::TableConfig Config(het::OptimizerKind kind, int dim = 4) {
  het::TableConfig c;
  c.name = "t";
  c.dim = dim;
  c.optimizer.kind = kind;
  c.initializer.seed = 42;
  return c;
}

std::unique_ptr<het::TableShard> Make(const het::TableConfig& c) {
  std::unique_ptr<het::TableShard> t;
  het::Status s = het::TableShard::Create(c, &t);
  if (!s.ok()) std::abort();
  return t;
}

}  // namespace

HET_TEST(RowsAreDeterministicByKeyAndSeed) {
  auto config = Config(het::OptimizerKind::kSGD, 8);
  auto a = Make(config);
  auto b = Make(config);
  std::vector<int64_t> keys = {5, -3, INT64_MAX, 0};
  std::vector<int64_t> reversed(keys.rbegin(), keys.rend());
  std::vector<float> ra(32), rb(32), expected(8);
  EXPECT_OK(a->Gather(keys.data(), 4, ra.data()));
  EXPECT_OK(b->Gather(reversed.data(), 4, rb.data()));
  for (int i = 0; i < 4; ++i) {
    het::InitializeRow(config.initializer, keys[i], 8, expected.data());
    for (int j = 0; j < 8; ++j) {
      EXPECT_EQ(ra[i * 8 + j], expected[j]);
      EXPECT_EQ(rb[(3 - i) * 8 + j], expected[j]);
      EXPECT_TRUE(ra[i * 8 + j] >= -0.05f && ra[i * 8 + j] < 0.05f);
    }
  }
  config.initializer.seed = 43;
  het::InitializeRow(config.initializer, keys[0], 8, expected.data());
  EXPECT_TRUE(expected[0] != ra[0]);
}

HET_TEST(NormalInitializerHasTheRequestedMoments) {
  het::InitializerConfig init;
  init.kind = het::InitializerKind::kTruncatedNormal;
  init.a = 1.0f;
  init.b = 0.5f;
  double sum = 0, sq = 0;
  const int n = 20000;
  std::vector<float> row(10);
  for (int k = 0; k < n / 10; ++k) {
    het::InitializeRow(init, k, 10, row.data());
    for (float v : row) {
      EXPECT_TRUE(std::fabs(v - 1.0f) <= 1.0f + 1e-6f);
      sum += v;
      sq += (v - 1.0) * (v - 1.0);
    }
  }
  EXPECT_NEAR(sum / n, 1.0, 0.02);
  // A normal truncated at 2 sigma keeps 0.774 of its variance.
  EXPECT_NEAR(std::sqrt(sq / n), 0.5 * std::sqrt(0.774), 0.02);
}

HET_TEST(FixedVocabularyRejectsBadIdsWithoutCreatingRows) {
  auto config = Config(het::OptimizerKind::kSGD);
  config.vocabulary_size = 10;
  auto t = Make(config);
  std::vector<int64_t> keys = {1, 2, 10};
  std::vector<float> rows(12);
  EXPECT_INVALID(t->Gather(keys.data(), 3, rows.data()), "id 10 is outside the vocabulary [0, 10)");
  keys = {3, -1};
  std::vector<int64_t> clocks = {-1, -1};
  het::PulledRows pulled;
  EXPECT_INVALID(t->Pull(keys.data(), clocks.data(), 2, 0, false, &pulled), "'t'");
  EXPECT_EQ(t->Size(), 0);
}

HET_TEST(OptimizersMatchTheirUpdateRules) {
  for (auto kind : {het::OptimizerKind::kSGD, het::OptimizerKind::kAdagrad,
                    het::OptimizerKind::kAdam, het::OptimizerKind::kFtrl}) {
    auto config = Config(kind, 2);
    config.optimizer.l1 = 0.001f;
    auto t = Make(config);
    int64_t key = 9, count = 1;
    std::vector<float> w(2);
    EXPECT_OK(t->Gather(&key, 1, w.data()));
    double w0 = w[0], acc = 0.1, m = 0, v = 0, lin = 0;
    const float lr = 0.05f;
    for (int step = 1; step <= 3; ++step) {
      const float g[2] = {0.5f * step, -0.25f};
      int64_t clock;
      EXPECT_OK(t->Push(&key, g, &count, 1, lr, w.data(), &clock));
      EXPECT_EQ(clock, step);
      const double gg = g[0];
      switch (kind) {
        case het::OptimizerKind::kSGD:
          w0 -= lr * gg;
          break;
        case het::OptimizerKind::kAdagrad:
          acc += gg * gg;
          w0 -= lr * gg / std::sqrt(acc + 1e-7);
          break;
        case het::OptimizerKind::kAdam: {
          m = 0.9 * m + 0.1 * gg;
          v = 0.999 * v + 0.001 * gg * gg;
          const double alpha =
              lr * std::sqrt(1 - std::pow(0.999, step)) / (1 - std::pow(0.9, step));
          w0 -= alpha * m / (std::sqrt(v) + 1e-7);
          break;
        }
        case het::OptimizerKind::kFtrl: {
          const double acc_new = acc + gg * gg;
          lin += gg - (std::sqrt(acc_new) - std::sqrt(acc)) / lr * w0;
          const double quad = std::sqrt(acc_new) / lr;
          w0 = std::fabs(lin) > 0.001 ? ((lin > 0 ? 0.001 : -0.001) - lin) / quad : 0.0;
          acc = acc_new;
          break;
        }
      }
      EXPECT_NEAR(w[0], w0, 1e-5);
    }
  }
}

HET_TEST(PullReturnsOnlyMissingOrStaleRows) {
  auto t = Make(Config(het::OptimizerKind::kSGD));
  std::vector<int64_t> keys = {1, 2, 3};
  std::vector<float> grad(4, 1.0f);
  int64_t count = 5;
  EXPECT_OK(t->Push(&keys[1], grad.data(), &count, 1, 0.1f, nullptr, nullptr));  // clock(2) = 5
  std::vector<int64_t> clocks = {-1, 2, 0};  // 1 missing; 2 cached at 2; 3 cached at 0
  het::PulledRows pulled;
  EXPECT_OK(t->Pull(keys.data(), clocks.data(), 3, 3, false, &pulled));
  EXPECT_EQ(pulled.positions.size(), 1u);  // 2 is 3 behind: fresh at bound 3
  EXPECT_EQ(pulled.positions[0], 0);
  EXPECT_OK(t->Pull(keys.data(), clocks.data(), 3, 2, false, &pulled));
  EXPECT_EQ(pulled.positions.size(), 2u);
  EXPECT_EQ(pulled.positions[1], 1);
  EXPECT_EQ(pulled.clocks[1], 5);
  EXPECT_OK(t->Pull(keys.data(), clocks.data(), 3, -1, false, &pulled));  // unbounded
  EXPECT_EQ(pulled.positions.size(), 1u);
}

HET_TEST(BadPushesChangeNothing) {
  auto t = Make(Config(het::OptimizerKind::kAdagrad));
  std::vector<int64_t> keys = {1, 2};
  std::vector<float> before(8), after(8);
  EXPECT_OK(t->Gather(keys.data(), 2, before.data()));
  std::vector<float> grads = {1, 1, 1, 1, 1, NAN, 1, 1};
  std::vector<int64_t> counts = {1, 1};
  EXPECT_INVALID(t->Push(keys.data(), grads.data(), counts.data(), 2, 0.1f, nullptr, nullptr),
                 "non-finite gradient for id 2");
  grads[5] = 1;
  counts[1] = 0;
  EXPECT_INVALID(t->Push(keys.data(), grads.data(), counts.data(), 2, 0.1f, nullptr, nullptr),
                 "update counts must be between 1 and 1048576, got 0");
  // A count of 2^63 - 1 would be that many Adagrad steps: refused at once.
  counts[1] = INT64_MAX;
  EXPECT_INVALID(t->Push(keys.data(), grads.data(), counts.data(), 2, 0.1f, nullptr, nullptr),
                 "update counts must be between 1 and 1048576");
  // A cache's push of state deltas (values then Adagrad's accumulator).
  counts = {1, 1};
  std::vector<int64_t> bases = {0, 0};
  std::vector<float> deltas(16, 0.5f);
  deltas[7] = INFINITY;
  EXPECT_INVALID(t->PushDeltas(keys.data(), deltas.data(), counts.data(), bases.data(), 2, 0.1f,
                               nullptr, nullptr, het::Sender(), 0),
                 "non-finite delta for id 1");
  deltas[7] = -0.5f;  // an accumulator cannot shrink
  EXPECT_INVALID(t->PushDeltas(keys.data(), deltas.data(), counts.data(), bases.data(), 2, 0.1f,
                               nullptr, nullptr, het::Sender(), 0),
                 "negative squared-gradient change for id 1");
  deltas[7] = 0.5f;
  EXPECT_INVALID(t->PushDeltas(keys.data(), deltas.data(), counts.data(), bases.data(), 2, NAN,
                               nullptr, nullptr, het::Sender(), 0),
                 "learning rate must be finite");
  bases[1] = -1;
  EXPECT_INVALID(t->PushDeltas(keys.data(), deltas.data(), counts.data(), bases.data(), 2, 0.1f,
                               nullptr, nullptr, het::Sender(), 0),
                 "negative base clock -1 for id 2");
  bases[1] = 0;
  EXPECT_INVALID(t->PushDeltas(keys.data(), deltas.data(), counts.data(), bases.data(), 2, 0.1f,
                               nullptr, nullptr, het::Sender(), 3),
                 "3 unanswered rows in a push of 2");
  EXPECT_OK(t->Gather(keys.data(), 2, after.data()));
  for (int i = 0; i < 8; ++i) EXPECT_EQ(before[i], after[i]);
  EXPECT_EQ(t->Counters().updates_applied, 0u);
}

HET_TEST(APushMovedBetweenItsPassesNeverStoresANonFiniteRow) {
  // Adagrad's accumulator takes g^2 an update: one update of 1.5e19 keeps it
  // finite (2.25e38), two overflow it. Another client's push of id 1 lands
  // between this push's passes (injected): this push's update of id 1,
  // checked on the row as it was, would turn the row as it is non-finite.
  auto t = Make(Config(het::OptimizerKind::kAdagrad));
  std::vector<int64_t> keys = {1, 2}, counts = {1, 1}, one = {1};
  std::vector<float> grads = {1.5e19f, 1.5e19f, 1.5e19f, 1.5e19f, 1, 1, 1, 1};
  t->SetBetweenPushPasses([&] {
    t->SetBetweenPushPasses(nullptr);
    EXPECT_OK(t->Push(keys.data(), grads.data(), one.data(), 1, 0.1f, nullptr, nullptr));
  });
  EXPECT_OK(t->Push(keys.data(), grads.data(), counts.data(), 2, 0.1f, nullptr, nullptr));
  het::TableChunk rows;
  std::vector<int64_t> absent;
  EXPECT_OK(t->ReadHeld(keys.data(), 2, &rows, &absent));
  EXPECT_EQ(rows.keys.size(), 2u);
  for (float v : rows.values) EXPECT_TRUE(std::isfinite(v));
  for (float v : rows.slots) EXPECT_TRUE(std::isfinite(v));
  // Id 1 holds the other push's update alone; id 2 took this push's.
  for (size_t i = 0; i < rows.keys.size(); ++i) EXPECT_EQ(rows.clocks[i], 1);
  EXPECT_EQ(t->Counters().updates_refused_non_finite, 1u);
  EXPECT_EQ(t->Counters().updates_applied, 2u);
}

HET_TEST(UnknownOptimizerAndInitializerAreRejected) {
  het::OptimizerKind kind;
  het::InitializerKind init;
  EXPECT_INVALID(het::ParseOptimizerKind("rmsprop", &kind), "rmsprop");
  EXPECT_INVALID(het::ParseInitializerKind("glorot", &init), "glorot");
  EXPECT_OK(het::ParseOptimizerKind("Adagrad", &kind));
  auto config = Config(het::OptimizerKind::kSGD, 0);
  std::unique_ptr<het::TableShard> t;
  EXPECT_INVALID(het::TableShard::Create(config, &t), "dim must be between 1 and");
}

HET_TEST(ConcurrentPushesLoseNoUpdate) {
  auto config = Config(het::OptimizerKind::kSGD, 4);
  config.initializer.kind = het::InitializerKind::kConstant;
  config.initializer.a = 0;
  auto t = Make(config);
  const int threads = 8, rounds = 2000;
  std::vector<std::thread> pool;
  for (int w = 0; w < threads; ++w) {
    pool.emplace_back([&, w] {
      // Hot keys 0-3 touched by everyone, plus keys of one's own; powers of
      // two keep every sum exact whatever the order.
      for (int r = 0; r < rounds; ++r) {
        std::vector<int64_t> keys = {r % 4, 1000 + w * 10 + r % 10};
        std::vector<float> grads(8, 0.25f);
        std::vector<int64_t> counts = {1 + (r % 3), 1};
        het::Status s =
            t->Push(keys.data(), grads.data(), counts.data(), 2, 1.0f, nullptr, nullptr);
        if (!s.ok()) std::abort();
        int64_t key = (r * 7) % 4;
        int64_t clock = 0;
        het::PulledRows pulled;
        s = t->Pull(&key, &clock, 1, 0, false, &pulled);
        if (!s.ok()) std::abort();
      }
    });
  }
  for (auto& th : pool) th.join();
  std::vector<int64_t> expected_clock(4, 0);
  std::vector<int> pushes(4, 0);
  for (int r = 0; r < rounds; ++r) {
    expected_clock[r % 4] += threads * (1 + (r % 3));
    pushes[r % 4] += threads;
  }
  het::TableChunk all;
  EXPECT_OK(t->Export(0, 1 << 20, &all));
  EXPECT_EQ(all.keys.size(), size_t(4 + threads * 10));
  for (size_t i = 0; i < all.keys.size(); ++i) {
    const int64_t k = all.keys[i];
    if (k < 4) {
      EXPECT_EQ(all.clocks[i], expected_clock[k]);
      EXPECT_EQ(all.values[i * 4], -0.25f * pushes[k]);
    } else {
      EXPECT_EQ(all.clocks[i], rounds / 10);
    }
  }
  uint64_t total = 0;
  for (int64_t c : all.clocks) total += c;
  EXPECT_EQ(t->Counters().updates_applied, total);
}

HET_TEST(ExportThenImportRestoresEverythingInChunks) {
  auto config = Config(het::OptimizerKind::kAdam, 3);
  auto a = Make(config);
  std::vector<int64_t> keys;
  for (int64_t k = 0; k < 5000; ++k) keys.push_back(k * 7919 - 100000);
  std::vector<float> grads(keys.size() * 3, 0.125f);
  std::vector<int64_t> counts(keys.size(), 2);
  EXPECT_OK(
      a->Push(keys.data(), grads.data(), counts.data(), keys.size(), 0.01f, nullptr, nullptr));
  EXPECT_OK(a->Push(keys.data(), grads.data(), counts.data(), 100, 0.01f, nullptr, nullptr));
  auto b = Make(config);
  int64_t offset = 0;
  for (;;) {
    het::TableChunk chunk;
    EXPECT_OK(a->Export(offset, 777, &chunk));
    if (chunk.keys.empty()) break;
    offset += chunk.keys.size();
    EXPECT_OK(b->Import(chunk));
  }
  EXPECT_EQ(offset, 5000);
  EXPECT_EQ(b->Size(), 5000);
  het::TableChunk x, y;
  EXPECT_OK(a->Export(0, 1 << 20, &x));
  EXPECT_OK(b->Export(0, 1 << 20, &y));
  EXPECT_TRUE(x.keys == y.keys && x.values == y.values && x.slots == y.slots &&
              x.clocks == y.clocks && x.steps == y.steps);
  EXPECT_EQ(x.steps[0] + x.steps[1] > 0, true);
  het::TableChunk bad = x;
  bad.slots.pop_back();
  EXPECT_INVALID(b->Import(bad), "import of 5000 rows");
}

HET_TEST(ReadGivesWholeStatesInKeyOrderAndMakesMissingRows) {
  auto config = Config(het::OptimizerKind::kAdam, 3);
  auto t = Make(config);
  std::vector<int64_t> pushed = {11, -4};
  std::vector<float> grads(6, 0.25f);
  std::vector<int64_t> counts = {3, 1};
  EXPECT_OK(t->Push(pushed.data(), grads.data(), counts.data(), 2, 0.01f, nullptr, nullptr));
  std::vector<int64_t> keys = {-4, 99, 11};  // 99 is new
  het::TableChunk read;
  EXPECT_OK(t->Read(keys.data(), 3, &read));
  EXPECT_EQ(t->Size(), 3);
  EXPECT_TRUE(read.keys == keys);
  het::TableChunk all;
  EXPECT_OK(t->Export(0, 1 << 20, &all));
  for (size_t i = 0; i < keys.size(); ++i) {
    size_t j = 0;
    while (all.keys[j] != keys[i]) ++j;
    for (int d = 0; d < 3; ++d) EXPECT_EQ(read.values[i * 3 + d], all.values[j * 3 + d]);
    for (int d = 0; d < 6; ++d) EXPECT_EQ(read.slots[i * 6 + d], all.slots[j * 6 + d]);
    EXPECT_EQ(read.clocks[i], all.clocks[j]);
    EXPECT_EQ(read.steps[i], all.steps[j]);
  }
  EXPECT_EQ(read.clocks[0], 1);
  EXPECT_EQ(read.clocks[1], 0);
  EXPECT_EQ(read.steps[2], 3);
  // Importing what was read changes nothing.
  auto copy = Make(config);
  EXPECT_OK(copy->Import(read));
  het::TableChunk again;
  EXPECT_OK(copy->Read(keys.data(), 3, &again));
  EXPECT_TRUE(again.values == read.values && again.slots == read.slots &&
              again.clocks == read.clocks && again.steps == read.steps);
  std::vector<int64_t> bad = {1};
  config.vocabulary_size = 1;
  auto fixed = Make(config);
  EXPECT_INVALID(fixed->Read(bad.data(), 1, &read), "");
}

HET_TEST(RowLimitRefusesNewRowsAndChangesNothing) {
  auto config = Config(het::OptimizerKind::kAdagrad, 2);
  config.max_rows = 4;
  auto t = Make(config);
  std::vector<int64_t> keys = {1, 2, 3, 4};
  std::vector<float> grads(8, 0.5f), values(8);
  std::vector<int64_t> counts(4, 1);
  EXPECT_OK(t->Push(keys.data(), grads.data(), counts.data(), 4, 0.1f, nullptr, nullptr));
  std::vector<int64_t> mixed = {4, 5};  // one held, one new
  std::vector<int64_t> clocks(2, -1);
  EXPECT_TRUE(
      t->Push(mixed.data(), grads.data(), counts.data(), 2, 0.1f, nullptr, nullptr).code() ==
      het::StatusCode::kResourceExhausted);
  het::PulledRows pulled;
  EXPECT_TRUE(t->Pull(mixed.data(), clocks.data(), 2, 0, false, &pulled).code() ==
              het::StatusCode::kResourceExhausted);
  EXPECT_INVALID(het::Status::InvalidArgument(t->Gather(mixed.data(), 2, values.data()).message()),
                 "limit is 4");
  het::TableChunk chunk;
  chunk.keys = {9};
  chunk.values = {1, 1};
  chunk.slots = {1, 1};
  chunk.clocks = {0};
  chunk.steps = {0};
  EXPECT_TRUE(t->Import(chunk).code() == het::StatusCode::kResourceExhausted);
  EXPECT_EQ(t->Size(), int64_t{4});
  // Key 4 was not updated by the refused push; held rows still train.
  EXPECT_OK(t->Push(&keys[3], grads.data(), counts.data(), 1, 0.1f, nullptr, &clocks[0]));
  EXPECT_EQ(clocks[0], int64_t{2});
  chunk.keys = {2};
  EXPECT_OK(t->Import(chunk));
  config.max_rows = 0;
  std::unique_ptr<het::TableShard> bad;
  EXPECT_INVALID(het::TableShard::Create(config, &bad), "max_rows");
}

HET_TEST(RowsCountedStayTheRowsHeldWhenAClearMeetsAnotherClientsImport) {
  // Two Horovod ranks load the same file into a table they share: each
  // clears it and imports every row. However the two interleave, the count
  // of rows (which chunked reads page by) is the rows the stripes hold.
  auto config = Config(het::OptimizerKind::kSGD, 2);
  auto t = Make(config);
  het::TableChunk chunk;
  for (int64_t key = 0; key < 2000; ++key) {
    chunk.keys.push_back(key * 7919);
    chunk.values.insert(chunk.values.end(), {1.0f, 2.0f});
    chunk.clocks.push_back(1);
    chunk.steps.push_back(0);
  }
  for (int round = 0; round < 20; ++round) {
    std::vector<std::thread> ranks;
    for (int r = 0; r < 2; ++r) {
      ranks.emplace_back([&] {
        t->Clear();
        EXPECT_OK(t->Import(chunk));
      });
    }
    for (auto& r : ranks) r.join();
    het::TableChunk all;
    EXPECT_OK(t->Export(0, 1 << 20, &all));
    EXPECT_EQ(t->Size(), static_cast<int64_t>(all.keys.size()));
  }
}

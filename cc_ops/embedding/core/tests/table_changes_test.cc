// Incremental checkpoints' changes (row_changes.h): a chain of a full export
// and the taken changes, composed as a restore composes it, equals the
// shard's own full export at every cut, through pushes, creations,
// evictions and rows made again, and through checkpoints that were never
// kept (whose changes must come again with the next one's).
#include <map>
#include <random>
#include <vector>

#include "cc_ops/common/tests/harness.h"
#include "cc_ops/embedding/core/tests/local_cluster.h"

namespace {

struct Row {
  std::vector<float> values, slots;
  int64_t clock, step;
  bool operator==(const Row& o) const {
    return values == o.values && slots == o.slots && clock == o.clock && step == o.step;
  }
};
using Rows = std::map<int64_t, Row>;

void Add(const het::TableChunk& chunk, int dim, int slots, Rows* rows) {
  const size_t slot_floats = size_t(slots) * dim;
  for (size_t i = 0; i < chunk.keys.size(); ++i) {
    Row r;
    r.values.assign(chunk.values.begin() + i * dim, chunk.values.begin() + (i + 1) * dim);
    r.slots.assign(chunk.slots.begin() + i * slot_floats,
                   chunk.slots.begin() + (i + 1) * slot_floats);
    r.clock = chunk.clocks[i];
    r.step = chunk.steps[i];
    (*rows)[chunk.keys[i]] = r;
  }
}

Rows Everything(const het::TableShard& t) {
  het::TableChunk chunk;
  if (!t.Export(0, 1 << 30, &chunk).ok()) std::abort();
  Rows rows;
  Add(chunk, t.dim(), t.num_slots(), &rows);
  return rows;
}

// What a delta checkpoint holds: the changed rows, read without creating
// any, and the dropped keys (with those read absent).
struct Delta {
  Rows rows;
  std::vector<int64_t> dropped;
};

Delta TakeDelta(het::TableShard* t, bool kept) {
  std::vector<int64_t> changed, dropped;
  EXPECT_TRUE(t->TakeChanges(kept, &changed, &dropped));
  het::TableChunk chunk;
  std::vector<int64_t> absent;
  EXPECT_OK(t->ReadHeld(changed.data(), static_cast<int64_t>(changed.size()), &chunk, &absent));
  EXPECT_TRUE(absent.empty());
  Delta d;
  Add(chunk, t->dim(), t->num_slots(), &d.rows);
  d.dropped = dropped;
  return d;
}

void Apply(const Delta& d, Rows* rows) {
  for (int64_t key : d.dropped) rows->erase(key);
  for (const auto& r : d.rows) (*rows)[r.first] = r.second;
}

het::TableConfig Adagrad(int64_t max_rows) {
  het::TableConfig c = het_test::SgdTable(3);
  c.optimizer.kind = het::OptimizerKind::kAdagrad;
  c.initializer.seed = 5;
  if (max_rows > 0) {
    c.max_rows = max_rows;
    c.on_full = het::OnFull::kEvict;
  }
  return c;
}

void ChainsEqualTheTable(int64_t max_rows) {
  std::unique_ptr<het::TableShard> t;
  EXPECT_OK(het::TableShard::Create(Adagrad(max_rows), &t));
  std::mt19937_64 rng(11);
  std::uniform_int_distribution<int64_t> any_key(0, 399);
  std::vector<float> row(3), grad(3, 0.25f);
  const int64_t one = 1;
  // Rows before tracking starts, then a full checkpoint's cut.
  for (int i = 0; i < 100; ++i) {
    const int64_t key = any_key(rng);
    EXPECT_OK(t->Gather(&key, 1, row.data()));
  }
  std::vector<int64_t> changed, dropped;
  EXPECT_TRUE(!t->TakeChanges(true, &changed, &dropped));  // not tracked yet: full
  t->ForgetChanges();
  Rows chain = Everything(*t);
  int deltas = 0, lost = 0;
  for (int cut = 0; cut < 40; ++cut) {
    for (int i = 0; i < 50; ++i) {
      const int64_t key = any_key(rng);
      if (rng() % 2) {
        EXPECT_OK(t->Gather(&key, 1, row.data()));
      } else {
        EXPECT_OK(t->Push(&key, grad.data(), &one, 1, 0.1f, nullptr, nullptr));
      }
    }
    // Each fourth checkpoint is lost (never kept): its changes come again.
    const bool lose = cut % 4 == 3;
    const Delta d = TakeDelta(t.get(), /*kept=*/cut == 0 || (cut - 1) % 4 != 3);
    if (lose) {
      ++lost;
      continue;
    }
    Apply(d, &chain);
    ++deltas;
    EXPECT_TRUE(chain == Everything(*t));
  }
  EXPECT_EQ(deltas, 30);
  EXPECT_EQ(lost, 10);
  if (max_rows > 0) EXPECT_TRUE(t->Counters().rows_evicted > 100u);
}

HET_TEST(AChainOfChangesEqualsTheTable) { ChainsEqualTheTable(0); }

HET_TEST(AChainOfChangesEqualsAnEvictingTable) { ChainsEqualTheTable(64); }

HET_TEST(ClearStopsTrackingAndEraseDropsRows) {
  std::unique_ptr<het::TableShard> t;
  EXPECT_OK(het::TableShard::Create(Adagrad(0), &t));
  std::vector<float> rows(9);
  const std::vector<int64_t> keys = {1, 2, 3};
  EXPECT_OK(t->Gather(keys.data(), 3, rows.data()));
  t->ForgetChanges();
  const int64_t two = 2;
  EXPECT_OK(t->Erase(&two, 1));
  EXPECT_EQ(t->Size(), int64_t{2});
  std::vector<int64_t> changed, dropped;
  EXPECT_TRUE(t->TakeChanges(true, &changed, &dropped));
  EXPECT_TRUE(changed.empty());
  EXPECT_TRUE(dropped == std::vector<int64_t>{2});
  het::TableChunk chunk;
  std::vector<int64_t> absent;
  EXPECT_OK(t->ReadHeld(keys.data(), 3, &chunk, &absent));
  EXPECT_TRUE(absent == std::vector<int64_t>{2});
  EXPECT_EQ(chunk.keys.size(), size_t{2});
  EXPECT_EQ(t->Size(), int64_t{2});  // the read made no row
  t->Clear();
  EXPECT_TRUE(!t->TakeChanges(true, &changed, &dropped));
}

}  // namespace

namespace {

HET_TEST(DropsPastWhatAStripeKeepsMakeTheNextCheckpointFull) {
  std::unique_ptr<het::TableShard> t;
  EXPECT_OK(het::TableShard::Create(Adagrad(64), &t));
  std::vector<float> row(3);
  t->ForgetChanges();
  // About 1,500 drops a stripe: past the 1,024 each keeps.
  for (int64_t key = 0; key < 100000; ++key) EXPECT_OK(t->Gather(&key, 1, row.data()));
  std::vector<int64_t> changed, dropped;
  EXPECT_TRUE(!t->TakeChanges(true, &changed, &dropped));
  EXPECT_TRUE(changed.empty() && dropped.empty());
  t->ForgetChanges();  // the full checkpoint's cut: whole again
  const int64_t key = 200000;
  EXPECT_OK(t->Gather(&key, 1, row.data()));
  EXPECT_TRUE(t->TakeChanges(true, &changed, &dropped));
  EXPECT_TRUE(changed == std::vector<int64_t>{key});
  EXPECT_EQ(dropped.size(), size_t{1});
}

}  // namespace

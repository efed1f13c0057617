#include "cc_ops/embedding/core/eviction_order.h"

#include "cc_ops/common/tests/harness.h"

HET_TEST(LruEvictsLeastRecentlyTouched) {
  het::EvictionOrder order(het::CachePolicy::kLRU, 4, 0);
  for (int s = 0; s < 4; ++s) order.Attach(s, 1);
  order.Detach(0);
  order.Attach(0, 2);  // slot 0 touched again
  EXPECT_EQ(order.Victim(), 1);
  order.Detach(1);
  EXPECT_EQ(order.Victim(), 2);
}

HET_TEST(LfuEvictsLeastFrequentThenLeastRecent) {
  het::EvictionOrder order(het::CachePolicy::kLFU, 4, 0);
  order.Attach(0, 3);
  order.Attach(1, 1);
  order.Attach(2, 2);
  order.Attach(3, 1);
  EXPECT_EQ(order.Victim(), 1);
  order.Detach(1);
  EXPECT_EQ(order.Victim(), 3);
  order.Detach(3);
  EXPECT_EQ(order.Victim(), 2);
}

HET_TEST(LfuOptPinsHotRowsUntilNothingElseIsLeft) {
  het::EvictionOrder order(het::CachePolicy::kLFUOpt, 3, 5);
  order.Attach(0, 100);  // pinned
  order.Attach(1, 4);
  order.Attach(2, 6);  // pinned
  EXPECT_TRUE(order.pinned(0) && order.pinned(2) && !order.pinned(1));
  EXPECT_EQ(order.Victim(), 1);
  order.Detach(1);
  EXPECT_EQ(order.Victim(), 0);  // only pinned rows remain: oldest pinned goes
}

HET_TEST(UnknownPolicyIsRejected) {
  het::CachePolicy p;
  EXPECT_INVALID(het::ParseCachePolicy("fifo", &p), "fifo");
  EXPECT_OK(het::ParseCachePolicy("LFU-opt", &p));
  EXPECT_TRUE(p == het::CachePolicy::kLFUOpt);
}

HET_TEST(HeldSlotsAreNeverVictims) {
  het::EvictionOrder order(het::CachePolicy::kLFUOpt, 3, 5);
  order.Attach(0, 1, /*held=*/true);
  order.Attach(1, 100);  // pinned by touches
  EXPECT_TRUE(order.held(0) && !order.pinned(0) && order.pinned(1));
  EXPECT_EQ(order.Victim(), 1);  // a row pinned by touches goes before a held one
  order.Detach(1);
  EXPECT_EQ(order.Victim(), het::EvictionOrder::kNone);
}

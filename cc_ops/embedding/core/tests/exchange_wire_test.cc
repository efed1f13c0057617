// The exchange's messages: what they carry comes back exactly, in 4-byte
// columns where values fit and 8-byte ones where not; malformed bytes are
// refused without being read past; and a refused exchange changes nothing.
#include "cc_ops/embedding/core/exchange_wire.h"

#include <cstring>
#include <random>
#include <vector>

#include "cc_ops/common/tests/harness.h"
#include "cc_ops/embedding/core/table_shard.h"

namespace {

namespace wire = het::wire;

wire::ExchangeRequest SampleRequest(const std::vector<float>& deltas, int width) {
  wire::ExchangeRequest r;
  r.sender = het::Sender{0x9e3779b97f4a7c15ULL, 77};
  r.read_staleness = 100;
  r.learning_rate = 0.05f;
  r.width = width;
  r.misses = {5, 1, 4000000000LL};
  r.evicted = {-3, int64_t{1} << 62};  // spread beyond 2^32: 8-byte values
  r.push_keys = {8, 9};
  r.push_counts = {1, 3};
  r.push_base_clocks = {0, 12};
  r.push_unanswered = 1;
  r.push_deltas = {deltas.data(), 2};
  r.initial_state = 0x5eedULL;
  return r;
}

HET_TEST(ExchangeMessagesComeBackExactlyAndNarrowWhereValuesFit) {
  const int width = 3;
  const std::vector<float> deltas = {0.5f, -1.0f, 2.0f, 0.25f, 0.0f, -0.125f};
  const wire::ExchangeRequest r = SampleRequest(deltas, width);
  std::vector<uint8_t> bytes;
  wire::EncodeRequest(r, &bytes);
  wire::ExchangeRequest back;
  back.width = width;
  EXPECT_OK(wire::DecodeRequest("emb", bytes.data(), bytes.size(), &back));
  EXPECT_EQ(back.sender.worker, r.sender.worker);
  EXPECT_EQ(back.sender.generation, r.sender.generation);
  EXPECT_EQ(back.read_staleness, 100);
  EXPECT_TRUE(back.misses == r.misses && back.evicted == r.evicted);
  EXPECT_TRUE(back.push_keys == r.push_keys && back.push_counts == r.push_counts);
  EXPECT_TRUE(back.push_base_clocks == r.push_base_clocks);
  EXPECT_EQ(back.push_unanswered, 1);
  EXPECT_EQ(back.initial_state, 0x5eedULL);
  EXPECT_TRUE(std::vector<float>(back.push_deltas.data, back.push_deltas.data + 6) == deltas);
  // 76 bytes of header (magic, version, width, row type), sender (worker, generation,
  // sequence, epoch) and settings (with the initial states it makes);
  // misses 4 + 8 + 3 * 4; evicted 4 + 8 + 2 * 8; keys, counts and clocks
  // 4 + 8 + 2 * 4 each; deltas 4 + 6 * 4.
  EXPECT_EQ(bytes.size(), 76u + 24 + 28 + 3 * 20 + 28);

  wire::ExchangeAnswer a;
  a.epoch = -5;
  a.width = width;
  // Two pushes answered, the first lean: one state.
  a.push_states = {deltas.data(), 1};
  a.push_clocks = {13, 14};
  a.push_lean = {0x1};
  // Three misses, the second rebuilt by the worker: two states.
  a.miss_states = {deltas.data(), 2};
  a.miss_clocks = {0, 5, 2};
  a.miss_rebuilt = {0x2};
  a.refresh_keys = {int64_t{1} << 40};
  a.refresh_states = {deltas.data() + 3, 1};
  a.refresh_clocks = {7};
  wire::EncodeAnswer(a, &bytes);
  wire::ExchangeAnswer got;
  got.width = width;
  EXPECT_OK(wire::DecodeAnswer("emb", bytes.data(), bytes.size(), &got));
  EXPECT_EQ(got.epoch, -5);
  EXPECT_TRUE(got.push_clocks == a.push_clocks && got.miss_clocks == a.miss_clocks);
  EXPECT_TRUE(got.refresh_keys == a.refresh_keys && got.refresh_clocks == a.refresh_clocks);
  EXPECT_EQ(got.miss_states.rows, 2);
  EXPECT_TRUE(got.miss_rebuilt == a.miss_rebuilt && wire::Flagged(got.miss_rebuilt, 1));
  EXPECT_TRUE(!wire::Flagged(got.miss_rebuilt, 0) && !wire::Flagged(got.miss_rebuilt, 2));
  EXPECT_TRUE(got.push_lean == a.push_lean && got.push_states.rows == 1);
  EXPECT_EQ(got.push_states.data[0], deltas[0]);
  // Bits that do not add up to the misses or the pushes are refused.
  for (const std::vector<uint8_t>& bad :
       {std::vector<uint8_t>{0x3}, std::vector<uint8_t>{0x8}, std::vector<uint8_t>{0x2, 0x0}}) {
    wire::ExchangeAnswer wrong = a;
    wrong.miss_rebuilt = bad;
    wire::EncodeAnswer(wrong, &bytes);
    EXPECT_TRUE(!wire::DecodeAnswer("emb", bytes.data(), bytes.size(), &got).ok());
  }
  for (const std::vector<uint8_t>& bad :
       {std::vector<uint8_t>{0x3}, std::vector<uint8_t>{0x4}, std::vector<uint8_t>{0x1, 0x0}}) {
    wire::ExchangeAnswer wrong = a;
    wrong.push_lean = bad;
    wire::EncodeAnswer(wrong, &bytes);
    EXPECT_TRUE(!wire::DecodeAnswer("emb", bytes.data(), bytes.size(), &got).ok());
  }
  EXPECT_EQ(got.refresh_states.data[2], -0.125f);
}

HET_TEST(MalformedExchangeMessagesAreRefusedNotReadPast) {
  const int width = 3;
  const std::vector<float> deltas(6, 1.0f);
  std::vector<uint8_t> bytes;
  wire::EncodeRequest(SampleRequest(deltas, width), &bytes);
  wire::ExchangeRequest r;
  r.width = width + 1;
  EXPECT_INVALID(wire::DecodeRequest("emb", bytes.data(), bytes.size(), &r), "floats");
  r.width = width;
  EXPECT_INVALID(wire::DecodeRequest("emb", bytes.data(), bytes.size() - 4, &r), "past its end");
  std::vector<uint8_t> longer = bytes;
  longer.resize(bytes.size() + 4, 0);
  EXPECT_INVALID(wire::DecodeRequest("emb", longer.data(), longer.size(), &r), "left over");
  wire::ExchangeAnswer a;
  a.width = width;
  EXPECT_INVALID(wire::DecodeAnswer("emb", bytes.data(), bytes.size(), &a), "not an exchange");
  // Another version of the wire is refused by name: the first had its own
  // magic and no version word, later ones bump the version.
  std::vector<uint8_t> other = bytes;
  const uint32_t v1_magic = 0x31515848, next = wire::kWireVersion + 1;
  std::memcpy(other.data(), &v1_magic, 4);
  EXPECT_INVALID(wire::DecodeRequest("emb", other.data(), other.size(), &r), "wire version 1");
  other = bytes;
  std::memcpy(other.data() + 4, &next, 4);
  EXPECT_INVALID(wire::DecodeRequest("emb", other.data(), other.size(), &r),
                 "wire version " + std::to_string(next) + ", but this table speaks version " +
                     std::to_string(wire::kWireVersion));
  // Every truncation and random corruption is refused or read within bounds
  // (the sanitizer builds check the latter).
  std::mt19937 rng(1);
  for (size_t cut = 0; cut < bytes.size(); ++cut) {
    EXPECT_TRUE(!wire::DecodeRequest("emb", bytes.data(), cut, &r).ok());
  }
  for (int trial = 0; trial < 2000; ++trial) {
    std::vector<uint8_t> bad = bytes;
    for (int k = 0; k < 3; ++k) bad[rng() % bad.size()] = static_cast<uint8_t>(rng());
    r.width = width;
    (void)wire::DecodeRequest("emb", bad.data(), bad.size(), &r);
  }
}

HET_TEST(ARefusedExchangeChangesNothing) {
  het::TableConfig config;
  config.name = "emb";
  config.dim = 2;
  config.vocabulary_size = 100;
  config.optimizer.kind = het::OptimizerKind::kSGD;
  std::unique_ptr<het::TableShard> shard;
  EXPECT_OK(het::TableShard::Create(config, &shard));
  const std::vector<float> deltas = {1.0f, 1.0f};
  wire::ExchangeRequest r;
  r.sender = het::Sender{5, 1};
  r.learning_rate = 0.1f;
  r.width = 2;
  r.push_keys = {3};
  r.push_counts = {1};
  r.push_base_clocks = {0};
  r.push_deltas = {deltas.data(), 1};
  r.misses = {4, 100};  // 100 is outside the vocabulary
  std::vector<uint8_t> request, answer;
  wire::EncodeRequest(r, &request);
  EXPECT_INVALID(shard->Exchange(request.data(), request.size(), &answer), "100");
  EXPECT_EQ(shard->Size(), 0);
  EXPECT_EQ(shard->Counters().updates_applied, 0u);
  r.misses = {4};
  r.sender = het::Sender{};  // an exchange must name its worker
  wire::EncodeRequest(r, &request);
  EXPECT_INVALID(shard->Exchange(request.data(), request.size(), &answer), "worker");
  EXPECT_EQ(shard->Size(), 0);
  r.sender = het::Sender{5, 1};
  wire::EncodeRequest(r, &request);
  EXPECT_OK(shard->Exchange(request.data(), request.size(), &answer));
  EXPECT_EQ(shard->Size(), 2);
  EXPECT_EQ(shard->Counters().updates_applied, 1u);
  EXPECT_EQ(shard->Counters().bytes_received, request.size());
  EXPECT_EQ(shard->Counters().bytes_sent, answer.size());
}

}  // namespace

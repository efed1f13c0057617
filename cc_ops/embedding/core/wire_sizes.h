#ifndef HET_TF_EMBEDDING_CORE_WIRE_SIZES_H_
#define HET_TF_EMBEDDING_CORE_WIRE_SIZES_H_

#include <cstdint>

// What each exchange between a worker's cache and a table shard moves, as
// the ops' tensors carry it: every key, clock, position, count, row and
// per-request setting. The cache's counters and the shard's counters both
// use these, so the bytes one side sends are the bytes the other receives.
// `requests` is the number of shards an exchange goes to (each gets its
// own settings); the shards count their own, one at a time. The exchange of
// sync="refresh" is one byte string each way (exchange_wire.h), counted as
// its length.
namespace het {
namespace wire {

constexpr uint64_t kKey = 8, kClock = 8, kPosition = 4, kCount = 8;
// Per request: an int64 setting (a bound, a worker id, a generation, an
// epoch) and the float learning rate of a push.
constexpr uint64_t kSetting = 8, kLearningRate = 4, kFlag = 1;

inline uint64_t Row(int width) { return sizeof(float) * static_cast<uint64_t>(width); }

// A plain lookup: keys out, rows of `dim` values back.
inline uint64_t GatherRequest(int64_t keys) { return kKey * keys; }
inline uint64_t GatherAnswer(int64_t rows, int dim) { return Row(dim) * rows; }

// A read of whole rows (a hot block's): each row's state, clock and step
// count back.
inline uint64_t ReadAnswer(int64_t rows, int width) {
  return (Row(width) + kClock + kClock) * rows;
}

// A cache pull that checks (sync="check"): each key with the clock of the
// copy held, and the read bound; each row that must be refreshed back with
// its request position and its clock.
inline uint64_t PullRequest(int64_t keys, int64_t requests = 1) {
  return (kKey + kClock) * keys + kSetting * requests;
}
inline uint64_t PullAnswer(int64_t rows, int width) {
  return (kPosition + kClock + Row(width)) * rows;
}

// A push: key, update count and gradient or delta, and the learning rate;
// a delta also carries the clock it started from, and its request the
// sender (worker id, generation, the round's sequence number and the epoch
// it saw) and how many leading rows want no answer (rows the cache
// evicted). The answer, when asked for, is each answered
// row's new state and clock. A delta push's answer carries each answered
// row's clock and a flag (one byte) saying whether it was acknowledged by
// its clock alone (`lean` rows, whose state the cache computes), the
// others' states, the shard's epoch and the keys whose update it refused.
// A pull's answer carries the shard's epoch too.
inline uint64_t PushRequest(int64_t rows, int width, bool delta, int64_t requests = 1) {
  return (kKey + kCount + Row(width) + (delta ? kClock : 0)) * rows +
         (kLearningRate + (delta ? 5 * kSetting : 0)) * requests;
}
inline uint64_t PushAnswer(int64_t rows, int width) { return (kClock + Row(width)) * rows; }
// The shard's epoch, which every delta push's answer carries.
inline uint64_t EpochAnswer(int64_t answers = 1) { return kSetting * answers; }
// The keys whose update a delta push's shards refused.
inline uint64_t RefusedAnswer(int64_t keys) { return kKey * keys; }
inline uint64_t DeltaPushRows(int64_t rows, int width, int64_t lean) {
  return (kClock + kFlag) * rows + Row(width) * (rows - lean);
}
inline uint64_t DeltaPushAnswer(int64_t rows, int width, int64_t lean) {
  return DeltaPushRows(rows, width, lean) + EpochAnswer();
}

}  // namespace wire
}  // namespace het

#endif  // HET_TF_EMBEDDING_CORE_WIRE_SIZES_H_

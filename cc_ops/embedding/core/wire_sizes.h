#ifndef HET_TF_EMBEDDING_CORE_WIRE_SIZES_H_
#define HET_TF_EMBEDDING_CORE_WIRE_SIZES_H_

#include <cstdint>

// What each exchange between a worker's cache and a table shard moves, as
// the ops' tensors carry it. The cache's counters and the shard's counters
// both use these, so the bytes one side sends are the bytes the other
// receives.
namespace het {
namespace wire {

constexpr uint64_t kKey = 8, kClock = 8, kPosition = 4, kCount = 8;

inline uint64_t Row(int width) { return sizeof(float) * static_cast<uint64_t>(width); }

// A plain lookup: keys out, rows of `dim` values back.
inline uint64_t GatherRequest(int64_t keys) { return kKey * keys; }
inline uint64_t GatherAnswer(int64_t rows, int dim) { return Row(dim) * rows; }

// A cache pull: each key with the clock of the copy held; each row that
// must be refreshed back with its request position and its clock.
inline uint64_t PullRequest(int64_t keys) { return (kKey + kClock) * keys; }
inline uint64_t PullAnswer(int64_t rows, int width) {
  return (kPosition + kClock + Row(width)) * rows;
}

// A push: key, update count and gradient or delta; a delta also carries the
// clock it started from. The answer, when asked for, is each row's new
// state and clock.
inline uint64_t PushRequest(int64_t rows, int width, bool with_base_clock) {
  return (kKey + kCount + Row(width) + (with_base_clock ? kClock : 0)) * rows;
}
inline uint64_t PushAnswer(int64_t rows, int width) { return (kClock + Row(width)) * rows; }

}  // namespace wire
}  // namespace het

#endif  // HET_TF_EMBEDDING_CORE_WIRE_SIZES_H_

// When an id becomes a row: after `admit_after` training steps have looked
// it up (each worker's step that asks the shard for it counts once).
//
// A shard counts the sightings of ids it does not hold in a count-min
// sketch (four rows of one-byte counters, conservative update: only the
// smallest counters of an id grow), so the memory is fixed whatever the
// stream: kSketchWidth * kSketchDepth bytes a shard. Every kSketchWidth / 2
// sightings all counters halve, so counts fade and an id must come back
// within about that many sightings of new ids to be admitted. A sketch only
// errs upward: an id may be admitted early (docs/keras_layer.md gives the
// measured rate), never late.
//
// Until it is admitted an id reads the default row (zeros, as an exported
// model reads ids it does not hold), its gradients are dropped, and no cache
// keeps it: the shard answers it with the clock kNotAdmitted.
#ifndef HET_TF_EMBEDDING_CORE_ROW_ADMISSION_H_
#define HET_TF_EMBEDDING_CORE_ROW_ADMISSION_H_

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "cc_ops/common/status.h"
#include "cc_ops/embedding/core/zeroed_array.h"

namespace het {

// The clock a shard answers for an id it does not hold and did not admit.
constexpr int64_t kNotAdmitted = -1;

// A sketch's counters are bytes.
constexpr int64_t kMaxAdmitAfter = 255;

constexpr int kSketchDepth = 4;
constexpr uint64_t kSketchWidth = uint64_t{1} << 20;

class AdmissionSketch {
 public:
  // Ids are admitted at their `threshold`-th sighting (2..255).
  explicit AdmissionSketch(int threshold);
  // Counts one sighting of key; true once it reaches the threshold.
  bool Sighted(int64_t key);
  // Whether one more sighting of key would reach the threshold (counting none).
  bool WouldAdmit(int64_t key) const { return Count(key) + 1 >= threshold_; }
  // Forgets every sighting, as the table it counts for is emptied.
  void Clear();
  // The sightings counted for key so far (an upper bound).
  int Count(int64_t key) const;
  // Every counter (MemoryBytes() of them), for a checkpoint; and counters
  // taken back from one, each cell the larger of the two, so that a count
  // stays an upper bound whichever shard's sketch it came from. Merge
  // refuses counters of another size, naming the table, changing nothing.
  void Export(std::vector<uint8_t>* out) const;
  Status Merge(const std::string& table, const uint8_t* counts, size_t n);
  static size_t MemoryBytes() { return kSketchDepth * kSketchWidth; }

 private:
  size_t Cell(int row, int64_t key) const;
  void Halve();

  int threshold_;
  // kSketchDepth rows of kSketchWidth, used through atomic builtins; mapped
  // zero, so a shard's sketch takes memory only where sightings land.
  ZeroedArray<uint8_t> counters_;
  std::atomic<uint64_t> sightings_{0};
};

}  // namespace het

#endif  // HET_TF_EMBEDDING_CORE_ROW_ADMISSION_H_

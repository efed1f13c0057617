#include "cc_ops/embedding/core/row_admission.h"

#include <algorithm>

#include "cc_ops/common/hashing.h"

namespace het {
namespace {

// One odd constant a sketch row: four independent-enough hashes of a key.
constexpr uint64_t kRowSalt[kSketchDepth] = {0x9e3779b97f4a7c15ULL, 0xc2b2ae3d27d4eb4fULL,
                                             0x165667b19e3779f9ULL, 0xd6e8feb86659fd93ULL};

}  // namespace

AdmissionSketch::AdmissionSketch(int threshold)
    : threshold_(threshold), counters_(kSketchDepth * kSketchWidth) {}

size_t AdmissionSketch::Cell(int row, int64_t key) const {
  const uint64_t h = Mix64(static_cast<uint64_t>(key) ^ kRowSalt[row]);
  return row * kSketchWidth + (h & (kSketchWidth - 1));
}

int AdmissionSketch::Count(int64_t key) const {
  int count = 255;
  for (int r = 0; r < kSketchDepth; ++r) {
    count = std::min<int>(count, __atomic_load_n(&counters_[Cell(r, key)], __ATOMIC_RELAXED));
  }
  return count;
}

bool AdmissionSketch::Sighted(int64_t key) {
  // Conservative update: only the counters at the minimum move, so an id
  // that shares a cell with a busier one does not push it further.
  const int next = std::min(Count(key) + 1, 255);
  for (int r = 0; r < kSketchDepth; ++r) {
    uint8_t* c = &counters_[Cell(r, key)];
    uint8_t have = __atomic_load_n(c, __ATOMIC_RELAXED);
    while (have < next && !__atomic_compare_exchange_n(c, &have, static_cast<uint8_t>(next), true,
                                                       __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
    }
  }
  if (sightings_.fetch_add(1, std::memory_order_relaxed) + 1 == kSketchWidth / 2) {
    sightings_.store(0);
    Halve();
  }
  return next >= threshold_;
}

void AdmissionSketch::Clear() {
  for (size_t i = 0; i < kSketchDepth * kSketchWidth; ++i) {
    // Zero counters are left alone: their pages stay unwritten.
    if (__atomic_load_n(&counters_[i], __ATOMIC_RELAXED) != 0)
      __atomic_store_n(&counters_[i], uint8_t{0}, __ATOMIC_RELAXED);
  }
  sightings_.store(0);
}

void AdmissionSketch::Export(std::vector<uint8_t>* out) const {
  out->resize(MemoryBytes());
  for (size_t i = 0; i < out->size(); ++i) {
    (*out)[i] = __atomic_load_n(&counters_[i], __ATOMIC_RELAXED);
  }
}

Status AdmissionSketch::Merge(const std::string& table, const uint8_t* counts, size_t n) {
  if (n != MemoryBytes()) {
    return Status::InvalidArgument(TableLabel(table) + ": an admission sketch of " +
                                   std::to_string(n) + " counters, but this build's has " +
                                   std::to_string(MemoryBytes()) + "; nothing was changed");
  }
  for (size_t i = 0; i < n; ++i) {
    uint8_t* c = &counters_[i];
    uint8_t have = __atomic_load_n(c, __ATOMIC_RELAXED);
    // Zero counts are skipped: their pages stay unwritten.
    while (have < counts[i] && !__atomic_compare_exchange_n(c, &have, counts[i], true,
                                                            __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
    }
  }
  return Status::Ok();
}

void AdmissionSketch::Halve() {
  for (size_t i = 0; i < kSketchDepth * kSketchWidth; ++i) {
    // Zero counters are left alone: their pages stay unwritten.
    const uint8_t have = __atomic_load_n(&counters_[i], __ATOMIC_RELAXED);
    if (have != 0)
      __atomic_store_n(&counters_[i], static_cast<uint8_t>(have >> 1), __ATOMIC_RELAXED);
  }
}

}  // namespace het

#include "cc_ops/schedule/core/key_summary.h"

#include <algorithm>

#include "cc_ops/common/hashing.h"

namespace het {
namespace {

// Double hashing (Kirsch and Mitzenmacher): probe j is h1 + j h2 from one
// 64-bit mix, salted apart from the shards' and the index's hashes.
template <typename Visit>
void Probes(int64_t key, uint64_t bits, Visit visit) {
  const uint64_t h = Mix64(static_cast<uint64_t>(key) ^ 0x2545f4914f6cdd1dULL);
  const uint64_t h1 = h & 0xffffffffULL;
  const uint64_t h2 = (h >> 32) | 1;  // odd: the probes never collapse onto one bit
  for (int j = 0; j < kSummaryProbes; ++j) visit((h1 + j * h2) % bits);
}

}  // namespace

int64_t KeySummaryWords(int64_t keys) {
  return keys <= 0 ? 0 : (keys * kSummaryBitsPerKey + 63) / 64;
}

void BuildKeySummary(const int64_t* keys, int64_t n, uint64_t* words) {
  const int64_t num_words = KeySummaryWords(n);
  std::fill(words, words + num_words, 0);
  const uint64_t bits = static_cast<uint64_t>(num_words) * 64;
  for (int64_t i = 0; i < n; ++i) {
    Probes(keys[i], bits, [&](uint64_t bit) { words[bit / 64] |= uint64_t{1} << (bit % 64); });
  }
}

void KeySummaryHolds(const uint64_t* words, int64_t num_words, const int64_t* keys, int64_t n,
                     bool* held) {
  if (num_words <= 0) {
    std::fill(held, held + n, false);
    return;
  }
  const uint64_t bits = static_cast<uint64_t>(num_words) * 64;
  for (int64_t i = 0; i < n; ++i) {
    bool all = true;
    Probes(keys[i], bits,
           [&](uint64_t bit) { all = all && ((words[bit / 64] >> (bit % 64)) & 1) != 0; });
    held[i] = all;
  }
}

}  // namespace het

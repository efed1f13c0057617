// What a rank shares of its cache for Herald's allocation (docs/herald.md):
// a Bloom filter of the cached keys. The allocation only counts how many of
// a sample's rows each rank holds, so a rare false "held" costs a sample at
// most a slightly worse placement, never a wrong read; at 10 bits a key a
// summary is 1.25 bytes a key instead of a key's 8, which lets every cached
// key be shared rather than only the most used ones (the rows every rank
// holds anyway).
#ifndef HET_TF_SCHEDULE_CORE_KEY_SUMMARY_H_
#define HET_TF_SCHEDULE_CORE_KEY_SUMMARY_H_

#include <cstdint>

namespace het {

// 10 bits a key and 7 probes: about 1% false positives.
constexpr int64_t kSummaryBitsPerKey = 10;
constexpr int kSummaryProbes = 7;

// The 64-bit words a summary of `keys` keys takes (0 for none).
int64_t KeySummaryWords(int64_t keys);

// Writes the summary of keys[0, n) to words[0, KeySummaryWords(n)).
void BuildKeySummary(const int64_t* keys, int64_t n, uint64_t* words);

// held[i]: whether keys[i] may be in the summary of `num_words` words (an
// empty summary holds nothing). False only for keys the summary was not
// built from.
void KeySummaryHolds(const uint64_t* words, int64_t num_words, const int64_t* keys, int64_t n,
                     bool* held);

}  // namespace het

#endif  // HET_TF_SCHEDULE_CORE_KEY_SUMMARY_H_

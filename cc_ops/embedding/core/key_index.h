// An open-addressing map from int64 keys to uint32 slot numbers.
//
// std::unordered_map costs about 40 bytes of node and bucket per entry, which
// would dominate a 16-float row; this index costs 12 bytes per bucket at a
// load factor of at most 0.75. Every int64 is a valid key, so emptiness is
// marked in the value array instead of with a reserved key.
#ifndef HET_TF_EMBEDDING_CORE_KEY_INDEX_H_
#define HET_TF_EMBEDDING_CORE_KEY_INDEX_H_

#include <algorithm>
#include <cstdint>
#include <vector>

#include "cc_ops/common/hashing.h"

namespace het {

// How many keys ahead batch loops start loading what they will touch.
constexpr int kHintAhead = 8;

class KeyIndex {
 public:
  static constexpr uint32_t kAbsent = 0xffffffffu;

  explicit KeyIndex(size_t expected = 0) { Reserve(expected); }

  size_t size() const { return size_; }
  size_t MemoryBytes() const {
    return keys_.capacity() * sizeof(int64_t) + values_.capacity() * sizeof(uint32_t);
  }

  void Reserve(size_t expected) {
    const size_t want = BucketsFor(expected);
    if (want > keys_.size()) Rehash(want);
  }

  // Empties the index, sized for `expected` keys: a scratch index reused
  // batch after batch shrinks back when it grew far beyond them, so that it
  // stays within the processor's caches.
  void Reset(size_t expected) {
    const size_t want = BucketsFor(expected);
    if (want > keys_.size() || want * 4 < keys_.size()) {
      // Emptied first, the rehash has nothing to move and gives arrays of
      // exactly `want` buckets (clearing alone would keep the capacity).
      keys_.clear();
      values_.clear();
      Rehash(want);
    } else {
      Clear();
    }
  }

  uint32_t Find(int64_t key) const {
    if (size_ == 0) return kAbsent;
    for (size_t i = Home(key);; i = (i + 1) & mask_) {
      if (values_[i] == kAbsent) return kAbsent;
      if (keys_[i] == key) return values_[i];
    }
  }

  // Starts loading key's home bucket, for a Find or Insert soon after:
  // batch loops call it some keys ahead, so lookups overlap their misses.
  void HintLoad(int64_t key) const {
    const size_t i = Home(key);
    __builtin_prefetch(&keys_[i]);
    __builtin_prefetch(&values_[i]);
  }

  // Inserts key -> value unless the key is present; returns the stored value.
  uint32_t Insert(int64_t key, uint32_t value) {
    if ((size_ + 1) * 4 > keys_.size() * 3) Rehash(keys_.size() * 2);
    for (size_t i = Home(key);; i = (i + 1) & mask_) {
      if (values_[i] == kAbsent) {
        keys_[i] = key;
        values_[i] = value;
        ++size_;
        return value;
      }
      if (keys_[i] == key) return values_[i];
    }
  }

  // Inserts or overwrites.
  void Set(int64_t key, uint32_t value) {
    if (size_ > 0) {
      for (size_t i = Home(key); values_[i] != kAbsent; i = (i + 1) & mask_) {
        if (keys_[i] == key) {
          values_[i] = value;
          return;
        }
      }
    }
    Insert(key, value);
  }

  // Backward-shift deletion keeps probe chains intact without tombstones.
  bool Erase(int64_t key) {
    if (size_ == 0) return false;
    size_t i = Home(key);
    while (true) {
      if (values_[i] == kAbsent) return false;
      if (keys_[i] == key) break;
      i = (i + 1) & mask_;
    }
    size_t hole = i;
    for (size_t j = (hole + 1) & mask_; values_[j] != kAbsent; j = (j + 1) & mask_) {
      size_t home = Home(keys_[j]);
      // Move j into the hole unless its home lies cyclically in (hole, j].
      bool home_after_hole = hole <= j ? (hole < home && home <= j) : (hole < home || home <= j);
      if (!home_after_hole) {
        keys_[hole] = keys_[j];
        values_[hole] = values_[j];
        hole = j;
      }
    }
    values_[hole] = kAbsent;
    --size_;
    return true;
  }

  void Clear() {
    std::fill(values_.begin(), values_.end(), kAbsent);
    size_ = 0;
  }

 private:
  // Buckets for `expected` keys at a load factor of at most 0.75.
  static size_t BucketsFor(size_t expected) {
    size_t want = 16;
    while (want * 3 < expected * 4 + 4) want <<= 1;
    return want;
  }
  size_t Home(int64_t key) const { return Mix64(static_cast<uint64_t>(key)) & mask_; }

  void Rehash(size_t buckets) {
    std::vector<int64_t> old_keys;
    std::vector<uint32_t> old_values;
    old_keys.swap(keys_);
    old_values.swap(values_);
    keys_.assign(buckets, 0);
    values_.assign(buckets, kAbsent);
    mask_ = buckets - 1;
    size_ = 0;
    for (size_t i = 0; i < old_keys.size(); ++i) {
      if (old_values[i] != kAbsent) Insert(old_keys[i], old_values[i]);
    }
  }

  std::vector<int64_t> keys_;
  std::vector<uint32_t> values_;
  size_t mask_ = 0;
  size_t size_ = 0;
};

}  // namespace het

#endif  // HET_TF_EMBEDDING_CORE_KEY_INDEX_H_

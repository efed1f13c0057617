// Key mixing shared by the hash index, the shard placement and the row
// initializer. Placement must never depend on anything but the key, so that
// a table can be resharded by re-hashing its exported keys.
#ifndef HET_TF_COMMON_HASHING_H_
#define HET_TF_COMMON_HASHING_H_

#include <cstdint>

namespace het {

// SplitMix64's finalizer: a bijection on 64 bits with full avalanche.
inline uint64_t Mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Salted differently from the in-shard index so that all keys of one shard
// do not land in the same region of that shard's hash index.
inline int ShardOf(int64_t key, int num_shards) {
  return static_cast<int>(Mix64(static_cast<uint64_t>(key) ^ 0x5bd1e9955bd1e995ULL) %
                          static_cast<uint64_t>(num_shards));
}

}  // namespace het

#endif  // HET_TF_COMMON_HASHING_H_

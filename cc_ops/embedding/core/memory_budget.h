// Limits that keep a bad setting from taking the machine down: a cache is
// allocated in full when it is made, and a row's size comes from `dim`.
#ifndef HET_TF_EMBEDDING_CORE_MEMORY_BUDGET_H_
#define HET_TF_EMBEDDING_CORE_MEMORY_BUDGET_H_

#include <cstdint>
#include <string>

#include "cc_ops/common/status.h"

namespace het {

// The widest row a table or cache accepts.
constexpr int64_t kMaxDim = int64_t{1} << 16;

// Clamps an int64 attribute into an int dim that validation then refuses,
// rather than letting a cast wrap 2^32 + 3 into 3.
inline int ClampDim(int64_t dim) {
  return static_cast<int>(dim > kMaxDim ? kMaxDim + 1 : (dim < 0 ? -1 : dim));
}

// InvalidArgument naming `owner` unless 1 <= dim <= kMaxDim.
Status CheckDim(const std::string& owner, int dim);

// Physical memory of this machine, in bytes.
uint64_t PhysicalMemoryBytes();

// ResourceExhausted naming `owner` when `bytes` exceed physical memory.
Status CheckFitsInMemory(const std::string& owner, const std::string& what, double bytes);

}  // namespace het

#endif  // HET_TF_EMBEDDING_CORE_MEMORY_BUDGET_H_

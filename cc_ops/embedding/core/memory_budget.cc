#include "cc_ops/embedding/core/memory_budget.h"

#include <unistd.h>

namespace het {

Status CheckDim(const std::string& owner, int dim) {
  if (dim >= 1 && dim <= kMaxDim) return Status::Ok();
  return Status::InvalidArgument(owner + ": dim must be between 1 and " + std::to_string(kMaxDim) +
                                 ", got " + std::to_string(dim));
}

uint64_t PhysicalMemoryBytes() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_size = sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page_size <= 0) return UINT64_MAX;  // unknown: no limit
  return static_cast<uint64_t>(pages) * static_cast<uint64_t>(page_size);
}

Status CheckFitsInMemory(const std::string& owner, const std::string& what, double bytes) {
  const uint64_t memory = PhysicalMemoryBytes();
  if (bytes <= static_cast<double>(memory)) return Status::Ok();
  return Status::ResourceExhausted(owner + ": " + what + " would take " +
                                   std::to_string(static_cast<uint64_t>(bytes / (1 << 20))) +
                                   " MiB, more than this machine's " +
                                   std::to_string(memory >> 20) + " MiB of memory");
}

}  // namespace het

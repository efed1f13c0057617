#include "cc_ops/embedding/core/key_checks.h"

namespace het {

Status CheckKeys(const std::string& table, int64_t vocabulary_size, const int64_t* keys,
                 int64_t n) {
  if (vocabulary_size < 0) return Status::Ok();
  for (int64_t i = 0; i < n; ++i) {
    if (keys[i] < 0 || keys[i] >= vocabulary_size) {
      return Status::InvalidArgument(TableLabel(table) + ": id " + std::to_string(keys[i]) +
                                     " is outside the vocabulary [0, " +
                                     std::to_string(vocabulary_size) + ")");
    }
  }
  return Status::Ok();
}

}  // namespace het

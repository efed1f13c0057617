// The check of ids against a table's vocabulary, shared by the shard and
// the worker cache (which checks a batch before anything is sent).
#ifndef HET_TF_EMBEDDING_CORE_KEY_CHECKS_H_
#define HET_TF_EMBEDDING_CORE_KEY_CHECKS_H_

#include <cstdint>
#include <string>

#include "cc_ops/common/status.h"

namespace het {

// Checks every key before anything is touched, so a bad batch changes nothing.
Status CheckKeys(const std::string& table, int64_t vocabulary_size, const int64_t* keys, int64_t n);

}  // namespace het

#endif  // HET_TF_EMBEDDING_CORE_KEY_CHECKS_H_

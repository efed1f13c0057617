#include "cc_ops/embedding/core/deduplicate.h"

#include <algorithm>

namespace het {

void Deduplicate(const int64_t* ids, int64_t n, size_t last_distinct, KeyIndex* scratch,
                 std::vector<int64_t>* keys, std::vector<int32_t>* inverse) {
  keys->clear();
  inverse->resize(static_cast<size_t>(n));
  scratch->Reset(std::min(static_cast<size_t>(n), last_distinct * 3 / 2 + 16));
  for (int64_t i = 0; i < n; ++i) {
    if (i + kHintAhead < n) scratch->HintLoad(ids[i + kHintAhead]);
    const uint32_t distinct = static_cast<uint32_t>(keys->size());
    const uint32_t place = scratch->Insert(ids[i], distinct);
    if (place == distinct) keys->push_back(ids[i]);
    (*inverse)[i] = static_cast<int32_t>(place);
  }
}

}  // namespace het

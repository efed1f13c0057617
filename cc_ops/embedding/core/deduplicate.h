// A batch's distinct ids, as a lookup and the lookahead's staging both take
// them: the two must agree, since a step takes its staged batch's
// deduplication in place of its own (StagedBatches::Next).
#ifndef HET_TF_EMBEDDING_CORE_DEDUPLICATE_H_
#define HET_TF_EMBEDDING_CORE_DEDUPLICATE_H_

#include <cstdint>
#include <vector>

#include "cc_ops/embedding/core/key_index.h"

namespace het {

// Writes the distinct values of n ids to `keys`, in order of first
// appearance, and each id's place among them to `inverse`. `scratch` is
// sized for about `last_distinct` (the last batch's count), not for every
// id: a batch repeats most of its ids, and an index of all of them would
// not stay in the processor's caches (it grows if a batch needs it).
void Deduplicate(const int64_t* ids, int64_t n, size_t last_distinct, KeyIndex* scratch,
                 std::vector<int64_t>* keys, std::vector<int32_t>* inverse);

}  // namespace het

#endif  // HET_TF_EMBEDDING_CORE_DEDUPLICATE_H_

// The state a new row starts with: its initializer's values (deterministic
// by key and seed, row_initializer.h) and the optimizer's initial slots. A
// table shard makes its new rows with it, and a worker cache rebuilds with
// it a row the shard made for it and sent only the clock of (a first
// touch moves no row: exchange_wire.h).
#ifndef HET_TF_EMBEDDING_CORE_INITIAL_STATE_H_
#define HET_TF_EMBEDDING_CORE_INITIAL_STATE_H_

#include <cstdint>

#include "cc_ops/embedding/core/row_initializer.h"
#include "cc_ops/embedding/core/sparse_optimizer.h"

namespace het {

// Writes key's initial state, StateWidth(optimizer.kind, dim) floats.
void MakeInitialState(const InitializerConfig& initializer, const OptimizerConfig& optimizer,
                      int dim, int64_t key, float* state);

// Names the initial states these settings make: the initializer's kind,
// parameters and seed, the optimizer's kind, and the bits of a few keys'
// states, so that two ends whose settings differ never take each other's
// states for their own. 0 (none) for the normal initializers: they call
// the C library's log and cos, whose last bit may differ between machines,
// so a worker's row could differ from its shard's; their rows come whole.
uint64_t InitialStateFingerprint(const InitializerConfig& initializer,
                                 const OptimizerConfig& optimizer, int dim);

}  // namespace het

#endif  // HET_TF_EMBEDDING_CORE_INITIAL_STATE_H_

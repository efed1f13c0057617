// Deterministic initial rows: element j of key k depends only on (seed, k, j),
// so a row is the same whichever shard creates it and however often a table
// is resharded, exported or rebuilt.
#ifndef HET_TF_EMBEDDING_CORE_ROW_INITIALIZER_H_
#define HET_TF_EMBEDDING_CORE_ROW_INITIALIZER_H_

#include <cstdint>
#include <string>

#include "cc_ops/common/status.h"

namespace het {

enum class InitializerKind { kUniform, kNormal, kTruncatedNormal, kConstant };

struct InitializerConfig {
  InitializerKind kind = InitializerKind::kUniform;
  // uniform: [a, b); normal and truncated normal: mean a, stddev b;
  // constant: every element a.
  float a = -0.05f;
  float b = 0.05f;
  int64_t seed = 0;
};

// Accepts "uniform", "normal", "truncated_normal", "constant" and "zeros".
Status ParseInitializerKind(const std::string& name, InitializerKind* kind);

void InitializeRow(const InitializerConfig& config, int64_t key, int dim, float* row);

}  // namespace het

#endif  // HET_TF_EMBEDDING_CORE_ROW_INITIALIZER_H_

#include "cc_ops/embedding/core/initial_state.h"

#include <cstring>
#include <vector>

#include "cc_ops/common/hashing.h"

namespace het {

void MakeInitialState(const InitializerConfig& initializer, const OptimizerConfig& optimizer,
                      int dim, int64_t key, float* state) {
  InitializeRow(initializer, key, dim, state);
  InitializeSlots(optimizer, dim, state + dim);
}

uint64_t InitialStateFingerprint(const InitializerConfig& initializer,
                                 const OptimizerConfig& optimizer, int dim) {
  if (initializer.kind != InitializerKind::kUniform &&
      initializer.kind != InitializerKind::kConstant) {
    return 0;
  }
  auto bits = [](float v) {
    uint32_t b;
    std::memcpy(&b, &v, sizeof(b));
    return b;
  };
  const int width = StateWidth(optimizer.kind, dim);
  std::vector<float> state(width);
  uint64_t h = Mix64(static_cast<uint64_t>(width) << 32 | static_cast<uint32_t>(dim));
  for (uint64_t field : {static_cast<uint64_t>(initializer.kind), uint64_t{bits(initializer.a)},
                         uint64_t{bits(initializer.b)}, static_cast<uint64_t>(initializer.seed),
                         static_cast<uint64_t>(optimizer.kind)}) {
    h = Mix64(h ^ field);
  }
  for (int64_t key : {int64_t{0}, int64_t{1}, int64_t{-7}, int64_t{1} << 40}) {
    MakeInitialState(initializer, optimizer, dim, key, state.data());
    for (float v : state) h = Mix64(h ^ bits(v));
  }
  return h == 0 ? 1 : h;
}

}  // namespace het

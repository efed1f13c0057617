#include "cc_ops/embedding/core/row_initializer.h"

#include <cmath>

#include "cc_ops/common/hashing.h"

namespace het {
namespace {

// Counter-based generator: draw n of element j of key k is a pure function.
double Uniform01(uint64_t stream, uint64_t counter) {
  uint64_t bits = Mix64(stream + Mix64(counter));
  return static_cast<double>(bits >> 11) * (1.0 / 9007199254740992.0);  // [0, 1)
}

double StandardNormal(uint64_t stream, uint64_t counter) {
  // Box-Muller with u1 in (0, 1] so that log never sees 0.
  double u1 = 1.0 - Uniform01(stream, 2 * counter);
  double u2 = Uniform01(stream, 2 * counter + 1);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

}  // namespace

Status ParseInitializerKind(const std::string& name, InitializerKind* kind) {
  if (name == "uniform" || name == "random_uniform") {
    *kind = InitializerKind::kUniform;
  } else if (name == "normal" || name == "random_normal") {
    *kind = InitializerKind::kNormal;
  } else if (name == "truncated_normal") {
    *kind = InitializerKind::kTruncatedNormal;
  } else if (name == "constant" || name == "zeros") {
    *kind = InitializerKind::kConstant;
  } else {
    return Status::InvalidArgument(
        "unknown initializer '" + name +
        "'; expected uniform, normal, truncated_normal, constant or zeros");
  }
  return Status::Ok();
}

void InitializeRow(const InitializerConfig& config, int64_t key, int dim, float* row) {
  const uint64_t stream = Mix64(static_cast<uint64_t>(config.seed) ^ 0x243f6a8885a308d3ULL) ^
                          Mix64(static_cast<uint64_t>(key));
  for (int j = 0; j < dim; ++j) {
    switch (config.kind) {
      case InitializerKind::kUniform:
        row[j] = static_cast<float>(config.a + (config.b - config.a) * Uniform01(stream, j));
        break;
      case InitializerKind::kNormal:
        row[j] = static_cast<float>(config.a + config.b * StandardNormal(stream, j));
        break;
      case InitializerKind::kTruncatedNormal: {
        // Redraw beyond two standard deviations, as tf.random.truncated_normal does.
        double z = StandardNormal(stream, j);
        for (uint64_t attempt = 1; std::fabs(z) > 2.0; ++attempt) {
          z = StandardNormal(stream, j + (attempt << 32));
        }
        row[j] = static_cast<float>(config.a + config.b * z);
        break;
      }
      case InitializerKind::kConstant:
        row[j] = config.a;
        break;
    }
  }
}

}  // namespace het

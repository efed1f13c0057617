#include "cc_ops/embedding/core/row_codec.h"

#include <cmath>
#include <cstring>

namespace het {
namespace {

uint32_t Bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof(u));
  return u;
}

float FromBits(uint32_t u) {
  float x;
  std::memcpy(&x, &u, sizeof(x));
  return x;
}

// The largest finite bfloat16 (0x7f7f) and float16.
constexpr uint32_t kBFloat16MaxBits = 0x7f7f0000u;
constexpr float kFloat16Max = 65504.0f;

uint16_t ToBFloat16(float x, bool toward_zero) {
  uint32_t u = Bits(x);
  if (std::isnan(x)) return static_cast<uint16_t>((u >> 16) | 0x0040);  // stays a NaN
  const uint32_t sign = u & 0x80000000u;
  uint32_t magnitude = u & 0x7fffffffu;
  if (!toward_zero) magnitude += 0x7fffu + ((magnitude >> 16) & 1);  // to nearest, ties to even
  if (magnitude > kBFloat16MaxBits + 0xffffu || std::isinf(x)) {
    magnitude = std::isinf(x) ? 0x7f800000u : kBFloat16MaxBits;
  }
  return static_cast<uint16_t>((sign | magnitude) >> 16);
}

float FromBFloat16(uint16_t h) { return FromBits(static_cast<uint32_t>(h) << 16); }

// float16 by hand (clang has no _Float16 on every target): to nearest,
// ties to even, subnormals included.
uint16_t ToFloat16(float x) {
  if (std::isfinite(x)) x = std::fmax(-kFloat16Max, std::fmin(kFloat16Max, x));
  const uint32_t u = Bits(x);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const uint32_t magnitude = u & 0x7fffffffu;
  if (magnitude > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);   // NaN
  if (magnitude == 0x7f800000u) return static_cast<uint16_t>(sign | 0x7c00u);  // infinity
  if (magnitude >= 0x38800000u) {           // a normal float16: 2^-14 and up
    uint32_t m = magnitude - (112u << 23);  // the exponent rebiased from 127 to 15
    m += 0xfffu + ((m >> 13) & 1u);
    return static_cast<uint16_t>(sign | (m >> 13));
  }
  // A subnormal one: a whole number of 2^-24, exact in float after scaling.
  const float units = std::nearbyint(FromBits(magnitude) * 16777216.0f);
  return static_cast<uint16_t>(sign | static_cast<uint32_t>(units));
}

float FromFloat16(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu, mantissa = h & 0x3ffu;
  if (exponent == 0) {
    const float value = std::ldexp(static_cast<float>(mantissa), -24);
    return sign != 0 ? -value : value;
  }
  if (exponent == 31) return FromBits(sign | 0x7f800000u | (mantissa << 13));
  return FromBits(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

// Column j of a row travels in float16 when it is a value under float16.
bool AsFloat16(RowType type, RowShape shape, int j) {
  return type == RowType::kFloat16 && j < shape.dim;
}

}  // namespace

Status ParseRowType(const std::string& name, RowType* type) {
  if (name == "float32") {
    *type = RowType::kFloat32;
  } else if (name == "bfloat16") {
    *type = RowType::kBFloat16;
  } else if (name == "float16") {
    *type = RowType::kFloat16;
  } else {
    return Status::InvalidArgument("unknown wire dtype '" + name +
                                   "'; expected float32, bfloat16 or float16");
  }
  return Status::Ok();
}

const char* RowTypeName(RowType type) {
  switch (type) {
    case RowType::kBFloat16:
      return "bfloat16";
    case RowType::kFloat16:
      return "float16";
    case RowType::kFloat32:
      break;
  }
  return "float32";
}

bool KnownRowType(uint32_t word) { return word <= static_cast<uint32_t>(RowType::kFloat16); }

void EncodeRows(RowType type, RowShape shape, const float* in, size_t rows, uint8_t* out) {
  const size_t n = rows * size_t(shape.width);
  if (type == RowType::kFloat32) {
    if (n > 0) std::memcpy(out, in, sizeof(float) * n);
    return;
  }
  for (size_t i = 0; i < n; ++i) {
    const int j = static_cast<int>(i % size_t(shape.width));
    const uint16_t h =
        AsFloat16(type, shape, j) ? ToFloat16(in[i]) : ToBFloat16(in[i], /*toward_zero=*/false);
    std::memcpy(out + 2 * i, &h, sizeof(h));
  }
}

void DecodeRows(RowType type, RowShape shape, const uint8_t* in, size_t rows, float* out) {
  const size_t n = rows * size_t(shape.width);
  if (type == RowType::kFloat32) {
    if (n > 0) std::memcpy(out, in, sizeof(float) * n);
    return;
  }
  for (size_t i = 0; i < n; ++i) {
    const int j = static_cast<int>(i % size_t(shape.width));
    uint16_t h;
    std::memcpy(&h, in + 2 * i, sizeof(h));
    out[i] = AsFloat16(type, shape, j) ? FromFloat16(h) : FromBFloat16(h);
  }
}

bool RoundDelta(RowType type, RowShape shape, int non_negative, float* row) {
  if (type == RowType::kFloat32) return false;
  bool changed = false;
  const int lo = non_negative < 0 ? shape.width : shape.dim * (1 + non_negative);
  const int hi = non_negative < 0 ? shape.width : lo + shape.dim;
  for (int j = 0; j < shape.width; ++j) {
    const float rounded = AsFloat16(type, shape, j)
                              ? FromFloat16(ToFloat16(row[j]))
                              : FromBFloat16(ToBFloat16(row[j], /*toward_zero=*/j >= lo && j < hi));
    changed |= Bits(rounded) != Bits(row[j]);
    row[j] = rounded;
  }
  return changed;
}

}  // namespace het

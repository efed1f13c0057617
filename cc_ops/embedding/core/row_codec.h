// The type rows travel in between workers' caches and table shards
// (CacheConfig::wire_type): float32, or 16 bits a float. The shards keep
// float32 state; a 16-bit wire rounds what it sends, once, on the sender.
//
// A row's state is its dim values, then its optimizer's slots. bfloat16
// carries both. float16 carries the values (three more bits of precision
// than bfloat16) and the slots still in bfloat16: float16 tops out at
// 65,504, which Adagrad's and FTRL's sums of squared gradients pass, and
// Adam's second moment falls below its smallest normal, 6e-8.
//
// Rounding is to nearest, ties to even, and clamps to the largest finite
// value of the type (a value past it would turn to infinity, which a
// shard refuses). A delta's sum of squared gradients rounds toward zero,
// so what it leaves behind (the worker's residual, worker_cache.h) is never
// negative: a negative one would vanish at the next push, which clamps that
// part of a delta at 0 (TakeDelta).
#ifndef HET_TF_EMBEDDING_CORE_ROW_CODEC_H_
#define HET_TF_EMBEDDING_CORE_ROW_CODEC_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "cc_ops/common/status.h"

namespace het {

enum class RowType : uint32_t { kFloat32 = 0, kBFloat16 = 1, kFloat16 = 2 };

// Accepts "float32", "bfloat16" and "float16".
Status ParseRowType(const std::string& name, RowType* type);
const char* RowTypeName(RowType type);
// Whether `word` names a RowType (a message's header carries it).
bool KnownRowType(uint32_t word);
// Bytes a float takes on the wire.
inline size_t RowTypeBytes(RowType type) { return type == RowType::kFloat32 ? 4 : 2; }

// The shape of the rows a codec call covers: `width` floats a row, of which
// the first `dim` are values.
struct RowShape {
  int dim = 0;
  int width = 0;
};

// Encodes `rows` rows of floats into rows * width * RowTypeBytes(type)
// bytes at `out`, rounding as above.
void EncodeRows(RowType type, RowShape shape, const float* in, size_t rows, uint8_t* out);
// Decodes them back into floats (exact: every 16-bit value is a float).
void DecodeRows(RowType type, RowShape shape, const uint8_t* in, size_t rows, float* out);

// Rounds one row of a delta in place to what `type` carries (nothing for
// float32): values and slots to nearest, the slot `non_negative` (a sum or
// average of squared gradients, -1 for none) toward zero. Encoding the
// result is exact, so a round sent again is byte-identical. Returns whether
// any float changed.
bool RoundDelta(RowType type, RowShape shape, int non_negative, float* row);

}  // namespace het

#endif  // HET_TF_EMBEDDING_CORE_ROW_CODEC_H_

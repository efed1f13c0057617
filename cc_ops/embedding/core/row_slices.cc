#include "cc_ops/embedding/core/row_slices.h"

#include <algorithm>

#include "cc_ops/embedding/core/sparse_optimizer.h"

namespace het {
namespace {

Status CheckPlaces(const std::string& label, const int32_t* at, int64_t n, int64_t count) {
  for (int64_t i = 0; i < n; ++i) {
    if (at[i] < 0 || at[i] >= count) {
      return Status::InvalidArgument(label + ": place " + std::to_string(i) + " is row " +
                                     std::to_string(at[i]) + ", outside the " +
                                     std::to_string(count) + " rows");
    }
  }
  return Status::Ok();
}

}  // namespace

Status ExpandRows(const std::string& label, const float* rows, int64_t count, int64_t dim,
                  const int32_t* at, int64_t n, float* out) {
  Status status = CheckPlaces(label, at, n, count);
  if (!status.ok()) return status;
  for (int64_t i = 0; i < n; ++i) {
    std::copy_n(rows + static_cast<int64_t>(at[i]) * dim, dim, out + i * dim);
  }
  return Status::Ok();
}

Status SumSlices(const std::string& label, const float* values, const int32_t* at, int64_t n,
                 int64_t dim, int64_t count, float* sums, bool* finite) {
  Status status = CheckPlaces(label, at, n, count);
  if (!status.ok()) return status;
  std::fill(sums, sums + count * dim, 0.0f);
  for (int64_t i = 0; i < n; ++i) {
    const float* slice = values + i * dim;
    float* sum = sums + static_cast<int64_t>(at[i]) * dim;
    for (int64_t d = 0; d < dim; ++d) sum[d] += slice[d];
  }
  *finite = AllFinite(sums, static_cast<size_t>(count * dim));
  return Status::Ok();
}

}  // namespace het

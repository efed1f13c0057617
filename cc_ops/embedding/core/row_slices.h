// Between a lookup's distinct rows and its ids: each id's row from the rows
// of the distinct ids, and each id's gradient slices summed back into one
// row, as a table's update takes them. TensorFlow's GatherV2 and
// UnsortedSegmentSum do the same, a row at a time through Eigen (about 10
// and 30 ns a row of 16 floats); plain loops take a few, and add in the
// same order, so the sums are the same to the bit.
#ifndef HET_TF_EMBEDDING_CORE_ROW_SLICES_H_
#define HET_TF_EMBEDDING_CORE_ROW_SLICES_H_

#include <cstdint>
#include <string>

#include "cc_ops/common/status.h"

namespace het {

// out[i] = rows[at[i]] for n places among `count` rows of `dim` floats.
// Every place is checked first: a bad one is refused naming the table by
// `label`, and nothing is written.
Status ExpandRows(const std::string& label, const float* rows, int64_t count, int64_t dim,
                  const int32_t* at, int64_t n, float* out);

// sums[j] = the sum of values[i] over the i with at[i] == j, added in order
// of i from zero (as UnsortedSegmentSum adds them), for n slices of `dim`
// floats into `count` rows; *finite tells whether every sum is (the common
// case a step checks for). Places are checked as ExpandRows checks them.
Status SumSlices(const std::string& label, const float* values, const int32_t* at, int64_t n,
                 int64_t dim, int64_t count, float* sums, bool* finite);

}  // namespace het

#endif  // HET_TF_EMBEDDING_CORE_ROW_SLICES_H_

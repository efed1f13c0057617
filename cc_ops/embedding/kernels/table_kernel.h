// What the table ops' kernels share: their base, a kernel over the op's
// TableShard, and the check of the num_slots attr of the ops that carry
// rows' optimizer slots.
#ifndef HET_TF_EMBEDDING_KERNELS_TABLE_KERNEL_H_
#define HET_TF_EMBEDDING_KERNELS_TABLE_KERNEL_H_

#include <cstdint>

#include "cc_ops/common/kernel_util.h"
#include "cc_ops/embedding/core/table_shard.h"
#include "tensorflow/core/framework/op_kernel.h"

namespace het {

using TableKernel = CoreKernel<TableShard>;

// An op's num_slots attr must be the table's (or 0, rows only, where allowed).
inline tensorflow::Status CheckNumSlots(const TableShard& table, int64_t num_slots,
                                        bool rows_only_ok) {
  if (num_slots == table.num_slots() || (rows_only_ok && num_slots == 0)) {
    return tensorflow::OkStatus();
  }
  return tensorflow::errors::InvalidArgument(TableLabel(table.config().name), " has ",
                                             table.num_slots(), " optimizer slots, not ",
                                             num_slots);
}

}  // namespace het

#endif  // HET_TF_EMBEDDING_KERNELS_TABLE_KERNEL_H_

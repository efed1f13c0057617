// What the table ops' kernels share: their base, a kernel over the op's
// TableShard, and the check of the num_slots attr of the ops that carry
// rows' optimizer slots.
#ifndef HET_TF_EMBEDDING_KERNELS_TABLE_KERNEL_H_
#define HET_TF_EMBEDDING_KERNELS_TABLE_KERNEL_H_

#include <cstdint>

#include "cc_ops/common/kernel_util.h"
#include "cc_ops/common/tf_status.h"
#include "cc_ops/embedding/core/exchange_wire.h"
#include "cc_ops/embedding/core/table_shard.h"
#include "tensorflow/core/framework/op_kernel.h"

namespace het {

using TableKernel = CoreKernel<TableShard>;

// The wire version a worker's op carries (its wire_version attr), checked
// against this build's before the op touches the table.
class WireVersion {
 public:
  explicit WireVersion(tensorflow::OpKernelConstruction* ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("wire_version", &version_));
  }
  tensorflow::Status Check(const TableShard& table) const {
    return ToTf(wire::CheckVersion(table.config().name, version_));
  }

 private:
  int64_t version_ = 0;
};

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

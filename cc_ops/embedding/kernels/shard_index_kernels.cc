// Kernels that need no table: the shard of each key, and the TensorFlow
// version the library was built against.
#include <limits>
#include <string>

#include "cc_ops/common/build_tag.h"
#include "cc_ops/common/hashing.h"
#include "cc_ops/common/kernel_util.h"
#include "cc_ops/common/tf_status.h"
#include "cc_ops/embedding/core/key_checks.h"
#include "tensorflow/core/framework/op_kernel.h"

namespace het {

class HetShardIndexOp : public OpKernel {
 public:
  explicit HetShardIndexOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("num_shards", &num_shards_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("vocabulary_size", &vocabulary_size_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("table_name", &table_name_));
    // Shard indices are int32 outputs; a wider count would wrap (to 0: a
    // division by zero).
    OP_REQUIRES(
        ctx, num_shards_ <= std::numeric_limits<int32_t>::max(),
        tensorflow::errors::InvalidArgument(
            "table '", table_name_, "': num_shards must be at most 2^31-1, got ", num_shards_));
  }
  void Compute(OpKernelContext* ctx) override {
    const Tensor& keys = ctx->input(0);
    OP_REQUIRES_OK(ctx, ToTf(CheckKeys(table_name_, vocabulary_size_, keys.flat<int64_t>().data(),
                                       keys.NumElements())));
    Tensor* shards = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, keys.shape(), &shards));
    auto in = keys.flat<int64_t>();
    auto out = shards->flat<int32_t>();
    for (int64_t i = 0; i < in.size(); ++i) out(i) = ShardOf(in(i), static_cast<int>(num_shards_));
  }

 private:
  int64_t num_shards_, vocabulary_size_;
  std::string table_name_;
};

class HetBuildInfoOp : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext* ctx) override {
    Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({}), &out));
    out->scalar<tensorflow::tstring>()() = BuiltForTensorflow();
  }
};

HET_CPU_KERNEL("HetShardIndex", HetShardIndexOp);
HET_CPU_KERNEL("HetBuildInfo", HetBuildInfoOp);

}  // namespace het

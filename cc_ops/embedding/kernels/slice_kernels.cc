// The kernels of slice_ops.cc: thin shells over core/deduplicate.h and
// core/row_slices.h.
#include <atomic>
#include <limits>
#include <string>
#include <vector>

#include "cc_ops/common/kernel_util.h"
#include "cc_ops/common/tf_status.h"
#include "cc_ops/embedding/core/deduplicate.h"
#include "cc_ops/embedding/core/row_slices.h"
#include "tensorflow/core/framework/op_kernel.h"

namespace het {

class SliceKernel : public OpKernel {
 public:
  explicit SliceKernel(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("label", &label_));
  }

 protected:
  std::string label_;
};

class HetUniqueOp : public SliceKernel {
 public:
  using SliceKernel::SliceKernel;
  void Compute(OpKernelContext* ctx) override {
    const Tensor& ids = ctx->input(0);
    const int64_t n = ids.NumElements();
    OP_REQUIRES(
        ctx, n <= std::numeric_limits<int32_t>::max(),
        tensorflow::errors::InvalidArgument(label_, ": ", n, " ids in one lookup; at most 2^31-1"));
    // Each thread's own scratch, reset by every call: concurrent steps
    // may run this kernel at once.
    thread_local KeyIndex seen;
    thread_local std::vector<int64_t> keys;
    thread_local std::vector<int32_t> inverse;
    Deduplicate(ids.flat<int64_t>().data(), n, last_distinct_.load(std::memory_order_relaxed),
                &seen, &keys, &inverse);
    last_distinct_.store(keys.size(), std::memory_order_relaxed);
    Tensor *unique = nullptr, *places = nullptr;
    const int64_t distinct = static_cast<int64_t>(keys.size());
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({distinct}), &unique));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, ids.shape(), &places));
    std::copy(keys.begin(), keys.end(), unique->flat<int64_t>().data());
    std::copy(inverse.begin(), inverse.end(), places->flat<int32_t>().data());
  }

 private:
  // The last call's distinct ids: the next batch's likely count.
  std::atomic<size_t> last_distinct_{0};
};

class HetExpandRowsOp : public SliceKernel {
 public:
  using SliceKernel::SliceKernel;
  void Compute(OpKernelContext* ctx) override {
    const Tensor& rows = ctx->input(0);
    const Tensor& at = ctx->input(1);
    OP_REQUIRES(ctx, rows.dims() == 2,
                tensorflow::errors::InvalidArgument(label_, ": rows must be a matrix, got ",
                                                    rows.shape().DebugString()));
    // The rows add a dimension, past which TensorShape would abort.
    OP_REQUIRES(ctx, at.dims() < TensorShape::MaxDimensions(),
                tensorflow::errors::InvalidArgument(label_, ": places of ", at.dims(),
                                                    " dimensions; at most ",
                                                    TensorShape::MaxDimensions() - 1));
    TensorShape shape = at.shape();
    shape.AddDim(rows.dim_size(1));
    Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, shape, &out));
    OP_REQUIRES_OK(ctx, ToTf(ExpandRows(label_, rows.flat<float>().data(), rows.dim_size(0),
                                        rows.dim_size(1), at.flat<int32_t>().data(),
                                        at.NumElements(), out->flat<float>().data())));
  }
};

class HetSumSlicesOp : public SliceKernel {
 public:
  using SliceKernel::SliceKernel;
  void Compute(OpKernelContext* ctx) override {
    const Tensor& values = ctx->input(0);
    const Tensor& at = ctx->input(1);
    const Tensor& rows = ctx->input(2);
    OP_REQUIRES(ctx,
                values.dims() == 2 && at.dims() == 1 && rows.dims() == 0 &&
                    at.dim_size(0) == values.dim_size(0),
                tensorflow::errors::InvalidArgument(
                    label_, ": slices ", values.shape().DebugString(), " with places ",
                    at.shape().DebugString(), " into rows ", rows.shape().DebugString(),
                    "; give each slice a place, and the rows a scalar count"));
    const int32_t count = rows.scalar<int32_t>()();
    OP_REQUIRES(ctx, count >= 0,
                tensorflow::errors::InvalidArgument(label_, ": a count of ", count, " rows"));
    const int64_t n = values.dim_size(0), dim = values.dim_size(1);
    Tensor *sums = nullptr, *finite = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({count, dim}), &sums));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, TensorShape({}), &finite));
    OP_REQUIRES_OK(
        ctx, ToTf(SumSlices(label_, values.flat<float>().data(), at.flat<int32_t>().data(), n, dim,
                            count, sums->flat<float>().data(), &finite->scalar<bool>()())));
  }
};

HET_CPU_KERNEL("HetUnique", HetUniqueOp);
HET_CPU_KERNEL("HetExpandRows", HetExpandRowsOp);
HET_CPU_KERNEL("HetSumSlices", HetSumSlicesOp);

}  // namespace het

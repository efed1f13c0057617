// Thin adapters from Herald's allocation ops to the plain-C++ schedule core:
// HetAssignSamples, and the cache summaries HetKeySummary and
// HetKeySummaryHolds.
#include "cc_ops/common/kernel_util.h"
#include "cc_ops/common/tf_status.h"
#include "cc_ops/schedule/core/key_summary.h"
#include "cc_ops/schedule/core/sample_assignment.h"
#include "tensorflow/core/framework/op_kernel.h"

namespace het {
namespace {

class HetAssignSamplesOp : public OpKernel {
 public:
  explicit HetAssignSamplesOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("stay_bonus", &stay_bonus_));
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& scores = ctx->input(0);
    const Tensor& sizes = ctx->input(1);
    OP_REQUIRES(ctx, scores.dims() == 2 && sizes.dims() == 1,
                tensorflow::errors::InvalidArgument(
                    "sample assignment: scores must be [samples, workers] and sizes [workers]"));
    OP_REQUIRES(
        ctx, scores.dim_size(1) == sizes.dim_size(0) && sizes.dim_size(0) > 0,
        tensorflow::errors::InvalidArgument("sample assignment: scores for ", scores.dim_size(1),
                                            " workers, sizes for ", sizes.dim_size(0)));
    Tensor* workers = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({scores.dim_size(0)}), &workers));
    OP_REQUIRES_OK(
        ctx, ToTf(AssignSamples(scores.flat<int32_t>().data(), scores.dim_size(0),
                                static_cast<int>(sizes.dim_size(0)), sizes.flat<int64_t>().data(),
                                stay_bonus_, workers->flat<int32_t>().data())));
  }

 private:
  int32_t stay_bonus_ = 0;
};

class HetKeySummaryOp : public OpKernel {
 public:
  using OpKernel::OpKernel;

  void Compute(OpKernelContext* ctx) override {
    const Tensor& keys = ctx->input(0);
    OP_REQUIRES(ctx, keys.dims() == 1,
                tensorflow::errors::InvalidArgument("cache summary: keys must be a vector, got ",
                                                    keys.shape().DebugString()));
    Tensor* summary = nullptr;
    OP_REQUIRES_OK(
        ctx, ctx->allocate_output(0, TensorShape({KeySummaryWords(keys.dim_size(0))}), &summary));
    BuildKeySummary(keys.flat<int64_t>().data(), keys.dim_size(0),
                    reinterpret_cast<uint64_t*>(summary->flat<int64_t>().data()));
  }
};

class HetKeySummaryHoldsOp : public OpKernel {
 public:
  using OpKernel::OpKernel;

  void Compute(OpKernelContext* ctx) override {
    const Tensor& summary = ctx->input(0);
    const Tensor& keys = ctx->input(1);
    OP_REQUIRES(ctx, summary.dims() == 1,
                tensorflow::errors::InvalidArgument("cache summary: the summary must be a vector "
                                                    "of words, got ",
                                                    summary.shape().DebugString()));
    Tensor* held = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, keys.shape(), &held));
    KeySummaryHolds(reinterpret_cast<const uint64_t*>(summary.flat<int64_t>().data()),
                    summary.dim_size(0), keys.flat<int64_t>().data(), keys.NumElements(),
                    held->flat<bool>().data());
  }
};

}  // namespace

HET_CPU_KERNEL("HetAssignSamples", HetAssignSamplesOp);
HET_CPU_KERNEL("HetKeySummary", HetKeySummaryOp);
HET_CPU_KERNEL("HetKeySummaryHolds", HetKeySummaryHoldsOp);

}  // namespace het

// Kernels of the profiling ops over the core's AccessCounter.
#include <string>
#include <vector>

#include "cc_ops/common/kernel_util.h"
#include "cc_ops/common/tf_status.h"
#include "cc_ops/embedding/core/access_counter.h"

namespace het {

namespace {

class HetAccessCounterOp : public CoreResourceOp<AccessCounter, AccessCounterConfig> {
 public:
  explicit HetAccessCounterOp(OpKernelConstruction* ctx) : CoreResourceOp(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("table_name", &config_.table_name));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("vocabulary_size", &config_.vocabulary_size));
  }

 private:
  tensorflow::Status Mismatch(const AccessCounterConfig& have) const override {
    if (have.vocabulary_size == config_.vocabulary_size) return tensorflow::OkStatus();
    return tensorflow::errors::InvalidArgument(
        "the access counts of ", TableLabel(config_.table_name),
        " already exist on this device with vocabulary_size ", have.vocabulary_size, "; asked for ",
        config_.vocabulary_size);
  }
};

class HetCountAccessesOp : public CoreKernel<AccessCounter> {
 public:
  using CoreKernel::CoreKernel;
  void Run(OpKernelContext* ctx, AccessCounter& counter) override {
    const Tensor& ids = ctx->input(1);
    OP_REQUIRES_OK(ctx, ToTf(counter.Add(ids.flat<int64_t>().data(), ids.NumElements())));
  }
};

class HetHottestKeysOp : public CoreKernel<AccessCounter> {
 public:
  using CoreKernel::CoreKernel;
  void Run(OpKernelContext* ctx, AccessCounter& counter) override {
    int64_t k = 0;
    OP_REQUIRES_OK(ctx, ReadScalar(counter.table_name(), "k", ctx->input(1), &k));
    OP_REQUIRES(ctx, k >= 0,
                tensorflow::errors::InvalidArgument(TableLabel(counter.table_name()),
                                                    ": k must be >= 0, got ", k));
    std::vector<int64_t> keys, counts;
    counter.Hottest(k, &keys, &counts);
    OP_REQUIRES_OK(ctx, OutputVector(ctx, 0, keys));
    OP_REQUIRES_OK(ctx, OutputVector(ctx, 1, counts));
    OP_REQUIRES_OK(ctx, OutputScalar(ctx, 2, counter.total()));
    OP_REQUIRES_OK(ctx, OutputScalar(ctx, 3, counter.distinct()));
  }
};

}  // namespace

HET_CPU_KERNEL("HetAccessCounter", HetAccessCounterOp);
HET_CPU_KERNEL("HetCountAccesses", HetCountAccessesOp);
HET_CPU_KERNEL("HetHottestKeys", HetHottestKeysOp);

}  // namespace het

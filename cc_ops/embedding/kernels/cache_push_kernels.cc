// Thin adapters from the cache ops of an update to het::WorkerCache: the
// local step (Accumulate), the acknowledgement of a push (AckPush) and the
// flush.
#include <algorithm>
#include <vector>

#include "cc_ops/common/kernel_util.h"
#include "cc_ops/common/tf_status.h"
#include "cc_ops/embedding/core/worker_cache.h"
#include "tensorflow/core/framework/op_kernel.h"

namespace het {

using CacheKernel = CoreKernel<WorkerCache>;

namespace {

// What the round's push carries to each shard (HetTablePushDeltas' sender):
// a row per shard of worker id, generation, sequence and epoch. Ids travel
// as int64; they are 64 bits all the same.
tensorflow::Status OutputSenders(OpKernelContext* ctx, int index,
                                 const std::vector<Sender>& senders) {
  const int64_t shards = static_cast<int64_t>(senders.size());
  Tensor* out = nullptr;
  TF_RETURN_IF_ERROR(ctx->allocate_output(index, TensorShape({shards, 4}), &out));
  auto m = out->matrix<int64_t>();
  for (int64_t s = 0; s < shards; ++s) {
    const Sender& sender = senders[s];
    m(s, 0) = static_cast<int64_t>(sender.worker);
    m(s, 1) = static_cast<int64_t>(sender.generation);
    m(s, 2) = sender.sequence;
    m(s, 3) = sender.epoch;
  }
  return tensorflow::OkStatus();
}

tensorflow::Status OutputPushes(OpKernelContext* ctx, const Pushes& p, const WorkerCache& cache,
                                const std::vector<Sender>& senders) {
  TF_RETURN_IF_ERROR(OutputVector(ctx, 0, p.keys));
  TF_RETURN_IF_ERROR(OutputVector(ctx, 1, p.deltas, cache.width()));
  TF_RETURN_IF_ERROR(OutputVector(ctx, 2, p.counts));
  TF_RETURN_IF_ERROR(OutputVector(ctx, 3, p.base_clocks));
  TF_RETURN_IF_ERROR(OutputScalar(ctx, 4, p.evicted));
  return OutputSenders(ctx, 5, senders);
}

}  // namespace

class HetCacheAccumulateOp : public CacheKernel {
 public:
  using CacheKernel::CacheKernel;
  void Run(OpKernelContext* ctx, WorkerCache& cache) override {
    const Tensor& keys = ctx->input(1);
    const int64_t n = keys.NumElements();
    const std::string& name = cache.config().table_name;
    OP_REQUIRES_OK(ctx, CheckVector(name, "keys", keys));
    OP_REQUIRES_OK(ctx, CheckShape(name, "gradients", ctx->input(2), n, cache.config().dim));
    float learning_rate;
    OP_REQUIRES_OK(ctx, ReadScalar(name, "learning rate", ctx->input(3), &learning_rate));
    Pushes due;
    std::vector<Sender> senders;
    std::vector<int64_t> uncached;
    OP_REQUIRES_OK(ctx, ToTf(cache.Accumulate(keys.flat<int64_t>().data(), n,
                                              ctx->input(2).flat<float>().data(), learning_rate,
                                              &due, &senders, &uncached)));
    OP_REQUIRES_OK(ctx, OutputPushes(ctx, due, cache, senders));
    OP_REQUIRES_OK(ctx, OutputVector(ctx, 6, uncached));
  }
};

class HetCacheAckPushOp : public CacheKernel {
 public:
  using CacheKernel::CacheKernel;
  void Run(OpKernelContext* ctx, WorkerCache& cache) override {
    const std::string& name = cache.config().table_name;
    const int64_t n = ctx->input(1).NumElements();
    OP_REQUIRES_OK(ctx, CheckVector(name, "pushed keys", ctx->input(1)));
    OP_REQUIRES_OK(ctx, CheckShape(name, "pushed counts", ctx->input(2), n, 0));
    // Clocks [m] and states [m - lean, width] are the shards' answer for the
    // m keys still cached; anything else (an empty vector of states)
    // acknowledges without taking states.
    const bool with_rows = ctx->input(3).dims() == 2;
    const int64_t m = with_rows ? ctx->input(4).NumElements() : 0;
    const bool with_lean = ctx->input(6).NumElements() > 0;
    std::vector<uint8_t> lean;
    if (with_rows) {
      OP_REQUIRES_OK(ctx, CheckShape(name, "pushed clocks", ctx->input(4), m, 0));
      if (with_lean) {
        OP_REQUIRES_OK(ctx, CheckShape(name, "lean pushes", ctx->input(6), m, 0));
        const auto flags = ctx->input(6).flat<bool>();
        lean.assign(flags.data(), flags.data() + m);
      }
      const int64_t whole = m - std::count(lean.begin(), lean.end(), uint8_t{1});
      OP_REQUIRES_OK(ctx, CheckShape(name, "pushed states", ctx->input(3), whole, cache.width()));
    }
    const bool with_epochs = ctx->input(5).NumElements() > 0;
    if (with_epochs) {
      OP_REQUIRES_OK(
          ctx, CheckShape(name, "shards' epochs", ctx->input(5), cache.config().num_shards, 0));
    }
    OP_REQUIRES_OK(ctx, CheckVector(name, "refused keys", ctx->input(7)));
    const auto refused = ctx->input(7).flat<int64_t>();
    OP_REQUIRES_OK(ctx,
                   ToTf(cache.AckPush(ctx->input(1).flat<int64_t>().data(), n,
                                      ctx->input(2).flat<int64_t>().data(),
                                      with_rows ? ctx->input(3).flat<float>().data() : nullptr,
                                      with_rows ? ctx->input(4).flat<int64_t>().data() : nullptr, m,
                                      with_epochs ? ctx->input(5).flat<int64_t>().data() : nullptr,
                                      lean.empty() ? nullptr : lean.data(),
                                      {refused.data(), refused.data() + refused.size()})));
  }
};

class HetCacheFlushOp : public CacheKernel {
 public:
  using CacheKernel::CacheKernel;
  void Run(OpKernelContext* ctx, WorkerCache& cache) override {
    Pushes pending;
    std::vector<Sender> senders;
    cache.Flush(&pending, &senders);
    OP_REQUIRES_OK(ctx, OutputPushes(ctx, pending, cache, senders));
  }
};

HET_CPU_KERNEL("HetCacheAccumulate", HetCacheAccumulateOp);
HET_CPU_KERNEL("HetCacheAckPush", HetCacheAckPushOp);
HET_CPU_KERNEL("HetCacheFlush", HetCacheFlushOp);

}  // namespace het

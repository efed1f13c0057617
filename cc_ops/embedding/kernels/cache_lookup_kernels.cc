// Thin adapters from the cache ops of a lookup to het::WorkerCache: the
// checked lookup's halves (Prepare, Complete), the exchange's
// (BeginExchange, EndExchange) and the lookahead's (Stage, BeginPrefetch,
// EndPrefetch).
#include <string>
#include <vector>

#include "cc_ops/common/kernel_util.h"
#include "cc_ops/common/tf_status.h"
#include "cc_ops/embedding/core/worker_cache.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/platform/logging.h"

namespace het {

using CacheKernel = CoreKernel<WorkerCache>;

namespace {

// Outputs 0 and 1 of a lookup's first half: the unique keys, and where
// each id went, in the ids' shape.
tensorflow::Status OutputUnique(OpKernelContext* ctx, const Tensor& ids,
                                const std::vector<int64_t>& unique_keys,
                                const std::vector<int32_t>& inverse) {
  TF_RETURN_IF_ERROR(OutputVector(ctx, 0, unique_keys));
  Tensor* out = nullptr;
  TF_RETURN_IF_ERROR(ctx->allocate_output(1, ids.shape(), &out));
  std::copy(inverse.begin(), inverse.end(), out->flat<int32_t>().data());
  return tensorflow::OkStatus();
}

// Once per cache: rows that did not fit beside the batch's cached rows.
void WarnOnceOfPassThrough(WorkerCache& cache) {
  if (!cache.FirstPassThrough()) return;
  LOG(WARNING) << TableLabel(cache.table_name())
               << ": a training batch has more unique ids than the cache can hold ("
               << cache.config().capacity
               << " rows); the rows that do not fit pass through uncached, read from the shards "
                  "and their updates pushed in the same step (counted as passed_through). Raise "
                  "cache_capacity to cache them. This is logged once.";
}

}  // namespace

class HetCachePrepareOp : public CacheKernel {
 public:
  using CacheKernel::CacheKernel;
  void Run(OpKernelContext* ctx, WorkerCache& cache) override {
    const Tensor& ids = ctx->input(1);
    LookupPlan plan;
    OP_REQUIRES_OK(ctx, ToTf(cache.Prepare(ids.flat<int64_t>().data(), ids.NumElements(), &plan)));
    OP_REQUIRES_OK(ctx, OutputUnique(ctx, ids, plan.unique_keys, plan.inverse));
    OP_REQUIRES_OK(ctx, OutputVector(ctx, 2, plan.clocks));
    OP_REQUIRES_OK(ctx, OutputScalar(ctx, 3, plan.read_staleness));
  }
};

// A list output of one request per shard, after `first` other outputs.
tensorflow::Status CheckRequestOutputs(OpKernelContext* ctx, const WorkerCache& cache, int first) {
  if (ctx->num_outputs() == first + cache.config().num_shards) return tensorflow::OkStatus();
  return tensorflow::errors::InvalidArgument(
      TableLabel(cache.table_name()), ": the op asks for ", ctx->num_outputs() - first,
      " shards' requests, but the table has ", cache.config().num_shards);
}

tensorflow::Status OutputRequests(OpKernelContext* ctx, const ExchangePlan& plan, int first) {
  for (size_t s = 0; s < plan.requests.size(); ++s) {
    TF_RETURN_IF_ERROR(OutputVector(ctx, first + s, plan.requests[s]));
  }
  return tensorflow::OkStatus();
}

// Inputs 1 on of an exchange's second half: the unique keys it asked
// about, then each shard's answer, 4-byte aligned (copied into scratch if
// they are not). The keys point into the input tensor.
struct ExchangeAnswers {
  const int64_t* keys = nullptr;
  int64_t u = 0;
  std::vector<std::vector<uint8_t>> scratch;
  std::vector<const uint8_t*> data;
  std::vector<size_t> sizes;
  int shards() const { return static_cast<int>(data.size()); }
};

tensorflow::Status ReadAnswers(OpKernelContext* ctx, const WorkerCache& cache,
                               ExchangeAnswers* out) {
  const std::string& name = cache.config().table_name;
  const Tensor& keys = ctx->input(1);
  TF_RETURN_IF_ERROR(CheckVector(name, "unique keys", keys));
  out->keys = keys.flat<int64_t>().data();
  out->u = keys.NumElements();
  const int shards = ctx->num_inputs() - 2;
  out->scratch.resize(shards);
  out->data.resize(shards);
  out->sizes.resize(shards);
  for (int s = 0; s < shards; ++s) {
    const Tensor& answer = ctx->input(2 + s);
    TF_RETURN_IF_ERROR(CheckVector(name, "exchange answer", answer));
    out->data[s] = AlignedBytes(answer, &out->scratch[s]);
    out->sizes[s] = answer.NumElements();
  }
  return tensorflow::OkStatus();
}

class HetCacheBeginExchangeOp : public CacheKernel {
 public:
  explicit HetCacheBeginExchangeOp(OpKernelConstruction* ctx) : CacheKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("carry_updates", &carry_updates_));
  }
  void Run(OpKernelContext* ctx, WorkerCache& cache) override {
    const Tensor& ids = ctx->input(1);
    OP_REQUIRES_OK(ctx, CheckRequestOutputs(ctx, cache, 2));
    ExchangePlan plan;
    OP_REQUIRES_OK(ctx, ToTf(cache.BeginExchange(ids.flat<int64_t>().data(), ids.NumElements(),
                                                 &plan, carry_updates_)));
    OP_REQUIRES_OK(ctx, OutputUnique(ctx, ids, plan.unique_keys, plan.inverse));
    OP_REQUIRES_OK(ctx, OutputRequests(ctx, plan, 2));
  }

 private:
  bool carry_updates_ = true;
};

class HetCacheEndExchangeOp : public CacheKernel {
 public:
  using CacheKernel::CacheKernel;
  void Run(OpKernelContext* ctx, WorkerCache& cache) override {
    ExchangeAnswers a;
    OP_REQUIRES_OK(ctx, ReadAnswers(ctx, cache, &a));
    Tensor* rows = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({a.u, dim_}), &rows));
    OP_REQUIRES_OK(ctx, ToTf(cache.EndExchange(a.keys, a.u, a.data.data(), a.sizes.data(),
                                               a.shards(), rows->flat<float>().data())));
    WarnOnceOfPassThrough(cache);
  }
};

class HetCacheStageOp : public CacheKernel {
 public:
  using CacheKernel::CacheKernel;
  void Run(OpKernelContext* ctx, WorkerCache& cache) override {
    const Tensor& ids = ctx->input(1);
    OP_REQUIRES_OK(ctx, ToTf(cache.Stage(ids.flat<int64_t>().data(), ids.NumElements())));
  }
};

class HetCacheBeginPrefetchOp : public CacheKernel {
 public:
  using CacheKernel::CacheKernel;
  void Run(OpKernelContext* ctx, WorkerCache& cache) override {
    const Tensor& ids = ctx->input(1);
    OP_REQUIRES_OK(ctx, CheckRequestOutputs(ctx, cache, 1));
    ExchangePlan plan;
    OP_REQUIRES_OK(ctx,
                   ToTf(cache.BeginPrefetch(ids.flat<int64_t>().data(), ids.NumElements(), &plan)));
    OP_REQUIRES_OK(ctx, OutputVector(ctx, 0, plan.unique_keys));
    OP_REQUIRES_OK(ctx, OutputRequests(ctx, plan, 1));
  }
};

class HetCacheEndPrefetchOp : public CacheKernel {
 public:
  using CacheKernel::CacheKernel;
  void Run(OpKernelContext* ctx, WorkerCache& cache) override {
    ExchangeAnswers a;
    OP_REQUIRES_OK(ctx, ReadAnswers(ctx, cache, &a));
    OP_REQUIRES_OK(ctx,
                   ToTf(cache.EndPrefetch(a.keys, a.u, a.data.data(), a.sizes.data(), a.shards())));
  }
};

class HetCacheCompleteOp : public CacheKernel {
 public:
  explicit HetCacheCompleteOp(OpKernelConstruction* ctx) : CacheKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("training", &training_));
  }
  void Run(OpKernelContext* ctx, WorkerCache& cache) override {
    const std::string& name = cache.config().table_name;
    const Tensor& keys = ctx->input(1);
    const int64_t u = keys.NumElements();
    const int64_t m = ctx->input(2).NumElements();
    OP_REQUIRES_OK(ctx, CheckVector(name, "unique keys", keys));
    OP_REQUIRES_OK(ctx, CheckShape(name, "returned positions", ctx->input(2), m, 0));
    // Training answers carry whole states (values and slots), evaluation rows.
    OP_REQUIRES_OK(ctx, CheckShape(name, training_ ? "returned states" : "returned rows",
                                   ctx->input(3), m, training_ ? cache.width() : dim_));
    OP_REQUIRES_OK(ctx, CheckShape(name, "returned clocks", ctx->input(4), m, 0));
    const bool with_epochs = ctx->input(5).NumElements() > 0;
    if (with_epochs) {
      OP_REQUIRES_OK(
          ctx, CheckShape(name, "shards' epochs", ctx->input(5), cache.config().num_shards, 0));
    }
    Tensor* rows = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({u, dim_}), &rows));
    OP_REQUIRES_OK(ctx,
                   ToTf(cache.Complete(
                       keys.flat<int64_t>().data(), u, ctx->input(2).flat<int32_t>().data(), m,
                       ctx->input(3).flat<float>().data(), ctx->input(4).flat<int64_t>().data(),
                       training_, rows->flat<float>().data(),
                       with_epochs ? ctx->input(5).flat<int64_t>().data() : nullptr)));
    WarnOnceOfPassThrough(cache);
  }

 private:
  bool training_;
};

HET_CPU_KERNEL("HetCachePrepare", HetCachePrepareOp);
HET_CPU_KERNEL("HetCacheBeginExchange", HetCacheBeginExchangeOp);
HET_CPU_KERNEL("HetCacheEndExchange", HetCacheEndExchangeOp);
HET_CPU_KERNEL("HetCacheStage", HetCacheStageOp);
HET_CPU_KERNEL("HetCacheBeginPrefetch", HetCacheBeginPrefetchOp);
HET_CPU_KERNEL("HetCacheEndPrefetch", HetCacheEndPrefetchOp);
HET_CPU_KERNEL("HetCacheComplete", HetCacheCompleteOp);

}  // namespace het

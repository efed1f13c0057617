// Thin adapters from the cache ops to het::WorkerCache.
#include <memory>
#include <string>

#include "cc_ops/common/kernel_util.h"
#include "cc_ops/common/tf_status.h"
#include "cc_ops/embedding/core/memory_budget.h"
#include "cc_ops/embedding/core/worker_cache.h"
#include "cc_ops/embedding/kernels/optimizer_attrs.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/resource_mgr.h"
#include "tensorflow/core/framework/resource_op_kernel.h"
#include "tensorflow/core/platform/logging.h"

namespace het {

using WorkerCacheResource = CoreResource<WorkerCache>;
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

// A worker's id for the shards' records: the same for every incarnation of
// one cache on one device (FNV-1a of both names), so a restarted worker
// replaces its old record.
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

uint64_t WorkerIdOf(const std::string& device, const std::string& shared_name) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (char c : device + "|" + shared_name)
    h = (h ^ static_cast<unsigned char>(c)) * 0x100000001b3ULL;
  return h == Sender::kNoWorker ? 1 : h;
}

}  // namespace

class HetCacheOp : public CoreResourceOp<WorkerCache, CacheConfig> {
 public:
  explicit HetCacheOp(OpKernelConstruction* ctx) : CoreResourceOp(ctx) {
    std::string policy;
    int64_t dim, pin_threshold;
    OP_REQUIRES_OK(ctx, ctx->GetAttr("table_name", &config_.table_name));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("dim", &dim));
    config_.dim = ClampDim(dim);
    OP_REQUIRES_OK(ctx, ctx->GetAttr("capacity", &config_.capacity));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("vocabulary_size", &config_.vocabulary_size));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("policy", &policy));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("pin_threshold", &pin_threshold));
    config_.pin_threshold = static_cast<uint64_t>(pin_threshold);
    OP_REQUIRES_OK(ctx, ctx->GetAttr("read_staleness", &config_.read_staleness));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("write_staleness", &config_.write_staleness));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("staleness_ramp", &config_.staleness_ramp));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("num_shards", &config_.num_shards));
    OP_REQUIRES_OK(ctx, ParseOptimizerAttrs(ctx, config_.table_name, &config_.optimizer));
    std::string sync, shared_name;
    OP_REQUIRES_OK(ctx, ctx->GetAttr("sync", &sync));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("shared_name", &shared_name));
    config_.worker_id = WorkerIdOf(ctx->device()->name(), shared_name);
    Status s = ParseCachePolicy(policy, &config_.policy);
    if (s.ok()) s = ParseSyncMode(sync, &config_.sync);
    OP_REQUIRES(
        ctx, s.ok(),
        tensorflow::errors::InvalidArgument(TableLabel(config_.table_name), ": ", s.message()));
  }

 private:
  tensorflow::Status Mismatch(const CacheConfig& have) const override {
    if (have.dim != config_.dim || have.capacity != config_.capacity ||
        have.optimizer.kind != config_.optimizer.kind || have.sync != config_.sync ||
        have.num_shards != config_.num_shards) {
      return tensorflow::errors::InvalidArgument(
          "the cache of ", TableLabel(config_.table_name),
          " already exists on this device with dim ", have.dim, " and ", have.capacity,
          " rows; asked for dim ", config_.dim, " and ", config_.capacity,
          " rows, or for another optimizer, sync or number of shards");
    }
    return tensorflow::OkStatus();
  }
};

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
    Tensor* rows = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({u, dim_}), &rows));
    OP_REQUIRES_OK(ctx,
                   ToTf(cache.Complete(
                       keys.flat<int64_t>().data(), u, ctx->input(2).flat<int32_t>().data(), m,
                       ctx->input(3).flat<float>().data(), ctx->input(4).flat<int64_t>().data(),
                       training_, rows->flat<float>().data())));
    WarnOnceOfPassThrough(cache);
  }

 private:
  bool training_;
};

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
    // States [m, width] are the shards' answer for the m keys still cached;
    // anything else (an empty vector) acknowledges without taking states.
    const bool with_rows = ctx->input(3).dims() == 2;
    const int64_t m = with_rows ? ctx->input(3).dim_size(0) : 0;
    if (with_rows) {
      OP_REQUIRES_OK(ctx, CheckShape(name, "pushed states", ctx->input(3), m, cache.width()));
      OP_REQUIRES_OK(ctx, CheckShape(name, "pushed clocks", ctx->input(4), m, 0));
    }
    const bool with_epochs = ctx->input(5).NumElements() > 0;
    if (with_epochs) {
      OP_REQUIRES_OK(
          ctx, CheckShape(name, "shards' epochs", ctx->input(5), cache.config().num_shards, 0));
    }
    OP_REQUIRES_OK(
        ctx, ToTf(cache.AckPush(ctx->input(1).flat<int64_t>().data(), n,
                                ctx->input(2).flat<int64_t>().data(),
                                with_rows ? ctx->input(3).flat<float>().data() : nullptr,
                                with_rows ? ctx->input(4).flat<int64_t>().data() : nullptr, m,
                                with_epochs ? ctx->input(5).flat<int64_t>().data() : nullptr)));
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

class HetCacheClearOp : public CacheKernel {
 public:
  using CacheKernel::CacheKernel;
  void Run(OpKernelContext*, WorkerCache& cache) override { cache.Clear(); }
};

class HetCachePinOp : public CacheKernel {
 public:
  using CacheKernel::CacheKernel;
  void Run(OpKernelContext* ctx, WorkerCache& cache) override {
    const Tensor& keys = ctx->input(1);
    OP_REQUIRES_OK(ctx, CheckVector(cache.config().table_name, "pinned keys", keys));
    OP_REQUIRES_OK(ctx, ToTf(cache.Pin(keys.flat<int64_t>().data(), keys.NumElements())));
  }
};

class HetCacheDropOp : public CacheKernel {
 public:
  using CacheKernel::CacheKernel;
  void Run(OpKernelContext* ctx, WorkerCache& cache) override {
    const Tensor& keys = ctx->input(1);
    OP_REQUIRES_OK(ctx, CheckVector(cache.config().table_name, "keys read elsewhere", keys));
    Tensor* outbox = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({}), &outbox));
    outbox->scalar<int64_t>()() = cache.Drop(keys.flat<int64_t>().data(), keys.NumElements());
  }
};

class HetCacheMostUsedOp : public CacheKernel {
 public:
  using CacheKernel::CacheKernel;
  void Run(OpKernelContext* ctx, WorkerCache& cache) override {
    const Tensor& count = ctx->input(1);
    OP_REQUIRES(ctx, count.dims() == 0 && count.scalar<int64_t>()() >= 0,
                tensorflow::errors::InvalidArgument(
                    TableLabel(cache.config().table_name),
                    ": the number of most used keys must be a non-negative scalar"));
    OP_REQUIRES_OK(ctx, OutputVector(ctx, 0, cache.MostUsed(count.scalar<int64_t>()())));
  }
};

class HetCacheStagedAheadOp : public CacheKernel {
 public:
  explicit HetCacheStagedAheadOp(OpKernelConstruction* ctx) : CacheKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("batches", &batches_));
  }
  void Run(OpKernelContext* ctx, WorkerCache& cache) override {
    const Tensor& ids = ctx->input(1);
    OP_REQUIRES_OK(ctx, CheckVector(cache.config().table_name, "ids of the step", ids));
    OP_REQUIRES_OK(ctx, OutputVector(ctx, 0,
                                     cache.StagedAhead(ids.flat<int64_t>().data(),
                                                       ids.NumElements(), batches_)));
  }

 private:
  int64_t batches_ = 1;
};

class HetCacheStatsOp : public CacheKernel {
 public:
  using CacheKernel::CacheKernel;
  void Run(OpKernelContext* ctx, WorkerCache& cache) override {
    const CacheCounters c = cache.Counters();
    OP_REQUIRES_OK(ctx, OutputStats(ctx, {
                                             {"capacity", cache.config().capacity},
                                             {"rows", cache.size()},
                                             {"lookups", int64_t(c.lookups)},
                                             {"unique_keys", int64_t(c.unique_keys)},
                                             {"hits", int64_t(c.hits)},
                                             {"misses", int64_t(c.misses)},
                                             {"stale_refreshes", int64_t(c.stale_refreshes)},
                                             {"evictions_reported", int64_t(c.evictions_reported)},
                                             {"evictions", int64_t(c.evictions)},
                                             {"dirty_evictions", int64_t(c.dirty_evictions)},
                                             {"passed_through", int64_t(c.passed_through)},
                                             {"rows_pulled", int64_t(c.rows_pulled)},
                                             {"rows_pushed", int64_t(c.rows_pushed)},
                                             {"updates_pushed", int64_t(c.updates_pushed)},
                                             {"bytes_sent", int64_t(c.bytes_sent)},
                                             {"bytes_received", int64_t(c.bytes_received)},
                                             {"steps", int64_t(c.steps)},
                                             {"prefetched", int64_t(c.prefetched)},
                                             {"prefetch_hits", int64_t(c.prefetch_hits)},
                                             {"rounds_resent", int64_t(c.rounds_resent)},
                                             {"pushed_uncached", int64_t(c.pushed_uncached)},
                                             {"pinned_keys", cache.pinned_keys()},
                                         }));
  }
};

HET_CPU_KERNEL("HetCache", HetCacheOp);
HET_CPU_KERNEL("HetCachePrepare", HetCachePrepareOp);
HET_CPU_KERNEL("HetCachePin", HetCachePinOp);
HET_CPU_KERNEL("HetCacheBeginExchange", HetCacheBeginExchangeOp);
HET_CPU_KERNEL("HetCacheEndExchange", HetCacheEndExchangeOp);
HET_CPU_KERNEL("HetCacheStage", HetCacheStageOp);
HET_CPU_KERNEL("HetCacheBeginPrefetch", HetCacheBeginPrefetchOp);
HET_CPU_KERNEL("HetCacheEndPrefetch", HetCacheEndPrefetchOp);
HET_CPU_KERNEL("HetCacheComplete", HetCacheCompleteOp);
HET_CPU_KERNEL("HetCacheAccumulate", HetCacheAccumulateOp);
HET_CPU_KERNEL("HetCacheAckPush", HetCacheAckPushOp);
HET_CPU_KERNEL("HetCacheFlush", HetCacheFlushOp);
HET_CPU_KERNEL("HetCacheClear", HetCacheClearOp);
HET_CPU_KERNEL("HetCacheDrop", HetCacheDropOp);
HET_CPU_KERNEL("HetCacheMostUsed", HetCacheMostUsedOp);
HET_CPU_KERNEL("HetCacheStagedAhead", HetCacheStagedAheadOp);
HET_CPU_KERNEL("HetCacheStats", HetCacheStatsOp);

}  // namespace het

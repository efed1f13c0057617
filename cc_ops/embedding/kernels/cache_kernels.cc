// Thin adapters from the cache ops to het::WorkerCache: the cache itself,
// made or found by name, and what the layer, Herald and the allocation ask
// of it besides a step (clear, pinned rows, drop, the staged window, the
// most used keys, stats). A lookup's ops are in cache_lookup_kernels.cc, an
// update's in cache_push_kernels.cc.
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

namespace het {

using WorkerCacheResource = CoreResource<WorkerCache>;
using CacheKernel = CoreKernel<WorkerCache>;

namespace {

// A worker's id for the shards' records: the same for every incarnation of
// one cache on one device (FNV-1a of both names), so a restarted worker
// replaces its old record.
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
    OP_REQUIRES_OK(ctx, ctx->GetAttr("rows_leave", &config_.rows_leave));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("rebuild_rows", &config_.rebuilds_rows));
    OP_REQUIRES_OK(ctx, ParseInitializerAttrs(ctx, config_.table_name, &config_.initializer));
    OP_REQUIRES_OK(ctx, ParseOptimizerAttrs(ctx, config_.table_name, &config_.optimizer));
    std::string sync, shared_name, wire_dtype;
    OP_REQUIRES_OK(ctx, ctx->GetAttr("sync", &sync));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("wire_dtype", &wire_dtype));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("shared_name", &shared_name));
    config_.worker_id = WorkerIdOf(ctx->device()->name(), shared_name);
    Status s = ParseCachePolicy(policy, &config_.policy);
    if (s.ok()) s = ParseSyncMode(sync, &config_.sync);
    if (s.ok()) s = ParseRowType(wire_dtype, &config_.wire_type);
    OP_REQUIRES(
        ctx, s.ok(),
        tensorflow::errors::InvalidArgument(TableLabel(config_.table_name), ": ", s.message()));
  }

 private:
  tensorflow::Status Mismatch(const CacheConfig& have) const override {
    if (have.dim != config_.dim || have.capacity != config_.capacity ||
        have.optimizer.kind != config_.optimizer.kind || have.sync != config_.sync ||
        have.num_shards != config_.num_shards || have.wire_type != config_.wire_type) {
      return tensorflow::errors::InvalidArgument(
          "the cache of ", TableLabel(config_.table_name),
          " already exists on this device with dim ", have.dim, " and ", have.capacity,
          " rows; asked for dim ", config_.dim, " and ", config_.capacity,
          " rows, or for another optimizer, sync, number of shards or wire dtype");
    }
    return tensorflow::OkStatus();
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

class HetCacheStagedOp : public CacheKernel {
 public:
  explicit HetCacheStagedOp(OpKernelConstruction* ctx) : CacheKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("batches", &batches_));
  }
  void Run(OpKernelContext* ctx, WorkerCache& cache) override {
    const Tensor& ids = ctx->input(1);
    OP_REQUIRES_OK(ctx, CheckVector(cache.config().table_name, "ids of the step", ids));
    OP_REQUIRES_OK(
        ctx, OutputVector(ctx, 0,
                          cache.Staged(ids.flat<int64_t>().data(), ids.NumElements(), batches_)));
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
                                             {"width", cache.width()},
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
                                             {"rows_rebuilt", int64_t(c.rows_rebuilt)},
                                             {"rows_pushed", int64_t(c.rows_pushed)},
                                             {"rows_pushed_lean", int64_t(c.rows_pushed_lean)},
                                             {"updates_pushed", int64_t(c.updates_pushed)},
                                             {"bytes_sent", int64_t(c.bytes_sent)},
                                             {"bytes_received", int64_t(c.bytes_received)},
                                             {"steps", int64_t(c.steps)},
                                             {"prefetched", int64_t(c.prefetched)},
                                             {"prefetch_hits", int64_t(c.prefetch_hits)},
                                             {"rounds_resent", int64_t(c.rounds_resent)},
                                             {"pushed_uncached", int64_t(c.pushed_uncached)},
                                             {"not_admitted", int64_t(c.not_admitted)},
                                             {"gradients_dropped", int64_t(c.gradients_dropped)},
                                             {"rows_refused", int64_t(c.rows_refused)},
                                             {"pinned_keys", cache.pinned_keys()},
                                         }));
  }
};

HET_CPU_KERNEL("HetCache", HetCacheOp);
HET_CPU_KERNEL("HetCachePin", HetCachePinOp);
HET_CPU_KERNEL("HetCacheClear", HetCacheClearOp);
HET_CPU_KERNEL("HetCacheDrop", HetCacheDropOp);
HET_CPU_KERNEL("HetCacheMostUsed", HetCacheMostUsedOp);
HET_CPU_KERNEL("HetCacheStaged", HetCacheStagedOp);
HET_CPU_KERNEL("HetCacheStats", HetCacheStatsOp);

}  // namespace het

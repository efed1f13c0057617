// Thin adapters from the table ops to het::TableShard: the shard itself,
// made or found by name, its reads (gather, pull, exchange), clear and
// stats. The pushes' ops are in table_push_kernels.cc, those of whole row
// states in table_chunk_kernels.cc.
#include <memory>
#include <string>

#include "cc_ops/common/kernel_util.h"
#include "cc_ops/common/tf_status.h"
#include "cc_ops/embedding/core/memory_budget.h"
#include "cc_ops/embedding/core/table_shard.h"
#include "cc_ops/embedding/kernels/optimizer_attrs.h"
#include "cc_ops/embedding/kernels/table_kernel.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/resource_mgr.h"
#include "tensorflow/core/framework/resource_op_kernel.h"

namespace het {

using TableShardResource = CoreResource<TableShard>;

namespace {

tensorflow::Status ParseTableConfig(OpKernelConstruction* ctx, TableConfig* c) {
  std::string on_full, eviction;
  int64_t dim;
  TF_RETURN_IF_ERROR(ctx->GetAttr("table_name", &c->name));
  TF_RETURN_IF_ERROR(ctx->GetAttr("dim", &dim));
  c->dim = ClampDim(dim);
  TF_RETURN_IF_ERROR(ctx->GetAttr("vocabulary_size", &c->vocabulary_size));
  TF_RETURN_IF_ERROR(ctx->GetAttr("max_rows", &c->max_rows));
  TF_RETURN_IF_ERROR(ctx->GetAttr("on_full", &on_full));
  TF_RETURN_IF_ERROR(ctx->GetAttr("eviction", &eviction));
  TF_RETURN_IF_ERROR(ctx->GetAttr("ttl_seconds", &c->ttl_seconds));
  TF_RETURN_IF_ERROR(ctx->GetAttr("admit_after", &c->admit_after));
  TF_RETURN_IF_ERROR(ParseInitializerAttrs(ctx, c->name, &c->initializer));
  TF_RETURN_IF_ERROR(ParseOptimizerAttrs(ctx, c->name, &c->optimizer));
  Status s = ParseOnFull(on_full, &c->on_full);
  if (s.ok()) s = ParseEvictionPolicy(eviction, &c->eviction);
  if (!s.ok()) return tensorflow::errors::InvalidArgument(TableLabel(c->name), ": ", s.message());
  return ToTf(ValidateTableConfig(*c));
}

}  // namespace

class HetTableShardOp : public CoreResourceOp<TableShard, TableConfig> {
 public:
  explicit HetTableShardOp(OpKernelConstruction* ctx) : CoreResourceOp(ctx) {
    OP_REQUIRES_OK(ctx, ParseTableConfig(ctx, &config_));
  }

 private:
  // A second layer asking for the same shared name must mean the same table.
  tensorflow::Status Mismatch(const TableConfig& have) const override {
    if (have.dim != config_.dim || have.vocabulary_size != config_.vocabulary_size ||
        have.optimizer.kind != config_.optimizer.kind) {
      return tensorflow::errors::InvalidArgument(
          TableLabel(config_.name), " already exists on this device with dim ", have.dim,
          ", vocabulary size ", have.vocabulary_size,
          " and another or the same optimizer; asked for dim ", config_.dim, ", vocabulary size ",
          config_.vocabulary_size, ". Use a different table name.");
    }
    return tensorflow::OkStatus();
  }
};

class HetTableGatherOp : public TableKernel {
 public:
  explicit HetTableGatherOp(OpKernelConstruction* ctx) : TableKernel(ctx), wire_(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("training", &training_));
  }
  void Run(OpKernelContext* ctx, TableShard& table) override {
    OP_REQUIRES_OK(ctx, wire_.Check(table));
    const Tensor& keys = ctx->input(1);
    const int64_t n = keys.NumElements();
    OP_REQUIRES_OK(ctx, CheckVector(table.config().name, "keys", keys));
    Tensor* values = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({n, dim_}), &values));
    const Parallel parallel = IntraOpThreads(ctx);
    OP_REQUIRES_OK(ctx, ToTf(table.Gather(keys.flat<int64_t>().data(), n,
                                          values->flat<float>().data(), training_, &parallel)));
  }

 private:
  WireVersion wire_;
  bool training_ = true;
};

class HetTablePullOp : public TableKernel {
 public:
  explicit HetTablePullOp(OpKernelConstruction* ctx) : TableKernel(ctx), wire_(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("num_slots", &num_slots_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("training", &training_));
  }
  void Run(OpKernelContext* ctx, TableShard& table) override {
    OP_REQUIRES_OK(ctx, wire_.Check(table));
    const Tensor& keys = ctx->input(1);
    const int64_t n = keys.NumElements();
    const std::string& name = table.config().name;
    OP_REQUIRES_OK(ctx, CheckVector(name, "keys", keys));
    OP_REQUIRES_OK(ctx, CheckShape(name, "clocks", ctx->input(2), n, 0));
    int64_t read_staleness;
    OP_REQUIRES_OK(ctx, ReadScalar(name, "read_staleness", ctx->input(3), &read_staleness));
    OP_REQUIRES_OK(ctx, CheckNumSlots(table, num_slots_, true));
    PulledRows pulled;
    OP_REQUIRES_OK(
        ctx, ToTf(table.Pull(keys.flat<int64_t>().data(), ctx->input(2).flat<int64_t>().data(), n,
                             read_staleness, num_slots_ > 0, &pulled, training_)));
    OP_REQUIRES_OK(ctx, OutputVector(ctx, 0, pulled.positions));
    OP_REQUIRES_OK(ctx, OutputVector(ctx, 1, pulled.values, dim_ * (1 + num_slots_)));
    OP_REQUIRES_OK(ctx, OutputVector(ctx, 2, pulled.clocks));
    Tensor* epoch = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(3, TensorShape({}), &epoch));
    epoch->scalar<int64_t>()() = pulled.epoch;
  }

 private:
  WireVersion wire_;
  int64_t num_slots_ = 0;
  bool training_ = true;
};

class HetTableExchangeOp : public TableKernel {
 public:
  using TableKernel::TableKernel;
  void Run(OpKernelContext* ctx, TableShard& table) override {
    const Tensor& request = ctx->input(1);
    OP_REQUIRES_OK(ctx, CheckVector(table.config().name, "exchange request", request));
    std::vector<uint8_t> aligned;
    const uint8_t* bytes = AlignedBytes(request, &aligned);
    std::vector<uint8_t> answer;
    OP_REQUIRES_OK(ctx, ToTf(table.Exchange(bytes, request.NumElements(), &answer)));
    OP_REQUIRES_OK(ctx, OutputVector(ctx, 0, answer));
  }
};

class HetTableClearOp : public TableKernel {
 public:
  using TableKernel::TableKernel;
  void Run(OpKernelContext*, TableShard& table) override { table.Clear(); }
};

class HetTableStatsOp : public TableKernel {
 public:
  using TableKernel::TableKernel;
  void Run(OpKernelContext* ctx, TableShard& table) override {
    const TableCounters c = table.Counters();
    const RecordSizes records = table.Records();
    OP_REQUIRES_OK(
        ctx,
        OutputStats(ctx, {
                             {"rows", table.Size()},
                             {"bytes_per_row", int64_t(table.BytesPerRow())},
                             {"memory_bytes", int64_t(table.MemoryBytes())},
                             {"pull_requests", int64_t(c.pull_requests)},
                             {"keys_checked", int64_t(c.keys_checked)},
                             {"rows_sent", int64_t(c.rows_sent)},
                             {"rows_refreshed", int64_t(c.rows_refreshed)},
                             {"record_workers", int64_t(records.workers)},
                             {"record_copies", int64_t(records.copies)},
                             {"record_bytes", int64_t(records.bytes)},
                             {"push_requests", int64_t(c.push_requests)},
                             {"rows_pushed", int64_t(c.rows_pushed)},
                             {"updates_applied", int64_t(c.updates_applied)},
                             {"rows_created", int64_t(c.rows_created)},
                             {"rows_evicted", int64_t(c.rows_evicted)},
                             {"rows_expired", int64_t(c.rows_expired)},
                             {"ids_not_admitted", int64_t(c.ids_not_admitted)},
                             {"updates_dropped", int64_t(c.updates_dropped)},
                             {"updates_refused_non_finite", int64_t(c.updates_refused_non_finite)},
                             {"bytes_received", int64_t(c.bytes_received)},
                             {"bytes_sent", int64_t(c.bytes_sent)},
                             {"repeats", int64_t(c.repeats)},
                             {"refused_epoch", int64_t(c.refused_epoch)},
                             {"refused_generation", int64_t(c.refused_generation)},
                             {"refused_sequence", int64_t(c.refused_sequence)},
                         }));
  }
};

HET_CPU_KERNEL("HetTableShard", HetTableShardOp);
HET_CPU_KERNEL("HetTableGather", HetTableGatherOp);
HET_CPU_KERNEL("HetTablePull", HetTablePullOp);
HET_CPU_KERNEL("HetTableExchange", HetTableExchangeOp);
HET_CPU_KERNEL("HetTableClear", HetTableClearOp);
HET_CPU_KERNEL("HetTableStats", HetTableStatsOp);

}  // namespace het

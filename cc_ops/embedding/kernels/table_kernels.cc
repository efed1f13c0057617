// Thin adapters from the table ops to het::TableShard.
#include <memory>
#include <string>

#include "cc_ops/common/kernel_util.h"
#include "cc_ops/common/tf_status.h"
#include "cc_ops/embedding/core/memory_budget.h"
#include "cc_ops/embedding/core/table_shard.h"
#include "cc_ops/embedding/kernels/optimizer_attrs.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/resource_mgr.h"
#include "tensorflow/core/framework/resource_op_kernel.h"

namespace het {

using TableShardResource = CoreResource<TableShard>;
using TableKernel = CoreKernel<TableShard>;

namespace {

tensorflow::Status ParseTableConfig(OpKernelConstruction* ctx, TableConfig* c) {
  std::string initializer;
  int64_t dim;
  TF_RETURN_IF_ERROR(ctx->GetAttr("table_name", &c->name));
  TF_RETURN_IF_ERROR(ctx->GetAttr("dim", &dim));
  c->dim = ClampDim(dim);
  TF_RETURN_IF_ERROR(ctx->GetAttr("vocabulary_size", &c->vocabulary_size));
  TF_RETURN_IF_ERROR(ctx->GetAttr("max_rows", &c->max_rows));
  TF_RETURN_IF_ERROR(ctx->GetAttr("initializer", &initializer));
  TF_RETURN_IF_ERROR(ctx->GetAttr("initializer_a", &c->initializer.a));
  TF_RETURN_IF_ERROR(ctx->GetAttr("initializer_b", &c->initializer.b));
  TF_RETURN_IF_ERROR(ctx->GetAttr("seed", &c->initializer.seed));
  TF_RETURN_IF_ERROR(ParseOptimizerAttrs(ctx, c->name, &c->optimizer));
  Status s = ParseInitializerKind(initializer, &c->initializer.kind);
  if (!s.ok()) return tensorflow::errors::InvalidArgument(TableLabel(c->name), ": ", s.message());
  return ToTf(ValidateTableConfig(*c));
}

// An op's num_slots attr must be the table's (or 0, rows only, where allowed).
tensorflow::Status CheckNumSlots(const TableShard& table, int64_t num_slots, bool rows_only_ok) {
  if (num_slots == table.num_slots() || (rows_only_ok && num_slots == 0)) {
    return tensorflow::OkStatus();
  }
  return tensorflow::errors::InvalidArgument(TableLabel(table.config().name), " has ",
                                             table.num_slots(), " optimizer slots, not ",
                                             num_slots);
}

// A push's inputs after the handle: keys [n], values [n, width] (gradients
// or state deltas), update counts [n] and a scalar learning rate.
tensorflow::Status ReadPushInputs(OpKernelContext* ctx, const TableShard& table, const char* what,
                                  int64_t width, float* learning_rate) {
  const std::string& name = table.config().name;
  const int64_t n = ctx->input(1).NumElements();
  TF_RETURN_IF_ERROR(CheckVector(name, "keys", ctx->input(1)));
  TF_RETURN_IF_ERROR(CheckShape(name, what, ctx->input(2), n, width));
  TF_RETURN_IF_ERROR(CheckShape(name, "update counts", ctx->input(3), n, 0));
  return ReadScalar(name, "learning rate", ctx->input(4), learning_rate);
}

// Writes a chunk's values, slots, clocks and steps as outputs from `first` on.
// Frees each field once it is an output: a chunk is then held about once,
// not in both forms.
template <typename T>
void Release(std::vector<T>* v) {
  std::vector<T>().swap(*v);
}

void OutputRowStates(OpKernelContext* ctx, int first, TableChunk* chunk, int64_t num_slots,
                     int64_t dim) {
  const int64_t n = static_cast<int64_t>(chunk->keys.size());
  Release(&chunk->keys);
  OP_REQUIRES_OK(ctx, OutputVector(ctx, first, chunk->values, dim));
  Release(&chunk->values);
  Tensor* slots = nullptr;
  OP_REQUIRES_OK(ctx, ctx->allocate_output(first + 1, TensorShape({n, num_slots, dim}), &slots));
  std::copy(chunk->slots.begin(), chunk->slots.end(), slots->flat<float>().data());
  Release(&chunk->slots);
  OP_REQUIRES_OK(ctx, OutputVector(ctx, first + 2, chunk->clocks));
  Release(&chunk->clocks);
  OP_REQUIRES_OK(ctx, OutputVector(ctx, first + 3, chunk->steps));
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
  using TableKernel::TableKernel;
  void Run(OpKernelContext* ctx, TableShard& table) override {
    const Tensor& keys = ctx->input(1);
    const int64_t n = keys.NumElements();
    OP_REQUIRES_OK(ctx, CheckVector(table.config().name, "keys", keys));
    Tensor* values = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({n, dim_}), &values));
    OP_REQUIRES_OK(
        ctx, ToTf(table.Gather(keys.flat<int64_t>().data(), n, values->flat<float>().data())));
  }
};

class HetTablePullOp : public TableKernel {
 public:
  explicit HetTablePullOp(OpKernelConstruction* ctx) : TableKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("num_slots", &num_slots_));
  }
  void Run(OpKernelContext* ctx, TableShard& table) override {
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
                             read_staleness, num_slots_ > 0, &pulled)));
    OP_REQUIRES_OK(ctx, OutputVector(ctx, 0, pulled.positions));
    OP_REQUIRES_OK(ctx, OutputVector(ctx, 1, pulled.values, dim_ * (1 + num_slots_)));
    OP_REQUIRES_OK(ctx, OutputVector(ctx, 2, pulled.clocks));
  }

 private:
  int64_t num_slots_ = 0;
};

namespace {

// The sender of a delta push: worker id, generation (64 bits each carried
// as int64), the round's sequence number and the epoch the sender saw
// (copy_records.h).
tensorflow::Status ReadSender(OpKernelContext* ctx, const std::string& table, int index,
                              Sender* sender) {
  const Tensor& t = ctx->input(index);
  if (t.dims() != 1 || t.NumElements() != 4) {
    return tensorflow::errors::InvalidArgument(
        TableLabel(table),
        ": a push's sender must be 4 int64s (worker id, generation, sequence, "
        "epoch), got shape ",
        t.shape().DebugString());
  }
  const auto v = t.flat<int64_t>();
  if (v(2) < 0 || v(3) < 0) {
    return tensorflow::errors::InvalidArgument(TableLabel(table),
                                               ": a push's sequence and epoch must be >= 0");
  }
  sender->worker = static_cast<uint64_t>(v(0));
  sender->generation = static_cast<uint64_t>(v(1));
  sender->sequence = v(2);
  sender->epoch = v(3);
  return tensorflow::OkStatus();
}

}  // namespace

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

class HetTablePushDeltasOp : public TableKernel {
 public:
  explicit HetTablePushDeltasOp(OpKernelConstruction* ctx) : TableKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("num_slots", &num_slots_));
  }
  void Run(OpKernelContext* ctx, TableShard& table) override {
    const Tensor& keys = ctx->input(1);
    const int64_t n = keys.NumElements();
    const int64_t width = table.state_width();
    OP_REQUIRES_OK(ctx, CheckNumSlots(table, num_slots_, false));
    float learning_rate;
    OP_REQUIRES_OK(ctx, ReadPushInputs(ctx, table, "state deltas", width, &learning_rate));
    OP_REQUIRES_OK(ctx, CheckShape(table.config().name, "base clocks", ctx->input(5), n, 0));
    Sender sender;
    OP_REQUIRES_OK(ctx, ReadSender(ctx, table.config().name, 6, &sender));
    int64_t unanswered;
    OP_REQUIRES_OK(ctx,
                   ReadScalar(table.config().name, "unanswered rows", ctx->input(7), &unanswered));
    OP_REQUIRES(
        ctx, unanswered >= 0 && unanswered <= n,
        tensorflow::errors::InvalidArgument(TableLabel(table.config().name), ": ", unanswered,
                                            " unanswered rows in a push of ", n));
    Tensor* states = nullptr;
    Tensor* clocks = nullptr;
    Tensor* epoch = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({n - unanswered, width}), &states));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, TensorShape({n - unanswered}), &clocks));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(2, TensorShape({}), &epoch));
    OP_REQUIRES_OK(
        ctx, ToTf(table.PushDeltas(keys.flat<int64_t>().data(), ctx->input(2).flat<float>().data(),
                                   ctx->input(3).flat<int64_t>().data(),
                                   ctx->input(5).flat<int64_t>().data(), n, learning_rate,
                                   states->flat<float>().data(), clocks->flat<int64_t>().data(),
                                   sender, unanswered, &epoch->scalar<int64_t>()())));
  }

 private:
  int64_t num_slots_;
};

class HetTablePushOp : public TableKernel {
 public:
  explicit HetTablePushOp(OpKernelConstruction* ctx) : TableKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("return_rows", &return_rows_));
  }
  void Run(OpKernelContext* ctx, TableShard& table) override {
    const Tensor& keys = ctx->input(1);
    const int64_t n = keys.NumElements();
    float learning_rate;
    OP_REQUIRES_OK(ctx, ReadPushInputs(ctx, table, "gradients", dim_, &learning_rate));
    const int64_t out_rows = return_rows_ ? n : 0;
    Tensor* values = nullptr;
    Tensor* clocks = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({out_rows, dim_}), &values));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, TensorShape({out_rows}), &clocks));
    OP_REQUIRES_OK(ctx,
                   ToTf(table.Push(keys.flat<int64_t>().data(), ctx->input(2).flat<float>().data(),
                                   ctx->input(3).flat<int64_t>().data(), n, learning_rate,
                                   return_rows_ ? values->flat<float>().data() : nullptr,
                                   return_rows_ ? clocks->flat<int64_t>().data() : nullptr)));
  }

 private:
  bool return_rows_;
};

// A kernel whose outputs end with rows' whole states (OutputRowStates).
class RowStatesKernel : public TableKernel {
 public:
  explicit RowStatesKernel(OpKernelConstruction* ctx) : TableKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("num_slots", &num_slots_));
  }
  void Run(OpKernelContext* ctx, TableShard& table) override {
    OP_REQUIRES_OK(ctx, CheckNumSlots(table, num_slots_, false));
    TableChunk chunk;
    int first = 0;
    ReadRows(ctx, table, &chunk, &first);
    if (ctx->status().ok()) OutputRowStates(ctx, first, &chunk, num_slots_, dim_);
  }

 protected:
  // Fills `chunk` and writes any outputs before the states, the first of
  // which is then `*first`.
  virtual void ReadRows(OpKernelContext* ctx, TableShard& table, TableChunk* chunk, int* first) = 0;

 private:
  int64_t num_slots_;
};

class HetTableExportOp : public RowStatesKernel {
 public:
  using RowStatesKernel::RowStatesKernel;

 protected:
  void ReadRows(OpKernelContext* ctx, TableShard& table, TableChunk* chunk, int* first) override {
    int64_t offset, limit;
    OP_REQUIRES_OK(ctx, ReadScalar(table.config().name, "export offset", ctx->input(1), &offset));
    OP_REQUIRES_OK(ctx, ReadScalar(table.config().name, "export limit", ctx->input(2), &limit));
    OP_REQUIRES_OK(ctx, ToTf(table.Export(offset, limit, chunk)));
    OP_REQUIRES_OK(ctx, OutputVector(ctx, 0, chunk->keys));
    *first = 1;
  }
};

class HetTableReadOp : public RowStatesKernel {
 public:
  using RowStatesKernel::RowStatesKernel;

 protected:
  void ReadRows(OpKernelContext* ctx, TableShard& table, TableChunk* chunk, int* first) override {
    const Tensor& keys = ctx->input(1);
    OP_REQUIRES_OK(ctx, CheckVector(table.config().name, "keys", keys));
    OP_REQUIRES_OK(ctx, ToTf(table.Read(keys.flat<int64_t>().data(), keys.NumElements(), chunk)));
    *first = 0;
  }
};

class HetTableImportOp : public TableKernel {
 public:
  using TableKernel::TableKernel;
  void Run(OpKernelContext* ctx, TableShard& table) override {
    const std::string& name = table.config().name;
    const Tensor& keys = ctx->input(1);
    const int64_t n = keys.NumElements();
    OP_REQUIRES_OK(ctx, CheckVector(name, "imported keys", keys));
    OP_REQUIRES_OK(ctx, CheckShape(name, "imported values", ctx->input(2), n, table.dim()));
    const Tensor& slots = ctx->input(3);
    OP_REQUIRES(ctx,
                slots.dims() == 3 && slots.dim_size(0) == n &&
                    slots.dim_size(1) == table.num_slots() && slots.dim_size(2) == table.dim(),
                tensorflow::errors::InvalidArgument(
                    TableLabel(name), ": imported slots must have shape [", n, ", ",
                    table.num_slots(), ", ", table.dim(), "], got ", slots.shape().DebugString()));
    OP_REQUIRES_OK(ctx, CheckShape(name, "imported clocks", ctx->input(4), n, 0));
    OP_REQUIRES_OK(ctx, CheckShape(name, "imported steps", ctx->input(5), n, 0));
    TableChunk chunk;
    auto copy = [](const Tensor& t, auto* v) {
      using T = typename std::remove_reference_t<decltype(*v)>::value_type;
      auto flat = t.flat<T>();
      v->assign(flat.data(), flat.data() + flat.size());
    };
    copy(keys, &chunk.keys);
    copy(ctx->input(2), &chunk.values);
    copy(slots, &chunk.slots);
    copy(ctx->input(4), &chunk.clocks);
    copy(ctx->input(5), &chunk.steps);
    OP_REQUIRES_OK(ctx, ToTf(table.Import(chunk)));
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
    OP_REQUIRES_OK(ctx, OutputStats(ctx, {
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
HET_CPU_KERNEL("HetTablePush", HetTablePushOp);
HET_CPU_KERNEL("HetTablePushDeltas", HetTablePushDeltasOp);
HET_CPU_KERNEL("HetTableExport", HetTableExportOp);
HET_CPU_KERNEL("HetTableRead", HetTableReadOp);
HET_CPU_KERNEL("HetTableImport", HetTableImportOp);
HET_CPU_KERNEL("HetTableClear", HetTableClearOp);
HET_CPU_KERNEL("HetTableStats", HetTableStatsOp);

}  // namespace het

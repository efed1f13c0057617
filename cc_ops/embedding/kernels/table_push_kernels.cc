// Thin adapters from the table's push ops to het::TableShard: a worker's
// gradients (HetTablePush) and a cache's state deltas (HetTablePushDeltas).
#include <algorithm>
#include <string>
#include <vector>

#include "cc_ops/common/kernel_util.h"
#include "cc_ops/common/tf_status.h"
#include "cc_ops/embedding/core/table_shard.h"
#include "cc_ops/embedding/kernels/table_kernel.h"
#include "tensorflow/core/framework/op_kernel.h"

namespace het {
namespace {

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

class HetTablePushDeltasOp : public TableKernel {
 public:
  explicit HetTablePushDeltasOp(OpKernelConstruction* ctx) : TableKernel(ctx), wire_(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("num_slots", &num_slots_));
  }
  void Run(OpKernelContext* ctx, TableShard& table) override {
    OP_REQUIRES_OK(ctx, wire_.Check(table));
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
    const int64_t answered = n - unanswered;
    std::vector<float> states(size_t(answered) * width);
    std::vector<uint8_t> lean(answered);
    std::vector<int64_t> refused;
    Tensor* clocks = nullptr;
    Tensor* epoch = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, TensorShape({answered}), &clocks));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(2, TensorShape({}), &epoch));
    OP_REQUIRES_OK(
        ctx, ToTf(table.PushDeltas(
                 keys.flat<int64_t>().data(), ctx->input(2).flat<float>().data(),
                 ctx->input(3).flat<int64_t>().data(), ctx->input(5).flat<int64_t>().data(), n,
                 learning_rate, states.data(), clocks->flat<int64_t>().data(), sender, unanswered,
                 &epoch->scalar<int64_t>()(), lean.data(), &refused)));
    // The states of the rows not acknowledged lean lead `states`.
    const int64_t whole = answered - std::count(lean.begin(), lean.end(), uint8_t{1});
    Tensor* out = nullptr;
    Tensor* flags = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({whole, width}), &out));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(3, TensorShape({answered}), &flags));
    std::copy(states.begin(), states.begin() + whole * width, out->flat<float>().data());
    std::copy(lean.begin(), lean.end(), flags->flat<bool>().data());
    OP_REQUIRES_OK(ctx, OutputVector(ctx, 4, refused));
  }

 private:
  WireVersion wire_;
  int64_t num_slots_;
};

class HetTablePushOp : public TableKernel {
 public:
  explicit HetTablePushOp(OpKernelConstruction* ctx) : TableKernel(ctx), wire_(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("return_rows", &return_rows_));
  }
  void Run(OpKernelContext* ctx, TableShard& table) override {
    OP_REQUIRES_OK(ctx, wire_.Check(table));
    const Tensor& keys = ctx->input(1);
    const int64_t n = keys.NumElements();
    float learning_rate;
    OP_REQUIRES_OK(ctx, ReadPushInputs(ctx, table, "gradients", dim_, &learning_rate));
    const int64_t out_rows = return_rows_ ? n : 0;
    Tensor* values = nullptr;
    Tensor* clocks = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({out_rows, dim_}), &values));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, TensorShape({out_rows}), &clocks));
    const Parallel parallel = IntraOpThreads(ctx);
    OP_REQUIRES_OK(
        ctx, ToTf(table.Push(keys.flat<int64_t>().data(), ctx->input(2).flat<float>().data(),
                             ctx->input(3).flat<int64_t>().data(), n, learning_rate,
                             return_rows_ ? values->flat<float>().data() : nullptr,
                             return_rows_ ? clocks->flat<int64_t>().data() : nullptr, &parallel)));
  }

 private:
  WireVersion wire_;
  bool return_rows_;
};

HET_CPU_KERNEL("HetTablePush", HetTablePushOp);
HET_CPU_KERNEL("HetTablePushDeltas", HetTablePushDeltasOp);

}  // namespace het

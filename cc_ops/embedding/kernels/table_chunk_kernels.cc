// Thin adapters from the table ops that move rows' whole states to
// het::TableShard as TableChunks: export and import for checkpoints, the
// changes of incremental ones, and the read of a replicated hot block's rows.
#include <string>
#include <type_traits>
#include <vector>

#include "cc_ops/common/kernel_util.h"
#include "cc_ops/common/tf_status.h"
#include "cc_ops/embedding/core/table_shard.h"
#include "cc_ops/embedding/kernels/table_kernel.h"
#include "tensorflow/core/framework/op_kernel.h"

namespace het {
namespace {

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
  // The keys a read by key takes (input 1), checked to be a vector.
  static tensorflow::Status KeysInput(OpKernelContext* ctx, const TableShard& table,
                                      const Tensor** keys) {
    *keys = &ctx->input(1);
    return CheckVector(table.config().name, "keys", **keys);
  }

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
  explicit HetTableReadOp(OpKernelConstruction* ctx) : RowStatesKernel(ctx), wire_(ctx) {}

 protected:
  void ReadRows(OpKernelContext* ctx, TableShard& table, TableChunk* chunk, int* first) override {
    OP_REQUIRES_OK(ctx, wire_.Check(table));
    const Tensor* keys;
    OP_REQUIRES_OK(ctx, KeysInput(ctx, table, &keys));
    OP_REQUIRES_OK(ctx, ToTf(table.Read(keys->flat<int64_t>().data(), keys->NumElements(), chunk)));
    *first = 0;
  }

 private:
  WireVersion wire_;
};

class HetTableReadHeldOp : public RowStatesKernel {
 public:
  explicit HetTableReadHeldOp(OpKernelConstruction* ctx) : RowStatesKernel(ctx), wire_(ctx) {}

 protected:
  void ReadRows(OpKernelContext* ctx, TableShard& table, TableChunk* chunk, int* first) override {
    OP_REQUIRES_OK(ctx, wire_.Check(table));
    const Tensor* keys;
    OP_REQUIRES_OK(ctx, KeysInput(ctx, table, &keys));
    std::vector<int64_t> absent;
    OP_REQUIRES_OK(ctx, ToTf(table.ReadHeld(keys->flat<int64_t>().data(), keys->NumElements(),
                                            chunk, &absent)));
    OP_REQUIRES_OK(ctx, OutputVector(ctx, 0, chunk->keys));
    OP_REQUIRES_OK(ctx, OutputVector(ctx, 1, absent));
    *first = 2;
  }

 private:
  WireVersion wire_;
};

class HetTableForgetChangesOp : public TableKernel {
 public:
  using TableKernel::TableKernel;
  void Run(OpKernelContext*, TableShard& table) override { table.ForgetChanges(); }
};

class HetTableTakeChangesOp : public TableKernel {
 public:
  using TableKernel::TableKernel;
  void Run(OpKernelContext* ctx, TableShard& table) override {
    const Tensor& kept = ctx->input(1);
    OP_REQUIRES(ctx, kept.dims() == 0,
                tensorflow::errors::InvalidArgument(TableLabel(table.config().name),
                                                    ": kept must be a scalar"));
    std::vector<int64_t> changed, dropped;
    const bool tracked = table.TakeChanges(kept.scalar<bool>()(), &changed, &dropped);
    Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({}), &out));
    out->scalar<bool>()() = tracked;
    OP_REQUIRES_OK(ctx, OutputVector(ctx, 1, changed));
    OP_REQUIRES_OK(ctx, OutputVector(ctx, 2, dropped));
  }
};

class HetTableEraseOp : public TableKernel {
 public:
  using TableKernel::TableKernel;
  void Run(OpKernelContext* ctx, TableShard& table) override {
    const Tensor& keys = ctx->input(1);
    OP_REQUIRES_OK(ctx, CheckVector(table.config().name, "erased keys", keys));
    OP_REQUIRES_OK(ctx, ToTf(table.Erase(keys.flat<int64_t>().data(), keys.NumElements())));
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

// A checkpoint's admission sketch: out (HetTableSketch) and back in.
class HetTableSketchOp : public TableKernel {
 public:
  using TableKernel::TableKernel;
  void Run(OpKernelContext* ctx, TableShard& table) override {
    std::vector<uint8_t> counts;
    if (table.admission_sketch() != nullptr) table.admission_sketch()->Export(&counts);
    OP_REQUIRES_OK(ctx, OutputVector(ctx, 0, counts));
  }
};

class HetTableMergeSketchOp : public TableKernel {
 public:
  using TableKernel::TableKernel;
  void Run(OpKernelContext* ctx, TableShard& table) override {
    const Tensor& counts = ctx->input(1);
    OP_REQUIRES_OK(ctx, CheckVector(table.config().name, "admission sketch", counts));
    if (table.admission_sketch() == nullptr) return;
    OP_REQUIRES_OK(ctx, ToTf(table.admission_sketch()->Merge(
                            table.config().name, counts.flat<uint8_t>().data(),
                            static_cast<size_t>(counts.NumElements()))));
  }
};

HET_CPU_KERNEL("HetTableSketch", HetTableSketchOp);
HET_CPU_KERNEL("HetTableMergeSketch", HetTableMergeSketchOp);
HET_CPU_KERNEL("HetTableExport", HetTableExportOp);
HET_CPU_KERNEL("HetTableRead", HetTableReadOp);
HET_CPU_KERNEL("HetTableImport", HetTableImportOp);
HET_CPU_KERNEL("HetTableReadHeld", HetTableReadHeldOp);
HET_CPU_KERNEL("HetTableForgetChanges", HetTableForgetChangesOp);
HET_CPU_KERNEL("HetTableTakeChanges", HetTableTakeChangesOp);
HET_CPU_KERNEL("HetTableErase", HetTableEraseOp);

}  // namespace het

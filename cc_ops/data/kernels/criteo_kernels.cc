// Thin adapter from HetParseCriteo to the plain-C++ Criteo line parser.
#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "cc_ops/common/kernel_util.h"
#include "cc_ops/data/core/criteo_format.h"
#include "cc_ops/data/kernels/criteo_outputs.h"
#include "tensorflow/core/framework/op_kernel.h"

namespace het {
namespace {

struct ParseCounters {
  std::atomic<int64_t> records{0};
  std::atomic<int64_t> malformed{0};

  void Add(int64_t n, int64_t bad) {
    records.fetch_add(n, std::memory_order_relaxed);
    malformed.fetch_add(bad, std::memory_order_relaxed);
  }
};

// Process-wide and keyed by name rather than a resource: tf.data runs the
// parser in its own function runtime, and a reader's counts must be visible
// to whoever asks in the same process.
ParseCounters& CountersNamed(const std::string& name) {
  static std::mutex mu;
  static auto* counters = new std::map<std::string, std::unique_ptr<ParseCounters>>();
  std::lock_guard<std::mutex> lock(mu);
  auto& slot = (*counters)[name];
  if (!slot) slot = std::make_unique<ParseCounters>();
  return *slot;
}

// A kernel that counts into the ParseCounters its `counter` attr names.
class CountingKernel : public OpKernel {
 public:
  explicit CountingKernel(OpKernelConstruction* ctx) : OpKernel(ctx) {
    std::string counter;
    OP_REQUIRES_OK(ctx, ctx->GetAttr("counter", &counter));
    counters_ = &CountersNamed(counter);
  }

 protected:
  ParseCounters* counters_ = nullptr;
};

class HetParseCriteoOp : public CountingKernel {
 public:
  explicit HetParseCriteoOp(OpKernelConstruction* ctx) : CountingKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("has_label", &has_label_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("skip_malformed", &skip_malformed_));
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& lines = ctx->input(0);
    OP_REQUIRES(ctx, lines.dims() == 1 && ctx->input(1).dims() == 0 && ctx->input(2).dims() == 0,
                tensorflow::errors::InvalidArgument(
                    "criteo reader: lines must be a vector and first_line and source scalars, "
                    "got shapes ",
                    lines.shape().DebugString(), ", ", ctx->input(1).shape().DebugString(), ", ",
                    ctx->input(2).shape().DebugString()));
    const int64_t first_line = ctx->input(1).scalar<int64_t>()();
    const std::string source(ctx->input(2).scalar<tensorflow::tstring>()());
    const int64_t n = lines.dim_size(0);
    CriteoOutputs outputs;
    OP_REQUIRES_OK(ctx, outputs.Allocate(ctx, n));
    Tensor* valid;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(3, TensorShape({n}), &valid));
    auto text = lines.flat<tensorflow::tstring>();
    bool* valid_out = valid->flat<bool>().data();
    std::mutex bad_mu;  // guards the three below
    int64_t malformed = 0, first_bad = n;
    std::string first_reason;

    ForEachRow(ctx, n, /*cost_per_row=*/2000, [&](int64_t begin, int64_t end) {
      CriteoRecord record;
      std::string reason;
      for (int64_t i = begin; i < end; ++i) {
        valid_out[i] = ParseCriteoLine(std::string_view(text(i).data(), text(i).size()), has_label_,
                                       &record, &reason);
        if (!valid_out[i]) {
          record = CriteoRecord();
          std::lock_guard<std::mutex> lock(bad_mu);
          ++malformed;
          if (i < first_bad) {
            first_bad = i;
            first_reason = reason;
          }
        }
        outputs.Write(i, record);
      }
    });
    counters_->Add(n, malformed);
    OP_REQUIRES(ctx, skip_malformed_ || malformed == 0,
                tensorflow::errors::InvalidArgument(
                    "criteo reader: ", source, " line ", first_line + first_bad, ": ", first_reason,
                    " (pass on_malformed='skip' to count and skip such lines)"));
  }

 private:
  bool has_label_ = true;
  bool skip_malformed_ = true;
};

class HetParseStatsOp : public CountingKernel {
 public:
  using CountingKernel::CountingKernel;

  void Compute(OpKernelContext* ctx) override {
    OP_REQUIRES_OK(ctx, OutputStats(ctx, {{"records", counters_->records.load()},
                                          {"malformed", counters_->malformed.load()}}));
  }
};

class HetCountRecordsOp : public CountingKernel {
 public:
  using CountingKernel::CountingKernel;

  void Compute(OpKernelContext* ctx) override {
    const Tensor& valid = ctx->input(0);
    auto flags = valid.flat<bool>();
    int64_t invalid = 0;
    for (int64_t i = 0; i < flags.size(); ++i) invalid += !flags(i);
    counters_->Add(flags.size(), invalid);
    ctx->set_output(0, valid);
  }
};

HET_CPU_KERNEL("HetParseCriteo", HetParseCriteoOp);
HET_CPU_KERNEL("HetParseStats", HetParseStatsOp);
HET_CPU_KERNEL("HetCountRecords", HetCountRecordsOp);

}  // namespace
}  // namespace het

// Thin adapter from HetParseCriteo to the plain-C++ Criteo line parser.
#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "cc_ops/core/criteo_format.h"
#include "cc_ops/kernels/kernel_util.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/util/work_sharder.h"

namespace het {
namespace {

using tensorflow::OpKernel;
using tensorflow::OpKernelConstruction;
using tensorflow::OpKernelContext;
using tensorflow::Tensor;
using tensorflow::TensorShape;

struct ParseCounters {
  std::atomic<int64_t> lines{0};
  std::atomic<int64_t> malformed{0};
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

class HetParseCriteoOp : public OpKernel {
 public:
  explicit HetParseCriteoOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("has_label", &has_label_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("skip_malformed", &skip_malformed_));
    std::string counter;
    OP_REQUIRES_OK(ctx, ctx->GetAttr("counter", &counter));
    counters_ = &CountersNamed(counter);
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& lines = ctx->input(0);
    OP_REQUIRES(ctx, lines.dims() == 1,
                tensorflow::errors::InvalidArgument("criteo reader: lines must be a vector, got ",
                                                    lines.shape().DebugString()));
    const int64_t first_line = ctx->input(1).scalar<int64_t>()();
    const std::string source(ctx->input(2).scalar<tensorflow::tstring>()());
    const int64_t n = lines.dim_size(0);
    Tensor *labels, *dense, *keys, *valid;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({n}), &labels));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, TensorShape({n, kCriteoDenseFields}), &dense));
    OP_REQUIRES_OK(ctx,
                   ctx->allocate_output(2, TensorShape({n, kCriteoCategoricalFields}), &keys));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(3, TensorShape({n}), &valid));
    auto text = lines.flat<tensorflow::tstring>();
    float* label_out = labels->flat<float>().data();
    float* dense_out = dense->flat<float>().data();
    int64_t* keys_out = keys->flat<int64_t>().data();
    bool* valid_out = valid->flat<bool>().data();
    std::atomic<int64_t> first_bad{n};
    std::mutex reason_mu;
    std::string first_reason;
    std::atomic<int64_t> malformed{0};

    auto parse_range = [&](int64_t begin, int64_t end) {
      CriteoRecord record;
      std::string reason;
      for (int64_t i = begin; i < end; ++i) {
        const bool ok = ParseCriteoLine(std::string_view(text(i).data(), text(i).size()),
                                        has_label_, &record, &reason);
        valid_out[i] = ok;
        if (!ok) {
          record = CriteoRecord();
          malformed.fetch_add(1, std::memory_order_relaxed);
          std::lock_guard<std::mutex> lock(reason_mu);
          if (i < first_bad.load()) {
            first_bad.store(i);
            first_reason = reason;
          }
        }
        label_out[i] = record.label;
        std::copy(record.dense, record.dense + kCriteoDenseFields,
                  dense_out + i * kCriteoDenseFields);
        std::copy(record.keys, record.keys + kCriteoCategoricalFields,
                  keys_out + i * kCriteoCategoricalFields);
      }
    };
    auto* workers = ctx->device()->tensorflow_cpu_worker_threads()->workers;
    tensorflow::Shard(ctx->device()->tensorflow_cpu_worker_threads()->num_threads, workers, n,
                      /*cost_per_unit=*/2000, parse_range);

    counters_->lines.fetch_add(n, std::memory_order_relaxed);
    counters_->malformed.fetch_add(malformed.load(), std::memory_order_relaxed);
    OP_REQUIRES(ctx, skip_malformed_ || malformed.load() == 0,
                tensorflow::errors::InvalidArgument(
                    "criteo reader: ", source, " line ", first_line + first_bad.load(), ": ",
                    first_reason, " (pass on_malformed='skip' to count and skip such lines)"));
  }

 private:
  bool has_label_ = true;
  bool skip_malformed_ = true;
  ParseCounters* counters_ = nullptr;
};

class HetParseStatsOp : public OpKernel {
 public:
  explicit HetParseStatsOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    std::string counter;
    OP_REQUIRES_OK(ctx, ctx->GetAttr("counter", &counter));
    counters_ = &CountersNamed(counter);
  }

  void Compute(OpKernelContext* ctx) override {
    OP_REQUIRES_OK(ctx, OutputStats(ctx, {{"records", counters_->lines.load()},
                                          {"malformed", counters_->malformed.load()}}));
  }

 private:
  ParseCounters* counters_ = nullptr;
};

class HetCountRecordsOp : public OpKernel {
 public:
  explicit HetCountRecordsOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    std::string counter;
    OP_REQUIRES_OK(ctx, ctx->GetAttr("counter", &counter));
    counters_ = &CountersNamed(counter);
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& valid = ctx->input(0);
    auto flags = valid.flat<bool>();
    int64_t invalid = 0;
    for (int64_t i = 0; i < flags.size(); ++i) invalid += !flags(i);
    counters_->lines.fetch_add(flags.size(), std::memory_order_relaxed);
    counters_->malformed.fetch_add(invalid, std::memory_order_relaxed);
    ctx->set_output(0, valid);
  }

 private:
  ParseCounters* counters_ = nullptr;
};

REGISTER_KERNEL_BUILDER(Name("HetParseCriteo").Device(tensorflow::DEVICE_CPU), HetParseCriteoOp);
REGISTER_KERNEL_BUILDER(Name("HetParseStats").Device(tensorflow::DEVICE_CPU), HetParseStatsOp);
REGISTER_KERNEL_BUILDER(Name("HetCountRecords").Device(tensorflow::DEVICE_CPU), HetCountRecordsOp);

}  // namespace
}  // namespace het

// Thin adapters from the synthetic-data ops to the plain-C++ generator.
#include <memory>
#include <string>

#include "cc_ops/common/kernel_util.h"
#include "cc_ops/common/tf_status.h"
#include "cc_ops/data/core/synthetic_criteo.h"
#include "cc_ops/data/kernels/criteo_outputs.h"
#include "tensorflow/core/framework/op_kernel.h"

namespace het {
namespace {

// Builds the generator from the op's attrs once, at kernel construction.
class SyntheticKernel : public tensorflow::OpKernel {
 public:
  explicit SyntheticKernel(OpKernelConstruction* ctx) : OpKernel(ctx) {
    SyntheticCriteoSpec spec;
    int64_t seed = 0;
    float scale = 1, exponent = 1.1f, drift = 0;
    OP_REQUIRES_OK(ctx, ctx->GetAttr("seed", &seed));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("scale", &scale));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("zipf_exponent", &exponent));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("drift", &drift));
    spec.seed = static_cast<uint64_t>(seed);
    spec.scale = scale;
    spec.exponent = exponent;
    spec.drift = drift;
    OP_REQUIRES_OK(ctx, ToTf(SyntheticCriteo::Create(spec, &data_)));
  }

 protected:
  struct RowRange {
    uint64_t stream = 0;
    uint64_t first = 0;
    int64_t n = 0;
  };

  static tensorflow::Status ReadRange(OpKernelContext* ctx, RowRange* range) {
    for (int i = 0; i < 3; ++i) {
      if (ctx->input(i).dims() != 0) {
        return tensorflow::errors::InvalidArgument(
            "synthetic criteo: stream, first_row and num_rows must be scalars");
      }
    }
    const int64_t first = ctx->input(1).scalar<int64_t>()();
    range->stream = static_cast<uint64_t>(ctx->input(0).scalar<int64_t>()());
    range->n = ctx->input(2).scalar<int64_t>()();
    if (first < 0 || range->n < 0 || range->n > (int64_t{1} << 26)) {
      return tensorflow::errors::InvalidArgument(
          "synthetic criteo: first_row must be >= 0 and num_rows in [0, 2^26], got ", first,
          " and ", range->n);
    }
    range->first = static_cast<uint64_t>(first);
    return tensorflow::OkStatus();
  }

  // A row costs about this much: a pow and a hash per field.
  static constexpr int64_t kCostPerRow = 20000;

  std::unique_ptr<SyntheticCriteo> data_;
};

// The row ops' kernels: rows of a range, each as at its own position in the
// stream, or all as at the `position` attr when it is >= 0.
class SyntheticRowsKernel : public SyntheticKernel {
 public:
  explicit SyntheticRowsKernel(OpKernelConstruction* ctx) : SyntheticKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("position", &position_));
    OP_REQUIRES(
        ctx, position_ >= -1,
        tensorflow::errors::InvalidArgument(
            "synthetic criteo: position must be >= 0, or -1 for each row's own, got ", position_));
  }

 protected:
  void MakeRow(uint64_t stream, uint64_t row, SyntheticCriteoRow* out) const {
    data_->RowAt(stream, row, position_ < 0 ? row : static_cast<uint64_t>(position_), out);
  }

 private:
  int64_t position_ = -1;
};

class HetSyntheticCriteoOp : public SyntheticRowsKernel {
 public:
  using SyntheticRowsKernel::SyntheticRowsKernel;

  void Compute(OpKernelContext* ctx) override {
    RowRange range;
    OP_REQUIRES_OK(ctx, ReadRange(ctx, &range));
    CriteoOutputs outputs;
    OP_REQUIRES_OK(ctx, outputs.Allocate(ctx, range.n));
    Tensor* logits;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(3, TensorShape({range.n}), &logits));
    float* logit_out = logits->flat<float>().data();
    ForEachRow(ctx, range.n, kCostPerRow, [&](int64_t begin, int64_t end) {
      SyntheticCriteoRow row;
      CriteoRecord record;
      for (int64_t i = begin; i < end; ++i) {
        MakeRow(range.stream, range.first + i, &row);
        SyntheticCriteo::ToRecord(row, &record);
        outputs.Write(i, record);
        logit_out[i] = static_cast<float>(row.logit);
      }
    });
  }
};

class HetSyntheticCriteoLinesOp : public SyntheticRowsKernel {
 public:
  using SyntheticRowsKernel::SyntheticRowsKernel;

  void Compute(OpKernelContext* ctx) override {
    RowRange range;
    OP_REQUIRES_OK(ctx, ReadRange(ctx, &range));
    Tensor* lines;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({range.n}), &lines));
    auto out = lines->flat<tensorflow::tstring>();
    ForEachRow(ctx, range.n, kCostPerRow, [&](int64_t begin, int64_t end) {
      SyntheticCriteoRow row;
      for (int64_t i = begin; i < end; ++i) {
        MakeRow(range.stream, range.first + i, &row);
        out(i) = SyntheticCriteo::FormatLine(row);
      }
    });
  }
};

class HetSyntheticCriteoCardinalitiesOp : public SyntheticKernel {
 public:
  using SyntheticKernel::SyntheticKernel;

  void Compute(OpKernelContext* ctx) override {
    Tensor* out;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({kCriteoCategoricalFields}), &out));
    for (int f = 0; f < kCriteoCategoricalFields; ++f)
      out->flat<int64_t>()(f) = data_->cardinality(f);
  }
};

#define HET_REGISTER(name, cls) \
  REGISTER_KERNEL_BUILDER(Name(name).Device(tensorflow::DEVICE_CPU), cls)
HET_REGISTER("HetSyntheticCriteo", HetSyntheticCriteoOp);
HET_REGISTER("HetSyntheticCriteoLines", HetSyntheticCriteoLinesOp);
HET_REGISTER("HetSyntheticCriteoCardinalities", HetSyntheticCriteoCardinalitiesOp);
#undef HET_REGISTER

}  // namespace
}  // namespace het

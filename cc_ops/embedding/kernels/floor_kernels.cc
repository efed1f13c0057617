// The kernel of the Belady floor: no resource, the replay of its inputs.
#include <string>

#include "cc_ops/common/kernel_util.h"
#include "cc_ops/common/tf_status.h"
#include "cc_ops/embedding/core/belady_floor.h"

namespace het {

namespace {

class HetBeladyFloorOp : public tensorflow::OpKernel {
 public:
  explicit HetBeladyFloorOp(tensorflow::OpKernelConstruction* ctx) : OpKernel(ctx) {
    std::string sync;
    int64_t width = 0, shards = 0;
    OP_REQUIRES_OK(ctx, ctx->GetAttr("table_name", &table_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("capacity", &config_.capacity));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("width", &width));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("write_staleness", &config_.write_staleness));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("sync", &sync));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("num_shards", &shards));
    OP_REQUIRES(ctx, width > 0 && width < (1 << 16) && shards > 0 && shards < (1 << 16),
                tensorflow::errors::InvalidArgument(TableLabel(table_),
                                                    ": the Belady floor needs 0 < width < 2^16 "
                                                    "and 0 < num_shards < 2^16"));
    config_.width = static_cast<int>(width);
    config_.num_shards = static_cast<int>(shards);
    OP_REQUIRES_OK(ctx, ToTf(ParseSyncMode(sync, &config_.sync)));
    std::string wire_dtype;
    OP_REQUIRES_OK(ctx, ctx->GetAttr("wire_dtype", &wire_dtype));
    OP_REQUIRES_OK(ctx, ToTf(ParseRowType(wire_dtype, &config_.row_type)));
  }

  void Compute(tensorflow::OpKernelContext* ctx) override {
    const tensorflow::Tensor& keys = ctx->input(0);
    const tensorflow::Tensor& offsets = ctx->input(1);
    OP_REQUIRES_OK(ctx, CheckVector(table_, "keys", keys));
    OP_REQUIRES_OK(ctx, CheckVector(table_, "offsets", offsets));
    const int64_t steps = offsets.NumElements() - 1;
    const auto o = offsets.flat<int64_t>();
    OP_REQUIRES(ctx, steps >= 0 && o(steps) == keys.NumElements(),
                tensorflow::errors::InvalidArgument(TableLabel(table_),
                                                    ": the Belady floor's offsets must end at the ",
                                                    keys.NumElements(), " keys"));
    FloorConfig config = config_;
    OP_REQUIRES_OK(ctx, ReadScalar(table_, "refreshes", ctx->input(2), &config.refreshes));
    FloorCounts c;
    const tensorflow::Tensor& made = ctx->input(3);
    OP_REQUIRES_OK(ctx, CheckVector(table_, "made_keys", made));
    const Status s = ReplayBelady(keys.flat<int64_t>().data(), o.data(), steps,
                                  made.flat<int64_t>().data(), made.NumElements(), config, &c);
    OP_REQUIRES(ctx, s.ok(),
                tensorflow::errors::InvalidArgument(TableLabel(table_), ": ", s.message()));
    OP_REQUIRES_OK(ctx, OutputStats(ctx, {{"steps", c.steps},
                                          {"unique_keys", c.unique_keys},
                                          {"misses", c.misses},
                                          {"made", c.made},
                                          {"passed_through", c.passed_through},
                                          {"evictions", c.evictions},
                                          {"pushes", c.pushes},
                                          {"flushed", c.flushed},
                                          {"bytes_sent", int64_t(c.bytes_sent)},
                                          {"bytes_received", int64_t(c.bytes_received)}}));
  }

 private:
  std::string table_;
  FloorConfig config_;
};

}  // namespace

HET_CPU_KERNEL("HetBeladyFloor", HetBeladyFloorOp);

}  // namespace het

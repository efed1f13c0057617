// Kernel glue shared by every area's kernels.
#ifndef HET_TF_COMMON_KERNEL_UTIL_H_
#define HET_TF_COMMON_KERNEL_UTIL_H_

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cc_ops/common/parallel.h"
#include "cc_ops/common/status.h"
#include "cc_ops/common/tf_status.h"
#include "tensorflow/core/framework/node_def_util.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/resource_mgr.h"
#include "tensorflow/core/framework/resource_op_kernel.h"
#include "tensorflow/core/framework/tensor.h"
#include "tsl/platform/threadpool.h"

// Registers a CPU kernel; every op of het_tf runs on the CPU.
#define HET_CPU_KERNEL(name, cls) \
  REGISTER_KERNEL_BUILDER(Name(name).Device(tensorflow::DEVICE_CPU), cls)

namespace het {

// The framework types every kernel file names.
using tensorflow::OpKernel;
using tensorflow::OpKernelConstruction;
using tensorflow::OpKernelContext;
using tensorflow::Tensor;
using tensorflow::TensorShape;

// Copies a vector into a new output: rank 1, or [size / dim, dim] when dim > 0.
template <typename T>
tensorflow::Status OutputVector(tensorflow::OpKernelContext* ctx, int index,
                                const std::vector<T>& v, int64_t dim = 0) {
  tensorflow::Tensor* out = nullptr;
  const int64_t size = static_cast<int64_t>(v.size());
  tensorflow::TensorShape shape =
      dim > 0 ? tensorflow::TensorShape({size / dim, dim}) : tensorflow::TensorShape({size});
  TF_RETURN_IF_ERROR(ctx->allocate_output(index, shape, &out));
  if (!v.empty()) std::copy(v.begin(), v.end(), out->flat<T>().data());
  return tensorflow::OkStatus();
}

// A new scalar int64 output.
inline tensorflow::Status OutputScalar(tensorflow::OpKernelContext* ctx, int index, int64_t value) {
  tensorflow::Tensor* out = nullptr;
  TF_RETURN_IF_ERROR(ctx->allocate_output(index, tensorflow::TensorShape({}), &out));
  out->scalar<int64_t>()() = value;
  return tensorflow::OkStatus();
}

// Checks a tensor is [n] (when dim == 0) or [n, dim].
inline tensorflow::Status CheckShape(const std::string& table, const char* what,
                                     const tensorflow::Tensor& t, int64_t n, int64_t dim) {
  const bool ok = dim == 0 ? (t.dims() == 1 && t.dim_size(0) == n)
                           : (t.dims() == 2 && t.dim_size(0) == n && t.dim_size(1) == dim);
  if (ok) return tensorflow::OkStatus();
  return tensorflow::errors::InvalidArgument(
      TableLabel(table), ": ", what, " must have shape ",
      dim == 0 ? "[" + std::to_string(n) + "]"
               : "[" + std::to_string(n) + ", " + std::to_string(dim) + "]",
      ", got ", t.shape().DebugString());
}

// Eager calls skip the shape functions, so every kernel checks the ranks it
// relies on: a vector of keys, a scalar setting.
inline tensorflow::Status CheckVector(const std::string& table, const char* what,
                                      const tensorflow::Tensor& t) {
  if (t.dims() == 1) return tensorflow::OkStatus();
  return tensorflow::errors::InvalidArgument(
      TableLabel(table), ": ", what, " must be a vector, got shape ", t.shape().DebugString());
}

template <typename T>
tensorflow::Status ReadScalar(const std::string& table, const char* what,
                              const tensorflow::Tensor& t, T* out) {
  if (t.dims() != 0) {
    return tensorflow::errors::InvalidArgument(
        TableLabel(table), ": ", what, " must be a scalar, got shape ", t.shape().DebugString());
  }
  *out = t.scalar<T>()();
  return tensorflow::OkStatus();
}

// A byte tensor's data, 4-byte aligned for reading rows in place: the
// tensor's own buffer (TensorFlow aligns them), or a copy in `scratch`
// when it is not.
inline const uint8_t* AlignedBytes(const tensorflow::Tensor& t, std::vector<uint8_t>* scratch) {
  const uint8_t* data = t.flat<uint8_t>().data();
  if (reinterpret_cast<uintptr_t>(data) % 4 == 0) return data;
  // A vector's storage comes from operator new, aligned for any scalar.
  scratch->assign(data, data + t.NumElements());
  return scratch->data();
}

// Stats as two outputs, names and values, so Python needs no fixed order.
inline tensorflow::Status OutputStats(tensorflow::OpKernelContext* ctx,
                                      const std::vector<std::pair<std::string, int64_t>>& stats) {
  tensorflow::Tensor* names = nullptr;
  tensorflow::Tensor* values = nullptr;
  const int64_t n = static_cast<int64_t>(stats.size());
  TF_RETURN_IF_ERROR(ctx->allocate_output(0, tensorflow::TensorShape({n}), &names));
  TF_RETURN_IF_ERROR(ctx->allocate_output(1, tensorflow::TensorShape({n}), &values));
  for (int64_t i = 0; i < n; ++i) {
    names->flat<tensorflow::tstring>()(i) = stats[i].first;
    values->flat<int64_t>()(i) = stats[i].second;
  }
  return tensorflow::OkStatus();
}

// TensorFlow's intra-op threads, lent to the core for one call: each part
// is a block of its own, so parts of equal work spread over the threads.
// None on a parameter-server task: there the workers' requests keep the
// threads busy at once, and splitting each request adds hand-offs, not
// cores (on loopback hybrid mode's cached runs lost 7% with them).
inline Parallel IntraOpThreads(tensorflow::OpKernelContext* ctx) {
  const auto* threads = ctx->device()->tensorflow_cpu_worker_threads();
  tsl::thread::ThreadPool* pool = threads->workers;
  Parallel parallel;
  parallel.threads = ctx->device()->parsed_name().job == "ps" ? 1 : threads->num_threads;
  parallel.run = [pool](int64_t parts, const Parallel::Work& work) {
    pool->ParallelFor(parts,
                      tsl::thread::ThreadPool::SchedulingParams(
                          tsl::thread::ThreadPool::SchedulingStrategy::kFixedBlockSize,
                          std::nullopt, /*block_size=*/1),
                      work);
  };
  return parallel;
}

// The ResourceBase that owns one core object: a TableShard or a WorkerCache.
template <typename Core>
class CoreResource : public tensorflow::ResourceBase {
 public:
  explicit CoreResource(std::unique_ptr<Core> core) : core_(std::move(core)) {}
  Core& core() { return *core_; }
  std::string DebugString() const override {
    return "het resource of table '" + core_->table_name() + "'";
  }
  int64_t MemoryUsed() const override { return static_cast<int64_t>(core_->MemoryBytes()); }

 private:
  std::unique_ptr<Core> core_;
};

// A kernel whose first input is a het resource: looks it up, checks its dim
// against the op's `dim` attr when the op has one, and hands it to Run().
template <typename Core>
class CoreKernel : public tensorflow::OpKernel {
 public:
  explicit CoreKernel(tensorflow::OpKernelConstruction* ctx) : OpKernel(ctx) {
    if (tensorflow::HasNodeAttr(ctx->def(), "dim")) {
      OP_REQUIRES_OK(ctx, ctx->GetAttr("dim", &dim_));
    }
  }

  void Compute(tensorflow::OpKernelContext* ctx) final {
    tensorflow::core::RefCountPtr<CoreResource<Core>> resource;
    OP_REQUIRES_OK(ctx,
                   tensorflow::LookupResource(ctx, tensorflow::HandleFromInput(ctx, 0), &resource));
    Core& core = resource->core();
    OP_REQUIRES(ctx, dim_ == 0 || dim_ == core.dim(),
                tensorflow::errors::InvalidArgument(TableLabel(core.table_name()), " has dim ",
                                                    core.dim(), " but the op expects ", dim_));
    Run(ctx, core);
  }

 protected:
  virtual void Run(tensorflow::OpKernelContext* ctx, Core& core) = 0;
  int64_t dim_ = 0;
};

// The op that makes (or finds, by shared name) a het resource: parses its
// attrs into a Config once, creates the core with Core::Create, and asks
// Mismatch() whether a resource already there under the name was made with
// other settings.
template <typename Core, typename Config>
class CoreResourceOp : public tensorflow::ResourceOpKernel<CoreResource<Core>> {
 public:
  using tensorflow::ResourceOpKernel<CoreResource<Core>>::ResourceOpKernel;

 protected:
  // An error naming what differs, or OK when `have` is the same table.
  virtual tensorflow::Status Mismatch(const Config& have) const = 0;
  Config config_;

 private:
  tensorflow::Status CreateResource(CoreResource<Core>** resource) override {
    std::unique_ptr<Core> core;
    TF_RETURN_IF_ERROR(ToTf(Core::Create(config_, &core)));
    *resource = new CoreResource<Core>(std::move(core));
    return tensorflow::OkStatus();
  }
  tensorflow::Status VerifyResource(CoreResource<Core>* resource) override {
    return Mismatch(resource->core().config());
  }
};

}  // namespace het

#endif  // HET_TF_COMMON_KERNEL_UTIL_H_

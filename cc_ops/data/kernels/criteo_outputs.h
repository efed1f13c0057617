// What the Criteo parsing and synthetic-data kernels share: their first
// three outputs (labels, dense features, keys) and a parallel loop over rows.
#ifndef HET_TF_DATA_KERNELS_CRITEO_OUTPUTS_H_
#define HET_TF_DATA_KERNELS_CRITEO_OUTPUTS_H_

#include <algorithm>
#include <functional>

#include "cc_ops/data/core/criteo_format.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/util/work_sharder.h"

namespace het {

// Outputs 0-2 of a Criteo batch: labels [n], dense [n, 13], keys [n, 26].
class CriteoOutputs {
 public:
  tensorflow::Status Allocate(tensorflow::OpKernelContext* ctx, int64_t n) {
    tensorflow::Tensor *labels, *dense, *keys;
    TF_RETURN_IF_ERROR(ctx->allocate_output(0, tensorflow::TensorShape({n}), &labels));
    TF_RETURN_IF_ERROR(
        ctx->allocate_output(1, tensorflow::TensorShape({n, kCriteoDenseFields}), &dense));
    TF_RETURN_IF_ERROR(
        ctx->allocate_output(2, tensorflow::TensorShape({n, kCriteoCategoricalFields}), &keys));
    labels_ = labels->flat<float>().data();
    dense_ = dense->flat<float>().data();
    keys_ = keys->flat<int64_t>().data();
    return tensorflow::OkStatus();
  }

  void Write(int64_t i, const CriteoRecord& record) const {
    labels_[i] = record.label;
    std::copy(record.dense, record.dense + kCriteoDenseFields, dense_ + i * kCriteoDenseFields);
    std::copy(record.keys, record.keys + kCriteoCategoricalFields,
              keys_ + i * kCriteoCategoricalFields);
  }

 private:
  float* labels_ = nullptr;
  float* dense_ = nullptr;
  int64_t* keys_ = nullptr;
};

// fn(begin, end) over [0, n) on the device's CPU threads.
inline void ForEachRow(tensorflow::OpKernelContext* ctx, int64_t n, int64_t cost_per_row,
                       const std::function<void(int64_t, int64_t)>& fn) {
  auto* threads = ctx->device()->tensorflow_cpu_worker_threads();
  tensorflow::Shard(threads->num_threads, threads->workers, n, cost_per_row, fn);
}

}  // namespace het

#endif  // HET_TF_DATA_KERNELS_CRITEO_OUTPUTS_H_

// The one place where core statuses become TensorFlow statuses.
#ifndef HET_TF_COMMON_TF_STATUS_H_
#define HET_TF_COMMON_TF_STATUS_H_

#include "cc_ops/common/status.h"
#include "tensorflow/core/platform/errors.h"
#include "tensorflow/core/platform/status.h"

namespace het {

inline tensorflow::Status ToTf(const Status& s) {
  switch (s.code()) {
    case StatusCode::kOk:
      return tensorflow::OkStatus();
    case StatusCode::kInvalidArgument:
      return tensorflow::errors::InvalidArgument(s.message());
    case StatusCode::kFailedPrecondition:
      return tensorflow::errors::FailedPrecondition(s.message());
    case StatusCode::kResourceExhausted:
      return tensorflow::errors::ResourceExhausted(s.message());
    case StatusCode::kAborted:
      return tensorflow::errors::Aborted(s.message());
  }
  return tensorflow::errors::Internal(s.message());
}

}  // namespace het

#endif  // HET_TF_COMMON_TF_STATUS_H_

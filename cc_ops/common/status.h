// A small status type so the core stays free of TensorFlow headers; the
// kernels translate it into tensorflow::Status.
#ifndef HET_TF_COMMON_STATUS_H_
#define HET_TF_COMMON_STATUS_H_

#include <string>
#include <utility>

namespace het {

enum class StatusCode { kOk, kInvalidArgument, kFailedPrecondition, kResourceExhausted, kAborted };

class Status {
 public:
  Status() = default;
  static Status Ok() { return Status(); }
  static Status InvalidArgument(std::string message) {
    return Status(StatusCode::kInvalidArgument, std::move(message));
  }
  static Status FailedPrecondition(std::string message) {
    return Status(StatusCode::kFailedPrecondition, std::move(message));
  }
  static Status ResourceExhausted(std::string message) {
    return Status(StatusCode::kResourceExhausted, std::move(message));
  }
  // The operation met a changed world and undid its part; run it again.
  static Status Aborted(std::string message) {
    return Status(StatusCode::kAborted, std::move(message));
  }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

 private:
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

// How every error names its table: table 'name'.
inline std::string TableLabel(const std::string& name) { return "table '" + name + "'"; }

#define HET_RETURN_IF_ERROR(expr)              \
  do {                                         \
    ::het::Status het_status_ = (expr);        \
    if (!het_status_.ok()) return het_status_; \
  } while (0)

}  // namespace het

#endif  // HET_TF_COMMON_STATUS_H_

// Threads a kernel lends the core for one call. The core has no TensorFlow
// headers, so it cannot reach TensorFlow's intra-op threads itself; a
// kernel wraps them in a Parallel (kernel_util.h IntraOpThreads), and a
// test wraps std::thread.
#ifndef HET_TF_COMMON_PARALLEL_H_
#define HET_TF_COMMON_PARALLEL_H_

#include <cstdint>
#include <functional>

namespace het {

struct Parallel {
  using Work = std::function<void(int64_t begin, int64_t end)>;
  // How many parts may run at once, the calling thread's included.
  int threads = 1;
  // Calls work(begin, end) over [0, parts) in pieces, some at once on other
  // threads, and returns when every part has run.
  std::function<void(int64_t parts, const Work& work)> run;
};

}  // namespace het

#endif  // HET_TF_COMMON_PARALLEL_H_

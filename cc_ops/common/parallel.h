// Threads a kernel lends the core for one call. The core has no TensorFlow
// headers, so it cannot reach TensorFlow's intra-op threads itself; a
// kernel wraps them in a Parallel (kernel_util.h IntraOpThreads), and a
// test or a tool starts threads (ThreadPerPart).
#ifndef HET_TF_COMMON_PARALLEL_H_
#define HET_TF_COMMON_PARALLEL_H_

#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

namespace het {

struct Parallel {
  using Work = std::function<void(int64_t begin, int64_t end)>;
  // How many parts may run at once, the calling thread's included.
  int threads = 1;
  // Calls work(begin, end) over [0, parts) in pieces, some at once on other
  // threads, and returns when every part has run.
  std::function<void(int64_t parts, const Work& work)> run;
};

// Each part on a thread started for it, the first on the caller's: what the
// core's tests and tools lend where no pool is at hand.
inline Parallel ThreadPerPart(int threads) {
  Parallel parallel;
  parallel.threads = threads;
  parallel.run = [](int64_t parts, const Parallel::Work& work) {
    std::vector<std::thread> others;
    for (int64_t p = 1; p < parts; ++p) others.emplace_back(work, p, p + 1);
    work(0, 1);
    for (auto& t : others) t.join();
  };
  return parallel;
}

}  // namespace het

#endif  // HET_TF_COMMON_PARALLEL_H_

// Times a table shard's Gather and Push alone, with no TensorFlow: the
// one-process layer's two kernels spend most of their time here.
//
//   make build/table_speed && ./build/table_speed [rows] [dim] [batches] [threads]
//
// A table of `rows` ids (Adagrad; all rows made first, the steady state),
// fed Zipf(1.1) batches of 512 x 26 ids, each batch's unique ids gathered
// and then pushed, each with its summed gradient, as the layer's step does;
// with `threads` > 1 both visit the table's stripes on that many threads
// (started a call, as a kernel's are not: an upper bound on what they
// cost). It prints
// the least and the median microseconds a batch over 5 rounds: on a noisy
// machine the least is the code's cost, the median how much noise there was.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <unordered_set>
#include <vector>

#include "cc_ops/embedding/core/table_shard.h"

namespace {

void Check(const het::Status& s) {
  if (!s.ok()) {
    std::fprintf(stderr, "%s\n", s.message().c_str());
    std::exit(1);
  }
}

// Zipf(1.1) over [0, rows) by inverting a table of cumulative weights.
std::vector<std::vector<int64_t>> Batches(int64_t rows, int batches, int ids, uint64_t seed) {
  std::vector<double> cdf(rows);
  double sum = 0;
  for (int64_t r = 0; r < rows; ++r) cdf[r] = sum += std::pow(double(r + 1), -1.1);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(0, sum);
  std::vector<std::vector<int64_t>> out(batches);
  for (auto& batch : out) {
    for (int i = 0; i < ids; ++i) {
      const int64_t rank = std::lower_bound(cdf.begin(), cdf.end(), u(rng)) - cdf.begin();
      // Ranks scattered over the ids, as hashed Criteo ids are.
      batch.push_back(static_cast<int64_t>((uint64_t(rank) * 0x9e3779b97f4a7c15ULL) % rows));
    }
  }
  return out;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t rows = argc > 1 ? std::atoll(argv[1]) : 338103;
  const int dim = argc > 2 ? std::atoi(argv[2]) : 16;
  const int batches = argc > 3 ? std::atoi(argv[3]) : 200;
  const int threads = argc > 4 ? std::atoi(argv[4]) : 1;
  if (rows < 1 || dim < 1 || batches < 1 || threads < 1) {
    std::fprintf(stderr,
                 "usage: table_speed [rows >= 1] [dim >= 1] [batches >= 1] [threads >= 1]\n");
    return 2;
  }
  const het::Parallel parallel = het::ThreadPerPart(threads);
  het::TableConfig config;
  config.dim = dim;
  config.vocabulary_size = rows;
  config.optimizer.kind = het::OptimizerKind::kAdagrad;
  std::unique_ptr<het::TableShard> table;
  Check(het::TableShard::Create(config, &table));
  std::vector<int64_t> all(rows);
  for (int64_t r = 0; r < rows; ++r) all[r] = r;
  std::vector<float> scratch(size_t(rows) * dim);
  Check(table->Gather(all.data(), rows, scratch.data()));

  // Each batch's unique ids, pushed once each with their gradients' sum.
  std::vector<std::vector<int64_t>> keys;
  size_t unique = 0;
  for (const auto& batch : Batches(rows, batches, 512 * 26, 7)) {
    std::unordered_set<int64_t> seen;
    std::vector<int64_t> order;
    for (int64_t id : batch) {
      if (seen.insert(id).second) order.push_back(id);
    }
    keys.push_back(order);
    unique += order.size();
  }
  std::printf("%lld rows, dim %d, %d batches of %zu unique ids on average, %d thread%s\n",
              static_cast<long long>(rows), dim, batches, unique / batches, threads,
              threads > 1 ? "s" : "");
  const std::vector<int64_t> ones(rows, 1);
  const het::Parallel* lent = threads > 1 ? &parallel : nullptr;
  std::vector<float> values(scratch.size()), grads(scratch.size(), 0.01f);
  std::vector<double> gather_us, push_us;
  for (int round = 0; round < 5; ++round) {
    double gather = 0, push = 0;
    for (int b = 0; b < batches; ++b) {
      const int64_t n = static_cast<int64_t>(keys[b].size());
      auto t0 = std::chrono::steady_clock::now();
      Check(table->Gather(keys[b].data(), n, values.data(), true, lent));
      auto t1 = std::chrono::steady_clock::now();
      Check(
          table->Push(keys[b].data(), grads.data(), ones.data(), n, 0.01f, nullptr, nullptr, lent));
      auto t2 = std::chrono::steady_clock::now();
      gather += std::chrono::duration<double, std::micro>(t1 - t0).count();
      push += std::chrono::duration<double, std::micro>(t2 - t1).count();
    }
    gather_us.push_back(gather / batches);
    push_us.push_back(push / batches);
  }
  std::printf("gather: least %.0f us a batch, median %.0f\n",
              *std::min_element(gather_us.begin(), gather_us.end()), Median(gather_us));
  std::printf("push:   least %.0f us a batch, median %.0f\n",
              *std::min_element(push_us.begin(), push_us.end()), Median(push_us));
  return 0;
}

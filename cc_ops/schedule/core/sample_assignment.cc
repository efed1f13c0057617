#include "cc_ops/schedule/core/sample_assignment.h"

#include <algorithm>
#include <numeric>
#include <string>
#include <vector>

namespace het {

Status AssignSamples(const int32_t* scores, int64_t samples, int workers, const int64_t* sizes,
                     int32_t stay_bonus, int32_t* dest) {
  if (workers < 1) return Status::InvalidArgument("sample assignment: no workers");
  if (stay_bonus < 0) {
    return Status::InvalidArgument("sample assignment: a negative stay bonus " +
                                   std::to_string(stay_bonus));
  }
  int64_t total = 0;
  for (int w = 0; w < workers; ++w) {
    if (sizes[w] < 0) {
      return Status::InvalidArgument("sample assignment: worker " + std::to_string(w) +
                                     " read a negative number of samples");
    }
    total += sizes[w];
  }
  if (total != samples) {
    return Status::InvalidArgument("sample assignment: the workers read " + std::to_string(total) +
                                   " samples, the scores are for " + std::to_string(samples));
  }
  for (int64_t i = 0; i < samples * workers; ++i) {
    if (scores[i] < 0) {
      return Status::InvalidArgument("sample assignment: a negative score for sample " +
                                     std::to_string(i / workers));
    }
  }
  // Each sample's workers, best first, and what it loses by missing its best.
  std::vector<int32_t> ranked(static_cast<size_t>(samples) * workers);
  std::vector<int64_t> margin(samples);
  std::vector<int64_t> effective(workers);
  int32_t origin = 0;
  int64_t origin_end = sizes[0];
  for (int64_t i = 0; i < samples; ++i) {
    while (i >= origin_end) origin_end += sizes[++origin];
    for (int w = 0; w < workers; ++w) {
      effective[w] = int64_t{scores[i * workers + w]} + (w == origin ? stay_bonus : 0);
    }
    int32_t* order = ranked.data() + i * workers;
    std::iota(order, order + workers, 0);
    std::stable_sort(order, order + workers, [&](int32_t a, int32_t b) {
      if (effective[a] != effective[b]) return effective[a] > effective[b];
      if ((a == origin) != (b == origin)) return a == origin;
      return a < b;
    });
    margin[i] = workers > 1 ? effective[order[0]] - effective[order[1]] : 0;
  }
  std::vector<int64_t> picking(samples);
  std::iota(picking.begin(), picking.end(), 0);
  std::stable_sort(picking.begin(), picking.end(),
                   [&](int64_t a, int64_t b) { return margin[a] > margin[b]; });
  std::vector<int64_t> room(sizes, sizes + workers);
  for (int64_t i : picking) {
    const int32_t* order = ranked.data() + i * workers;
    for (int k = 0; k < workers; ++k) {
      if (room[order[k]] > 0) {
        dest[i] = order[k];
        --room[order[k]];
        break;
      }
    }
  }
  return Status::Ok();
}

}  // namespace het

// Herald's location-aware allocation (docs/herald.md): the samples of a
// global batch, read by the workers in rank order, are given out again so
// that each trains where the most of its rows are cached, every worker
// keeping the number of samples it read.
//
// Every worker runs this on the same scores and gets the same answer, so
// no coordinator is needed: the result depends on nothing but its inputs.
#ifndef HET_TF_SCHEDULE_CORE_SAMPLE_ASSIGNMENT_H_
#define HET_TF_SCHEDULE_CORE_SAMPLE_ASSIGNMENT_H_

#include <cstdint>

#include "cc_ops/common/status.h"

namespace het {

// scores[i * workers + w]: how many of sample i's rows worker w's cache
// holds (non-negative); sizes[w]: the samples worker w read, the first
// sizes[0] of the batch being worker 0's, and so on (they sum to samples).
// stay_bonus is added to a sample's score at the worker that read it: the
// rows' worth of bytes that moving it costs. Writes each sample's worker
// to dest.
//
// Samples pick in order of how much they lose by not getting their best
// worker (best score minus second best, larger first; then the batch
// order), each taking the best-scored worker that has room (ties: the one
// that read it, then the lower rank). So a sample moves only for a better
// score or because its own worker filled with samples that gain more.
Status AssignSamples(const int32_t* scores, int64_t samples, int workers, const int64_t* sizes,
                     int32_t stay_bonus, int32_t* dest);

}  // namespace het

#endif  // HET_TF_SCHEDULE_CORE_SAMPLE_ASSIGNMENT_H_

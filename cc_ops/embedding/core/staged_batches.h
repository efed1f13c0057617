// The lookahead's staged batches: the ids of the batches a worker's steps
// will look up next, in the order they take them, and for every key they
// read its next read (the first staged batch not yet taken that reads it),
// which the eviction order keeps rows by (eviction_order.h).
//
// Each batch numbers its distinct keys and links each to the key's next
// staged batch, so that taking a batch moves each of its keys' next reads
// on in one step whatever the number of batches staged. It keeps where each
// id went among them too, so that the step's lookup of the batch need not
// deduplicate it again (Next).
#ifndef HET_TF_EMBEDDING_CORE_STAGED_BATCHES_H_
#define HET_TF_EMBEDDING_CORE_STAGED_BATCHES_H_

#include <cstdint>
#include <deque>
#include <vector>

#include "cc_ops/embedding/core/key_index.h"

namespace het {

class StagedBatches {
 public:
  // Batches kept: the oldest goes when another comes (a pipeline far ahead
  // of its steps, or batches staged and never trained). Above the 64 a
  // lookahead may stage ahead, for the batches in flight between the
  // pipeline and the steps.
  static constexpr size_t kMaxStaged = 80;
  static constexpr uint32_t kNoRead = KeyIndex::kAbsent;
  static constexpr uint32_t kNumbers = 0x7fffffffu;  // a batch's number's mask

  // Adds a batch's ids (as looked up: repeats allowed) after the others.
  // Keys whose next read changed are added to `moved`.
  void Add(const int64_t* ids, int64_t n, std::vector<int64_t>* moved);
  // If the batch the next step takes (the oldest not taken) is exactly
  // `ids`: its distinct ids, in order of first appearance, and each id's
  // place among them, as a lookup deduplicates them; false otherwise.
  bool Next(const int64_t* ids, int64_t n, std::vector<int64_t>* keys,
            std::vector<int32_t>* inverse) const;
  // Finds the batch of `current` (by its ids, after the batch taken last;
  // with by_position, failing that, the oldest not taken), forgets the
  // older ones (staged and never trained, or trained) and marks it taken;
  // returns the distinct ids of each of up to `batches` batches after it,
  // one batch after the other. Its keys' next reads move past it (into
  // `moved` where they changed).
  std::vector<int64_t> Take(const int64_t* current, int64_t n, int64_t batches, bool by_position,
                            std::vector<int64_t>* moved);
  // The number of the next staged batch that reads `key`, kNoRead if none
  // does: numbers grow with each batch staged (wrapping after 2^31
  // batches, which can misorder the rows kept for one window, never keep
  // one too few).
  uint32_t NextRead(int64_t key) const { return next_read_.Find(key); }
  // Starts loading what NextRead(key) reads, ahead of a loop that asks.
  void HintLoad(int64_t key) const { next_read_.HintLoad(key); }
  size_t MemoryBytes() const;

 private:
  struct Batch {
    uint32_t number = 0;
    bool taken = false;            // a step looked it up and prefetched what follows
    std::vector<int64_t> keys;     // distinct, in order of first appearance
    std::vector<uint32_t> next;    // keys[i]'s next staged batch, or kNoRead
    std::vector<int32_t> inverse;  // id i is keys[inverse[i]]
    bool Holds(const int64_t* ids, int64_t n) const;
  };
  // Where the oldest batch not taken is (0 or 1: only the front is ever
  // taken); batches_.size() if none is.
  size_t Untaken() const;
  // Moves the next reads of `batch`'s keys that point at it past it.
  void Pass(const Batch& batch, std::vector<int64_t>* moved);
  // Drops the oldest batch.
  void Forget(std::vector<int64_t>* moved);

  std::deque<Batch> batches_;
  KeyIndex next_read_;  // key -> the number of its next staged batch
  // key -> the last staged batch that reads it, and its place there: where
  // a batch staged later links it.
  KeyIndex last_number_;
  KeyIndex last_place_;
  KeyIndex seen_;  // Add's scratch
  uint32_t numbers_ = 0;
};

}  // namespace het

#endif  // HET_TF_EMBEDDING_CORE_STAGED_BATCHES_H_

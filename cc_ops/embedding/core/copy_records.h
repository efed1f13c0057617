// What a shard knows of the copies that worker caches hold of its rows, for
// the sync in which a hit costs no bytes (sync="refresh").
//
// For each worker cache that syncs this way the shard keeps the server clock
// of every copy it handed out or acknowledged. A push advances a row's
// clock; every other worker's copy that has then missed more updates than
// that worker's read bound is queued, and the worker's next sync takes the
// fresh state of each queued copy. A worker never asks about a row it
// holds, so a hit moves nothing.
//
// A worker names itself by a stable id and a generation taken when its
// cache is made or cleared. Generations order (NextGeneration): a newer one
// replaces the old record, so a restarted worker starts afresh, and an
// older one is refused (sender_log.h). Workers report their evictions with the
// next sync, which keeps each record within the cache's capacity plus one
// step's evictions.
//
// Not thread-safe: a shard keeps one CopyRecords per lock stripe, used
// under the stripe's lock, so that reading a row's clock and recording a
// copy of it, and a push of the row and its queueing, are each one step.
#ifndef HET_TF_EMBEDDING_CORE_COPY_RECORDS_H_
#define HET_TF_EMBEDDING_CORE_COPY_RECORDS_H_

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "cc_ops/embedding/core/key_index.h"

namespace het {

// Who sent an exchange or a push, and which of its rounds it is. A push
// with no sender (a plain push, or a test's) uses kNoWorker and is not
// sequenced.
struct Sender {
  static constexpr uint64_t kNoWorker = 0;
  uint64_t worker = kNoWorker;
  // The cache's incarnation: later incarnations have larger generations.
  uint64_t generation = 0;
  // The cache's round, counted from 1 in each generation: every exchange or
  // push goes to every shard with the round's number, and a round that got
  // no answer is sent again with the same number and the same pushes
  // (sender_log.h). 0: not sequenced.
  int64_t sequence = 0;
  // The shard's epoch as the cache last saw it, 0 before its first answer:
  // a shard with another epoch merges nothing.
  int64_t epoch = 0;
};

// A random nonzero id for epochs and workers not named: they must differ
// between shards and workers.
uint64_t DrawId();
// A generation larger than any this process handed out before and than the
// microseconds since 1970 (so a worker restarted later, on any machine whose
// clock has not gone back, has a larger one).
uint64_t NextGeneration();

class CopyRecord {
 public:
  CopyRecord(uint64_t generation, int64_t read_bound)
      : generation_(generation), read_bound_(read_bound) {}

  uint64_t generation() const { return generation_; }
  void set_read_bound(int64_t bound) { read_bound_ = bound; }
  size_t size() const { return index_.size(); }
  size_t MemoryBytes() const;

  // The worker now holds a copy of key at server clock `clock`: a miss it
  // fetched or a refresh it took.
  void Hold(int64_t key, int64_t clock);
  // The worker's own push of key left the row at `clock`, which its copy
  // takes; nothing is recorded if it no longer holds the key.
  void Acknowledged(int64_t key, int64_t clock);
  void Drop(int64_t key);
  bool Holds(int64_t key) const { return index_.Find(key) != KeyIndex::kAbsent; }
  // Another writer moved key's row to `clock`: queues the copy if it has
  // now missed more updates than the read bound allows.
  void Moved(int64_t key, int64_t clock);
  // Queues key's copy whatever its clock: its last refresh never reached
  // the worker (the answer that carried it was lost).
  void Requeue(int64_t key);
  // The queued keys still held, oldest first; the queue is emptied. Their
  // copies stay recorded at their old clocks until the caller Holds them.
  std::vector<int64_t> TakeQueued();

 private:
  uint64_t generation_;
  int64_t read_bound_;  // negative: unbounded, nothing is ever queued
  KeyIndex index_;      // key -> slot
  std::vector<int64_t> clock_;
  std::vector<uint8_t> queued_;
  std::vector<uint32_t> free_;
  std::vector<int64_t> queue_;
};

class CopyRecords {
 public:
  // The record of a syncing worker; a newer generation replaces the old one
  // (an older one never gets here: the sender log refuses it).
  CopyRecord* Begin(const Sender& sender, int64_t read_bound);
  // After a push that left key's row at `clock`: the sender's copy is the
  // row it gets back, every other worker's may be queued.
  void Pushed(const Sender& sender, int64_t key, int64_t clock);
  // The sender's copy of key never got its last refresh: queue it again.
  void Requeue(const Sender& sender, int64_t key);
  // The sender never took the copy of key it was handed: forget it.
  void Forget(const Sender& sender, int64_t key);
  // Whether any worker holds a copy of key: an evicting shard keeps it.
  bool Holds(int64_t key) const;
  size_t workers() const { return records_.size(); }
  size_t copies() const;
  size_t MemoryBytes() const;
  void Clear() { records_.clear(); }

 private:
  std::map<uint64_t, std::unique_ptr<CopyRecord>> records_;
};

}  // namespace het

#endif  // HET_TF_EMBEDDING_CORE_COPY_RECORDS_H_

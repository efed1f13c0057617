// What a shard remembers of each cache that pushes to it, so that every
// push is merged exactly once (docs/consistency.md, "Exactly once").
//
// A cache numbers its rounds: each exchange or push goes to every shard
// with the round's sequence number, and a round that got no answer (lost,
// or refused by another shard) is sent again with the same number and the
// same pushes. A shard merges round q of a generation only if it last
// merged q - 1; round q again is a repeat, which merges nothing and is
// answered with the rows as they are now; anything else is refused. The
// first round the shard sees of a generation (a new cache's, a restarted or
// cleared cache's, or any after the shard itself was cleared) is merged
// whatever its number; an older generation is refused by name, so a late
// message from a dead incarnation changes nothing.
//
// Per cache the log keeps its generation, its last round and the keys that
// round's answer refreshed (sent again on a repeat: the worker never got
// them) and served as misses (their copies forgotten on a repeat: the
// worker never took them), and the pushed keys it refused (named again on
// a repeat): about 100 bytes plus 8 a key. A cache's rounds are one at
// a time, and a Turn holds the cache's entry for the whole of one, so a
// retried round that overlaps its first attempt waits for it.
//
// After Clear (a restore) a shard knows no round: a cache that has had an
// answer knows the shard's epoch and is stopped by it first (table_shard.h).
#ifndef HET_TF_EMBEDDING_CORE_SENDER_LOG_H_
#define HET_TF_EMBEDDING_CORE_SENDER_LOG_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "cc_ops/common/status.h"
#include "cc_ops/embedding/core/copy_records.h"

namespace het {

class SenderLog {
  static constexpr int64_t kNone = -1;  // no round of this generation seen
  struct Entry {
    std::mutex mu;  // held for a whole round
    uint64_t generation = 0;
    int64_t sequence = kNone;        // the last round merged
    std::vector<int64_t> refreshed;  // the keys its answer refreshed
    std::vector<int64_t> served;     // and those it served as misses
    std::vector<int64_t> refused;    // and the pushed keys it refused
  };

 public:
  // One round of one sender, admitted: holds its entry until it goes away.
  class Turn {
   public:
    Turn() = default;
    // A round already merged: merge nothing, answer the rows as they are.
    bool repeat() const { return repeat_; }
    // The keys the last answer to this round refreshed, and served as
    // misses (a repeat's only: that answer was lost).
    const std::vector<int64_t>& lost_refreshes() const;
    const std::vector<int64_t>& lost_misses() const;
    // The pushed keys the round's first answer refused: a repeat names them
    // again, as the worker may never have heard.
    const std::vector<int64_t>& refused() const;
    // The round succeeded, its answer refreshing `refreshed`, serving
    // `served` and refusing `refused` (a repeat: the first's, refused()).
    void Done(std::vector<int64_t> refreshed, std::vector<int64_t> served = {},
              std::vector<int64_t> refused = {});

   private:
    friend class SenderLog;
    std::unique_lock<std::mutex> lock_;
    SenderLog* log_ = nullptr;
    Entry* entry_ = nullptr;
    int64_t sequence_ = 0;
    bool repeat_ = false;
  };

  // Admits the sender's round (sender.sequence > 0) or refuses it, naming
  // the table, the worker and why; nothing changes on a refusal.
  Status Admit(const std::string& table, const Sender& sender, Turn* turn);
  // Forgets every sender, as the shard's copy records are forgotten on a
  // restore: their next rounds meet a new epoch first.
  void Clear();

  uint64_t senders() const;
  size_t MemoryBytes() const;
  // Rounds answered as repeats, and rounds refused for an old generation or
  // a sequence out of order.
  uint64_t repeats() const { return repeats_.load(); }
  uint64_t stale_generations() const { return stale_generations_.load(); }
  uint64_t out_of_order() const { return out_of_order_.load(); }

 private:
  mutable std::mutex mu_;  // the map; entries are never erased
  std::map<uint64_t, std::unique_ptr<Entry>> entries_;
  std::atomic<size_t> keys_bytes_{0};  // of every entry's refreshed and served keys
  std::atomic<uint64_t> repeats_{0}, stale_generations_{0}, out_of_order_{0};
};

}  // namespace het

#endif  // HET_TF_EMBEDDING_CORE_SENDER_LOG_H_

// What a table shard hands out: its counters, the rows of a pull or a sync,
// the size of its copy records, and chunks of whole rows.
#ifndef HET_TF_EMBEDDING_CORE_TABLE_OUTPUTS_H_
#define HET_TF_EMBEDDING_CORE_TABLE_OUTPUTS_H_

#include <cstdint>
#include <vector>

namespace het {

struct TableCounters {
  uint64_t pull_requests = 0;
  uint64_t keys_checked = 0;    // keys received by pulls and gathers
  uint64_t rows_sent = 0;       // rows returned to workers
  uint64_t rows_refreshed = 0;  // of those, fresh states of copies past a read bound
  uint64_t push_requests = 0;
  uint64_t rows_pushed = 0;      // rows received with gradients
  uint64_t updates_applied = 0;  // sum of pushed update counts
  uint64_t rows_created = 0;
  uint64_t rows_evicted = 0;      // dropped to make room (on_full = kEvict)
  uint64_t rows_expired = 0;      // dropped unused for longer than the ttl
  uint64_t ids_not_admitted = 0;  // training reads of ids not admitted yet
  uint64_t updates_dropped = 0;   // pushed updates of ids the shard does not hold
  // Updates refused because they would have turned a row non-finite: a
  // round's, alone, or one whose row another push moved during the push
  // (TableShard::ApplyToRows). The rows keep their state.
  uint64_t updates_refused_non_finite = 0;
  uint64_t bytes_received = 0;
  uint64_t bytes_sent = 0;
  // Exactly once (sender_log.h): rounds answered as repeats, merging
  // nothing, and rounds refused before anything changed, by cause.
  uint64_t repeats = 0;
  uint64_t refused_epoch = 0;       // the sender saw another epoch
  uint64_t refused_generation = 0;  // an older incarnation of the sender
  uint64_t refused_sequence = 0;    // a round out of order
};

// Rows handed to a worker by Pull: only those that were missing or stale.
struct PulledRows {
  std::vector<int32_t> positions;  // into the request's key list, ascending
  std::vector<float> values;       // positions.size() * (dim, or StateWidth with slots)
  std::vector<int64_t> clocks;
  // The shard's epoch as the pull began: a cache whose copies are of an
  // earlier one learns that the rows were replaced (a restore it missed).
  int64_t epoch = 0;
};

// A sync's answer: the misses' clocks in request order, with the states of
// those not rebuilt (miss_rebuilt: a bit each, as exchange_wire.h has it),
// and the fresh states of the sender's copies that went past its read bound.
struct SyncedRows {
  std::vector<float> miss_states;  // (misses - rebuilt) * StateWidth
  std::vector<int64_t> miss_clocks;
  std::vector<uint8_t> miss_rebuilt;
  std::vector<int64_t> refresh_keys;
  std::vector<float> refresh_states;
  std::vector<int64_t> refresh_clocks;
};

// What the shard's copy records hold, for the memory report.
struct RecordSizes {
  uint64_t workers = 0;
  uint64_t copies = 0;
  uint64_t bytes = 0;
};

// A chunk of a table for checkpoints and resharding.
struct TableChunk {
  std::vector<int64_t> keys;
  std::vector<float> values;  // keys.size() * dim
  std::vector<float> slots;   // keys.size() * num_slots * dim
  std::vector<int64_t> clocks;
  std::vector<int64_t> steps;
};

}  // namespace het

#endif  // HET_TF_EMBEDDING_CORE_TABLE_OUTPUTS_H_

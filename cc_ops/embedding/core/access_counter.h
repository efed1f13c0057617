// Exact access counts per key: FAE's profile of a table's hot rows.
//
// A profiling pass feeds it the ids of a sample of the training input and
// asks for the most accessed keys. Counts are exact: 32 to 48 bytes a distinct key
// (the index's 16 to 32 between its growths, the key and its count), so
// 34M distinct keys, all of Criteo's, take at most 1.6 GB. A sketch would bound the
// memory below that, at the price of keys counted wrongly at the budget's
// edge; docs/fae.md says why exact counts are the choice here.
#ifndef HET_TF_EMBEDDING_CORE_ACCESS_COUNTER_H_
#define HET_TF_EMBEDDING_CORE_ACCESS_COUNTER_H_

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "cc_ops/common/status.h"
#include "cc_ops/embedding/core/key_index.h"

namespace het {

struct AccessCounterConfig {
  std::string table_name;
  int64_t vocabulary_size = -1;  // ids must be in [0, vocabulary_size); -1: any int64
};

class AccessCounter {
 public:
  static Status Create(const AccessCounterConfig& config, std::unique_ptr<AccessCounter>* out);

  // Counts one access of each of n ids (repeats count again). Checks every
  // id first: a bad batch counts nothing.
  Status Add(const int64_t* ids, int64_t n);
  // The k most accessed keys (all of them if fewer), most first; equal
  // counts in ascending key order, so the answer depends only on the counts.
  void Hottest(int64_t k, std::vector<int64_t>* keys, std::vector<int64_t>* counts) const;
  int64_t distinct() const;
  int64_t total() const;
  void Clear();

  const AccessCounterConfig& config() const { return config_; }
  const std::string& table_name() const { return config_.table_name; }
  int dim() const { return 0; }
  size_t MemoryBytes() const;

 private:
  explicit AccessCounter(const AccessCounterConfig& config) : config_(config) {}

  const AccessCounterConfig config_;
  mutable std::mutex mu_;
  KeyIndex index_;  // key -> place in keys_ and counts_
  std::vector<int64_t> keys_;
  std::vector<int64_t> counts_;
  int64_t total_ = 0;
};

}  // namespace het

#endif  // HET_TF_EMBEDDING_CORE_ACCESS_COUNTER_H_

// Drives worker caches against in-process table shards the way the TF ops
// do across devices: by check, prepare, pull per shard, complete and
// accumulate, push per shard, acknowledge; by refresh, one exchange per
// shard a step and a local accumulate. Used by the tests to check the sync rules end to end.
#ifndef HET_TF_EMBEDDING_CORE_TESTS_LOCAL_CLUSTER_H_
#define HET_TF_EMBEDDING_CORE_TESTS_LOCAL_CLUSTER_H_

#include <algorithm>
#include <map>
#include <memory>
#include <vector>

#include "cc_ops/common/hashing.h"
#include "cc_ops/embedding/core/table_shard.h"
#include "cc_ops/embedding/core/worker_cache.h"

namespace het_test {

// A one-field SGD table named "emb".
inline het::TableConfig SgdTable(int dim) {
  het::TableConfig c;
  c.name = "emb";
  c.dim = dim;
  c.optimizer.kind = het::OptimizerKind::kSGD;
  return c;
}

// An LRU cache of SgdTable's table that syncs by refresh.
inline std::unique_ptr<het::WorkerCache> RefreshCache(int dim, int64_t capacity, int64_t s_read,
                                                      int64_t s_write, int shards) {
  het::CacheConfig c;
  c.table_name = "emb";
  c.dim = dim;
  c.capacity = capacity;
  c.policy = het::CachePolicy::kLRU;
  c.read_staleness = s_read;
  c.write_staleness = s_write;
  c.num_shards = shards;
  std::unique_ptr<het::WorkerCache> cache;
  if (!het::WorkerCache::Create(c, &cache).ok()) std::abort();
  return cache;
}

// The settings of a cache of `table` on `shards` shards, for the caller to
// adjust, and a cache made from them.
inline het::CacheConfig CacheConfigOf(const het::TableConfig& table, int shards) {
  het::CacheConfig c;
  c.table_name = table.name;
  c.dim = table.dim;
  c.optimizer = table.optimizer;
  c.initializer = table.initializer;
  c.num_shards = shards;
  return c;
}
inline std::unique_ptr<het::WorkerCache> MakeCache(const het::CacheConfig& config) {
  std::unique_ptr<het::WorkerCache> cache;
  if (!het::WorkerCache::Create(config, &cache).ok()) std::abort();
  return cache;
}

class LocalCluster {
 public:
  LocalCluster(const het::TableConfig& table, int num_shards) : dim_(table.dim) {
    for (int s = 0; s < num_shards; ++s) {
      std::unique_ptr<het::TableShard> shard;
      het::Status st = het::TableShard::Create(table, &shard);
      if (!st.ok()) std::abort();
      shards_.push_back(std::move(shard));
    }
  }

  int num_shards() const { return static_cast<int>(shards_.size()); }
  het::TableShard& shard(int s) { return *shards_[s]; }
  het::TableShard& ShardOfKey(int64_t key) { return *shards_[het::ShardOf(key, num_shards())]; }

  // Every row of every shard, by key, with its clock.
  std::map<int64_t, std::vector<float>> Contents(std::map<int64_t, int64_t>* clocks = nullptr) {
    std::map<int64_t, std::vector<float>> out;
    for (auto& shard : shards_) {
      het::TableChunk chunk;
      shard->Export(0, 1 << 30, &chunk);
      for (size_t i = 0; i < chunk.keys.size(); ++i) {
        out[chunk.keys[i]] = std::vector<float>(chunk.values.begin() + i * dim_,
                                                chunk.values.begin() + (i + 1) * dim_);
        if (clocks) (*clocks)[chunk.keys[i]] = chunk.clocks[i];
      }
    }
    return out;
  }

  // The no-cache path: gather rows, push each unique key's summed gradient.
  het::Status GatherRows(const std::vector<int64_t>& keys, std::vector<float>* rows) {
    rows->assign(keys.size() * dim_, 0.0f);
    for (size_t i = 0; i < keys.size(); ++i) {
      HET_RETURN_IF_ERROR(ShardOfKey(keys[i]).Gather(&keys[i], 1, rows->data() + i * dim_));
    }
    return het::Status::Ok();
  }

  // The no-cache write: each key's gradient applied by its shard.
  het::Status PushGradients(const std::vector<int64_t>& keys, const std::vector<float>& grads,
                            float lr) {
    for (size_t i = 0; i < keys.size(); ++i) {
      const int64_t one = 1;
      HET_RETURN_IF_ERROR(ShardOfKey(keys[i]).Push(&keys[i], grads.data() + i * dim_, &one, 1, lr,
                                                   nullptr, nullptr));
    }
    return het::Status::Ok();
  }

  // A cached lookup: returns the unique keys, the inverse map and their rows.
  // Training syncs the way the cache is set to; evaluation checks.
  het::Status Lookup(het::WorkerCache& cache, const std::vector<int64_t>& ids, bool training,
                     het::LookupPlan* plan, std::vector<float>* unique_rows) {
    if (training && cache.config().sync == het::SyncMode::kRefresh) {
      het::ExchangePlan exchange;
      HET_RETURN_IF_ERROR(Exchange(cache, ids, &exchange, unique_rows));
      plan->unique_keys = exchange.unique_keys;
      plan->inverse = exchange.inverse;
      plan->read_staleness = exchange.read_staleness;
      return het::Status::Ok();
    }
    HET_RETURN_IF_ERROR(cache.Prepare(ids.data(), ids.size(), plan));
    const int64_t u = plan->unique_keys.size();
    std::vector<int32_t> positions;
    std::vector<float> rows;
    std::vector<int64_t> clocks, epochs(num_shards());
    for (int s = 0; s < num_shards(); ++s) epochs[s] = shards_[s]->epoch();
    // Ask each key's shard; answers come back in the order of the plan.
    for (int64_t i = 0; i < u; ++i) {
      het::PulledRows pulled;
      HET_RETURN_IF_ERROR(ShardOfKey(plan->unique_keys[i])
                              .Pull(&plan->unique_keys[i], &plan->clocks[i], 1,
                                    plan->read_staleness, training, &pulled, training));
      epochs[het::ShardOf(plan->unique_keys[i], num_shards())] = pulled.epoch;
      if (!pulled.positions.empty()) {
        positions.push_back(static_cast<int32_t>(i));
        rows.insert(rows.end(), pulled.values.begin(), pulled.values.end());
        clocks.push_back(pulled.clocks[0]);
      }
    }
    unique_rows->assign(u * dim_, 0.0f);
    return cache.Complete(plan->unique_keys.data(), u, positions.data(), positions.size(),
                          rows.data(), clocks.data(), training, unique_rows->data(), epochs.data());
  }

  // A training lookup by refresh: one exchange with every shard, which
  // also carries the pushes the last update made due.
  // With carry_updates false, a Prefetch later in the step carries the
  // pushes and evictions (the lookahead's step).
  het::Status Exchange(het::WorkerCache& cache, const std::vector<int64_t>& ids,
                       het::ExchangePlan* plan, std::vector<float>* unique_rows,
                       bool carry_updates = true) {
    HET_RETURN_IF_ERROR(cache.BeginExchange(ids.data(), ids.size(), plan, carry_updates));
    Answers answers;
    HET_RETURN_IF_ERROR(Serve(*plan, &answers));
    const int64_t u = plan->unique_keys.size();
    unique_rows->assign(u * dim_, 0.0f);
    return cache.EndExchange(plan->unique_keys.data(), u, answers.data.data(), answers.sizes.data(),
                             num_shards(), unique_rows->data());
  }

  // The first half of a refresh exchange and the shards' side of it; their
  // answers never arrive. `requests`, if given, receives what was sent.
  het::Status ExchangeLosingAnswers(het::WorkerCache& cache, const std::vector<int64_t>& ids,
                                    bool carry_updates = true,
                                    std::vector<std::vector<uint8_t>>* requests = nullptr) {
    het::ExchangePlan plan;
    HET_RETURN_IF_ERROR(cache.BeginExchange(ids.data(), ids.size(), &plan, carry_updates));
    for (int s = 0; s < num_shards(); ++s) {
      std::vector<uint8_t> answer;
      HET_RETURN_IF_ERROR(
          shards_[s]->Exchange(plan.requests[s].data(), plan.requests[s].size(), &answer));
    }
    if (requests != nullptr) *requests = plan.requests;
    return het::Status::Aborted("the answers were lost");
  }

  // The lookahead's half of a step whose lookup of `current` is done: the
  // batch staged after it comes in, with the pushes due.
  het::Status Prefetch(het::WorkerCache& cache, const std::vector<int64_t>& current,
                       het::ExchangePlan* plan) {
    HET_RETURN_IF_ERROR(cache.BeginPrefetch(current.data(), current.size(), plan));
    Answers answers;
    HET_RETURN_IF_ERROR(Serve(*plan, &answers));
    return cache.EndPrefetch(plan->unique_keys.data(), plan->unique_keys.size(),
                             answers.data.data(), answers.sizes.data(), num_shards());
  }

  het::Status Update(het::WorkerCache& cache, const std::vector<int64_t>& unique_keys,
                     const std::vector<float>& grads, float lr) {
    het::Pushes due;
    HET_RETURN_IF_ERROR(
        cache.Accumulate(unique_keys.data(), unique_keys.size(), grads.data(), lr, &due));
    return PushAndAck(cache, due, lr);
  }

  // Flushes the cache; then true if every update it pushed was applied and
  // this cluster's rows and clocks equal `direct`'s (a no-cache twin).
  bool FlushedEquals(het::WorkerCache& cache, LocalCluster& direct, float lr) {
    if (!Flush(cache, lr).ok()) return false;
    uint64_t applied = 0;
    for (auto& shard : shards_) applied += shard->Counters().updates_applied;
    std::map<int64_t, int64_t> clocks, direct_clocks;
    return applied == cache.Counters().updates_pushed &&
           Contents(&clocks) == direct.Contents(&direct_clocks) && clocks == direct_clocks;
  }

  // A flush that finds an earlier round still in flight pushes that round
  // first, then flushes again.
  het::Status Flush(het::WorkerCache& cache, float lr) {
    for (bool again = true; again;) {
      het::Pushes pending;
      again = cache.Flush(&pending);
      HET_RETURN_IF_ERROR(PushAndAck(cache, pending, lr));
    }
    return het::Status::Ok();
  }

  // A round's push: each shard gets its part (its evicted rows leading)
  // with the round's sender, as HetTablePushDeltas gets it; `drop_answer`
  // loses the answer of shard s after it merged (nothing is acknowledged).
  // Rows acknowledged lean come without their states, as the op's do.
  het::Status PushAndAck(het::WorkerCache& cache, const het::Pushes& p, float lr,
                         int drop_answer = -1) {
    const int width = cache.width();
    const int n = num_shards();
    std::vector<het::Pushes> parts(n);
    std::vector<std::vector<size_t>> origin(n);
    for (size_t i = 0; i < p.size(); ++i) {
      const int s = het::ShardOf(p.keys[i], n);
      parts[s].Add(p.keys[i], p.deltas.data() + i * width, width, p.counts[i], p.base_clocks[i]);
      if (static_cast<int64_t>(i) < p.evicted) ++parts[s].evicted;
      origin[s].push_back(i);
    }
    const int64_t answered = static_cast<int64_t>(p.size()) - p.evicted;
    std::vector<const float*> rows(answered, nullptr);
    std::vector<std::vector<float>> part_states(n);
    std::vector<int64_t> clocks(answered);
    std::vector<uint8_t> lean(answered, 0);
    std::vector<int64_t> epochs(n), refused;
    for (int s = 0; s < n; ++s) {
      const het::Pushes& part = parts[s];
      const int64_t m = static_cast<int64_t>(part.size()) - part.evicted;
      part_states[s].resize(m * width);
      std::vector<int64_t> part_clocks(m);
      std::vector<uint8_t> part_lean(m);
      HET_RETURN_IF_ERROR(shards_[s]->PushDeltas(
          part.keys.data(), part.deltas.data(), part.counts.data(), part.base_clocks.data(),
          static_cast<int64_t>(part.size()), lr, part_states[s].data(), part_clocks.data(),
          cache.RoundSender(s), part.evicted, &epochs[s], part_lean.data(), &refused));
      if (s == drop_answer) return het::Status::Aborted("the answer was lost");
      int64_t whole = 0;
      for (int64_t j = 0; j < m; ++j) {
        const size_t at = origin[s][part.evicted + j] - p.evicted;
        clocks[at] = part_clocks[j];
        lean[at] = part_lean[j];
        if (!lean[at]) rows[at] = part_states[s].data() + whole++ * width;
      }
    }
    std::vector<float> states;
    for (const float* row : rows) {
      if (row != nullptr) states.insert(states.end(), row, row + width);
    }
    return cache.AckPush(p.keys.data(), p.size(), p.counts.data(), states.data(), clocks.data(),
                         answered, epochs.data(), lean.data(), refused);
  }

 private:
  struct Answers {
    std::vector<std::vector<uint8_t>> bytes;
    std::vector<const uint8_t*> data;
    std::vector<size_t> sizes;
  };

  // Each shard answers its request.
  het::Status Serve(const het::ExchangePlan& plan, Answers* out) {
    const int n = num_shards();
    out->bytes.resize(n);
    out->data.resize(n);
    out->sizes.resize(n);
    for (int s = 0; s < n; ++s) {
      HET_RETURN_IF_ERROR(
          shards_[s]->Exchange(plan.requests[s].data(), plan.requests[s].size(), &out->bytes[s]));
      out->data[s] = out->bytes[s].data();
      out->sizes[s] = out->bytes[s].size();
    }
    return het::Status::Ok();
  }

  int dim_;
  std::vector<std::unique_ptr<het::TableShard>> shards_;
};

}  // namespace het_test

#endif  // HET_TF_EMBEDDING_CORE_TESTS_LOCAL_CLUSTER_H_

#include "cc_ops/embedding/core/belady_floor.h"

#include <algorithm>
#include <limits>
#include <set>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "cc_ops/common/hashing.h"
#include "cc_ops/embedding/core/exchange_wire.h"
#include "cc_ops/embedding/core/wire_sizes.h"

namespace het {

namespace {

constexpr int64_t kNever = std::numeric_limits<int64_t>::max();

// Each step's unique keys, in first-seen order, with the step each is used
// next (kNever: not again).
struct Steps {
  std::vector<int64_t> offsets{0};
  std::vector<int64_t> keys, next_use;
};

Steps UniqueSteps(const int64_t* keys, const int64_t* offsets, int64_t steps) {
  Steps out;
  std::unordered_map<int64_t, int64_t> seen;
  for (int64_t t = 0; t < steps; ++t) {
    seen.clear();
    for (int64_t i = offsets[t]; i < offsets[t + 1]; ++i) {
      if (seen.emplace(keys[i], 0).second) out.keys.push_back(keys[i]);
    }
    out.offsets.push_back(static_cast<int64_t>(out.keys.size()));
  }
  out.next_use.assign(out.keys.size(), kNever);
  std::unordered_map<int64_t, int64_t> next;  // key -> the next step using it
  for (int64_t t = steps - 1; t >= 0; --t) {
    for (int64_t i = out.offsets[t]; i < out.offsets[t + 1]; ++i) {
      auto it = next.find(out.keys[i]);
      if (it != next.end()) out.next_use[i] = it->second;
      next[out.keys[i]] = t;
    }
  }
  return out;
}

// One step's messages to every shard: what the measured protocol sends.
struct Messages {
  explicit Messages(int shards)
      : misses(shards), made(shards), evicted(shards), unanswered(shards), bound(shards) {}
  std::vector<std::vector<int64_t>> misses;
  std::vector<std::vector<uint8_t>> made;  // each miss: the shard makes its row for this worker
  std::vector<std::vector<int64_t>> evicted, unanswered, bound;
};

// The bytes of one step's exchange with each shard under `sync`, for
// `unique` keys looked up; rows are zeros (their size is what counts).
void CountBytes(const FloorConfig& config, const Messages& m, int64_t unique,
                std::vector<float>* zeros, FloorCounts* out) {
  const int shards = config.num_shards;
  if (config.sync == SyncMode::kCheck) {
    int64_t fetched = 0, pushed = 0, answered = 0;
    for (int s = 0; s < shards; ++s) {
      fetched += static_cast<int64_t>(m.misses[s].size());
      pushed += static_cast<int64_t>(m.unanswered[s].size() + m.bound[s].size());
      answered += static_cast<int64_t>(m.bound[s].size());
    }
    out->bytes_sent += wire::PullRequest(unique, shards);
    out->bytes_received += wire::PullAnswer(fetched, config.width) + wire::EpochAnswer(shards);
    if (pushed > 0) {
      out->bytes_sent += wire::PushRequest(pushed, config.width, /*delta=*/true, shards);
      // Every push the write bound makes is taken as one no other writer
      // met, acknowledged by its clock alone: the least it can cost.
      out->bytes_received += wire::DeltaPushAnswer(answered, config.width, answered);
    }
    return;
  }
  for (int s = 0; s < shards; ++s) {
    wire::ExchangeRequest request;
    request.width = request.dim = config.width;  // sizes need no split
    request.row_type = config.row_type;
    request.initial_state = 1;  // the worker makes the rows made for it
    request.misses = m.misses[s];
    request.evicted = m.evicted[s];
    request.push_keys = m.unanswered[s];
    request.push_keys.insert(request.push_keys.end(), m.bound[s].begin(), m.bound[s].end());
    request.push_unanswered = static_cast<int64_t>(m.unanswered[s].size());
    const int64_t pushes = static_cast<int64_t>(request.push_keys.size());
    request.push_counts.assign(pushes, 1);
    request.push_base_clocks.assign(pushes, 0);
    const int64_t rows = std::max<int64_t>(pushes, static_cast<int64_t>(m.misses[s].size()));
    if (static_cast<int64_t>(zeros->size()) < rows * config.width) {
      zeros->assign(rows * config.width, 0.0f);
    }
    request.push_deltas = {zeros->data(), pushes};
    wire::ExchangeAnswer answer;
    answer.width = answer.dim = config.width;
    answer.row_type = config.row_type;
    answer.push_states = {zeros->data(), 0};
    answer.push_clocks.assign(m.bound[s].size(), 0);
    const std::vector<uint8_t> lean(m.bound[s].size(), 1);
    answer.push_lean = wire::PackFlags(lean.data(), lean.size());
    const size_t misses = m.misses[s].size();
    answer.miss_rebuilt = wire::PackFlags(m.made[s].data(), misses);
    answer.miss_states = {zeros->data(),
                          static_cast<int64_t>(misses) - wire::FlagCount(answer.miss_rebuilt)};
    answer.miss_clocks.assign(misses, 0);
    std::vector<uint8_t> bytes;
    wire::EncodeRequest(request, &bytes);
    out->bytes_sent += bytes.size();
    wire::EncodeAnswer(answer, &bytes);
    out->bytes_received += bytes.size();
  }
}

// What the real run's refreshes cost: under "check" each is a pulled row;
// under "refresh" what an answer gains with them, each a key, a clock and a
// state (the columns narrow as the trace's keys allow).
uint64_t RefreshBytes(const FloorConfig& config, const std::vector<int64_t>& keys) {
  if (config.refreshes == 0) return 0;
  if (config.sync == SyncMode::kCheck) return wire::PullAnswer(config.refreshes, config.width);
  const std::vector<float> zeros(2 * static_cast<size_t>(config.width), 0.0f);
  // The two keys furthest apart: the width their column needs.
  const auto range = std::minmax_element(keys.begin(), keys.end());
  const int64_t ends[2] = {keys.empty() ? 0 : *range.first, keys.empty() ? 0 : *range.second};
  auto size = [&](int64_t rows) {
    wire::ExchangeAnswer answer;
    answer.width = answer.dim = config.width;
    answer.row_type = config.row_type;
    answer.refresh_keys.assign(ends, ends + rows);
    answer.refresh_clocks.assign(rows, 0);
    answer.refresh_states = {zeros.data(), rows};
    std::vector<uint8_t> bytes;
    wire::EncodeAnswer(answer, &bytes);
    return static_cast<uint64_t>(bytes.size());
  };
  // Linear past the first row: the columns' fixed part, then each row's.
  const uint64_t first = size(1) - size(0), each = size(2) - size(1);
  return first + each * static_cast<uint64_t>(config.refreshes - 1);
}

Status Check(const int64_t* offsets, int64_t steps, const FloorConfig& config) {
  if (config.capacity < 1 || config.width < 1 || config.num_shards < 1 || steps < 0 ||
      config.refreshes < 0 || config.refreshes > (int64_t{1} << 40)) {
    return Status::InvalidArgument(
        "the Belady floor needs capacity >= 1, width >= 1, num_shards >= 1, steps >= 0 and "
        "0 <= refreshes <= 2^40; got capacity " +
        std::to_string(config.capacity) + ", width " + std::to_string(config.width) +
        ", num_shards " + std::to_string(config.num_shards) + ", steps " + std::to_string(steps) +
        ", refreshes " + std::to_string(config.refreshes));
  }
  if (steps > 0 && offsets[0] != 0) {
    return Status::InvalidArgument("the Belady floor's step offsets must start at 0");
  }
  for (int64_t t = 0; t < steps; ++t) {
    if (offsets[t + 1] < offsets[t]) {
      return Status::InvalidArgument("the Belady floor's step offsets must not decrease (step " +
                                     std::to_string(t) + ")");
    }
  }
  return Status::Ok();
}

}  // namespace

Status ReplayBelady(const int64_t* keys, const int64_t* offsets, int64_t steps,
                    const int64_t* made_keys, int64_t num_made, const FloorConfig& config,
                    FloorCounts* out) {
  HET_RETURN_IF_ERROR(Check(offsets, steps, config));
  *out = FloorCounts();
  const Steps s = UniqueSteps(keys, offsets, steps);
  // Under "refresh" a row the shard makes for this worker's first touch
  // comes as its clock alone; under "check" every row comes whole.
  std::unordered_set<int64_t> made;  // keys whose first touch is still to come
  if (config.sync == SyncMode::kRefresh) made.insert(made_keys, made_keys + num_made);
  struct Entry {
    int64_t order = kNever;  // its place in by_next_use
    int64_t pending = 0;     // local updates not pushed
    int64_t used = -1;       // the last step that looked it up
  };
  std::unordered_map<int64_t, Entry> cache;
  // (order, key) of every cached row, the row to evict last. A row's order
  // is its next use; during a step whose rows fit, this step's rows are at
  // `t`, before every other, as they must stay; a step with more rows than
  // the capacity keeps those used soonest after it, of its own or not.
  std::set<std::pair<int64_t, int64_t>> by_next_use;
  auto place = [&by_next_use](int64_t key, Entry* entry, int64_t order) {
    by_next_use.erase({entry->order, key});
    entry->order = order;
    by_next_use.insert({order, key});
  };
  const int shards = config.num_shards;
  // What the step before left to send: evictions and their pushes, rows
  // passed through, the write bound's pushes.
  Messages carried(shards);
  std::vector<float> zeros;
  for (int64_t t = 0; t < steps; ++t) {
    Messages m = std::move(carried);
    carried = Messages(shards);
    const bool overflow = s.offsets[t + 1] - s.offsets[t] > config.capacity;
    std::vector<int64_t> missed;  // indices into s.keys
    for (int64_t i = s.offsets[t]; i < s.offsets[t + 1]; ++i) {
      const int64_t key = s.keys[i];
      auto it = cache.find(key);
      if (it == cache.end()) {
        const int shard = ShardOf(key, shards);
        const bool makes = made.erase(key) > 0;
        out->made += makes;
        m.misses[shard].push_back(key);
        m.made[shard].push_back(makes);
        missed.push_back(i);
        continue;
      }
      it->second.used = t;
      place(key, &it->second, overflow ? s.next_use[i] : t);
    }
    CountBytes(config, m, s.offsets[t + 1] - s.offsets[t], &zeros, out);
    for (int sh = 0; sh < shards; ++sh) {
      out->pushes += static_cast<int64_t>(m.unanswered[sh].size() + m.bound[sh].size());
    }
    // The answers' rows go in, each in place of the row used furthest
    // ahead; what does not fit passes through, read and pushed back.
    std::sort(missed.begin(), missed.end(),
              [&s](int64_t a, int64_t b) { return s.next_use[a] < s.next_use[b]; });
    for (int64_t i : missed) {
      const int64_t key = s.keys[i];
      const int64_t order = overflow ? s.next_use[i] : t;
      ++out->misses;
      if (static_cast<int64_t>(cache.size()) >= config.capacity) {
        const auto victim = std::prev(by_next_use.end());
        if (overflow ? victim->first <= order : victim->first == t) {
          ++out->passed_through;
          carried.unanswered[ShardOf(key, shards)].push_back(key);
          continue;
        }
        const int64_t gone = victim->second;
        const Entry& left = cache[gone];
        const int shard = ShardOf(gone, shards);
        carried.evicted[shard].push_back(gone);
        // A row of this step leaves with this step's update.
        if (left.pending > 0 || left.used == t) carried.unanswered[shard].push_back(gone);
        ++out->evictions;
        by_next_use.erase(victim);
        cache.erase(gone);
      }
      Entry& entry = cache[key];
      entry.used = t;
      place(key, &entry, order);
    }
    // The step's updates, and the pushes the write bound makes due.
    for (int64_t i = s.offsets[t]; i < s.offsets[t + 1]; ++i) {
      auto it = cache.find(s.keys[i]);
      if (it == cache.end()) continue;  // passed through
      place(it->first, &it->second, s.next_use[i]);
      if (++it->second.pending > config.write_staleness && config.write_staleness >= 0) {
        carried.bound[ShardOf(it->first, shards)].push_back(it->first);
        it->second.pending = 0;
      }
    }
    out->unique_keys += s.offsets[t + 1] - s.offsets[t];
  }
  // What the last step left, then the flush of every row with updates.
  // They go together, unanswered.
  int64_t last = 0;
  for (const auto& entry : cache) out->flushed += entry.second.pending > 0;
  for (int sh = 0; sh < shards; ++sh) {
    last += static_cast<int64_t>(carried.unanswered[sh].size() + carried.bound[sh].size());
  }
  out->steps = steps;
  out->pushes += last + out->flushed;
  out->bytes_received += RefreshBytes(config, s.keys);
  if (last + out->flushed > 0) {
    out->bytes_sent += wire::PushRequest(last + out->flushed, config.width, /*delta=*/true, shards);
  }
  return Status::Ok();
}

}  // namespace het

// The messages of a training step's exchange under sync="refresh": one
// request from a worker's cache to each table shard and one answer back,
// each a single byte string (a uint8 tensor between devices). A step's
// pushes, evictions and misses travel together, so the exchange is one
// transfer each way per shard, and the bytes counted are the bytes sent.
//
// Every message opens with a magic word and the wire's version: a worker
// and a shard of different versions refuse each other's messages by name
// (a change to the layout bumps kWireVersion).
//
// Layout: little-endian (both ends run the same build), every section
// 4-byte aligned so that rows are read in place. An integer column holds
// its smallest value and 4-byte offsets from it when every value lies
// within 2^32 of that (keys of a vocabulary below 2^32, clocks, counts),
// 8-byte values otherwise. Decoding checks every length against the
// message and the table: a malformed message is refused, never read past.
#ifndef HET_TF_EMBEDDING_CORE_EXCHANGE_WIRE_H_
#define HET_TF_EMBEDDING_CORE_EXCHANGE_WIRE_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "cc_ops/common/status.h"
#include "cc_ops/embedding/core/copy_records.h"
#include "cc_ops/embedding/core/row_codec.h"

namespace het {
namespace wire {

// Rows of `width` floats: borrowed from the writer's memory when encoding;
// when decoded, pointing into the message (float32) or into `decoded` (a
// 16-bit wire's, made float again), which a move keeps.
struct Rows {
  Rows() = default;
  Rows(const float* data, int64_t rows) : data(data), rows(rows) {}
  const float* data = nullptr;
  int64_t rows = 0;
  std::vector<float> decoded;
};

// 2: requests carry their round's sequence number and the epoch the worker
// last saw (sender_log.h). 3: requests name the initial states the worker
// can rebuild, and answers send a row made for the request as its clock
// alone (a first touch moves no row). 4: answers acknowledge a push no
// other writer met by its clock alone (lean acknowledgements). 5: answers
// name the pushed keys whose updates the shard refused. 6: the header names
// the type the rows travel in (row_codec.h); a push's evicted rows travel in
// float32 whatever it is.
// The tensor ops that carry rows between a worker and a shard (a gather, a
// pull, a push, a read) carry it too, as their wire_version attr.
constexpr uint32_t kWireVersion = 6;

// A tensor op's wire version (0: sent by a build before the ops carried
// one) against this build's, naming `table`.
Status CheckVersion(const std::string& table, int64_t version);

struct ExchangeRequest {
  Sender sender;               // with the round's sequence and the epoch the worker saw
  int64_t read_staleness = 0;  // the read bound in force
  float learning_rate = 0.0f;  // of the pushes
  int32_t width = 0;           // floats of a row's state, checked by the shard
  int32_t dim = 0;             // of them, the row's values (not on the wire)
  // The type of the rows; the answer comes in the same. A round's
  // rows are rounded to it before the round starts (RoundDelta), so
  // encoding them is exact, but the first push_unanswered go in float32.
  RowType row_type = RowType::kFloat32;
  // InitialStateFingerprint of the rows this worker can make itself
  // (initial_state.h); 0: none.
  uint64_t initial_state = 0;
  std::vector<int64_t> misses;   // unique keys not cached, in the batch's order
  std::vector<int64_t> evicted;  // copies dropped since the last completed exchange
  // The pushes due: the first `push_unanswered` rows were evicted and want
  // no state back.
  std::vector<int64_t> push_keys, push_counts, push_base_clocks;
  int64_t push_unanswered = 0;
  Rows push_deltas;
};

struct ExchangeAnswer {
  int64_t epoch = 0;  // the shard's (TableShard::epoch)
  int32_t width = 0;
  int32_t dim = 0;                       // not on the wire
  RowType row_type = RowType::kFloat32;  // the request's
  // Each answered push's clock after the merge, in order, and the rows of
  // those not lean. A push is lean (its flag in push_lean set) when no
  // other writer reached the row since the push's base clock: the worker
  // computed the merge itself.
  Rows push_states;
  std::vector<int64_t> push_clocks;
  std::vector<uint8_t> push_lean;  // empty: none
  // Pushed keys whose update the shard refused, as it would have made the
  // row non-finite (answered or not); an answered one's row is as it was.
  std::vector<int64_t> refused_keys;
  // Every miss's clock, in the request's order; the states of those not
  // rebuilt, in the same order. A miss is rebuilt (its flag in
  // miss_rebuilt set) when the shard made its row for this request from the
  // initial state the request named: the worker makes it.
  Rows miss_states;
  std::vector<int64_t> miss_clocks;
  std::vector<uint8_t> miss_rebuilt;  // empty: none
  std::vector<int64_t> refresh_keys;  // the sender's copies past its read bound
  Rows refresh_states;
  std::vector<int64_t> refresh_clocks;
};

// Flags of an answer's rows, a bit each (bit i % 8 of byte i / 8), empty
// when none is set: whether row i is flagged, how many are, and one byte a
// flag packed into bits.
inline bool Flagged(const std::vector<uint8_t>& bits, size_t i) {
  return i / 8 < bits.size() && (bits[i / 8] >> (i % 8) & 1) != 0;
}
inline int64_t FlagCount(const std::vector<uint8_t>& bits) {
  int64_t n = 0;
  for (uint8_t byte : bits) n += __builtin_popcount(byte);
  return n;
}
std::vector<uint8_t> PackFlags(const uint8_t* flags, size_t n);

void EncodeRequest(const ExchangeRequest& request, std::vector<uint8_t>* out);
void EncodeAnswer(const ExchangeAnswer& answer, std::vector<uint8_t>* out);
// `table` names the table in errors. Decoded float32 rows point into `data`,
// which must outlive them and be 4-byte aligned. The caller sets `width`
// and `dim` (its own) and, for an answer, the `row_type` it asked in; a
// request's row type is read.
Status DecodeRequest(const std::string& table, const uint8_t* data, size_t size,
                     ExchangeRequest* out);
Status DecodeAnswer(const std::string& table, const uint8_t* data, size_t size,
                    ExchangeAnswer* out);

}  // namespace wire
}  // namespace het

#endif  // HET_TF_EMBEDDING_CORE_EXCHANGE_WIRE_H_

#include "cc_ops/embedding/core/exchange_wire.h"

#include <algorithm>
#include <cstring>

#include "cc_ops/embedding/core/key_checks.h"

namespace het {
namespace wire {
namespace {

constexpr uint32_t kRequestMagic = 0x51584548;  // "HEXQ"
constexpr uint32_t kAnswerMagic = 0x41584548;   // "HEXA"
// Version 1 had these magics and no version word.
constexpr uint32_t kRequestMagicV1 = 0x31515848;  // "HXQ1"
constexpr uint32_t kAnswerMagicV1 = 0x31415848;   // "HXA1"
// A column's count word: the count, and this bit when its values are 8
// bytes wide rather than 4-byte offsets from the smallest.
constexpr uint32_t kWideBit = 0x80000000u;
constexpr uint64_t kMaxCount = kWideBit - 1;

class Writer {
 public:
  // Starts the message with its header: the magic, the wire's version,
  // the state width and the rows' type, which the receiver checks before
  // reading any row.
  Writer(std::vector<uint8_t>* out, uint32_t magic, int32_t width, RowShape shape, RowType type)
      : out_(out), shape_(shape), type_(type) {
    out_->clear();
    Scalar(magic);
    Scalar(kWireVersion);
    Scalar(width);
    Scalar(static_cast<uint32_t>(type));
  }

  template <typename T>
  void Scalar(const T& value) {
    Append(&value, sizeof(T));
  }
  void Ints(const std::vector<int64_t>& v) {
    const uint32_t n = static_cast<uint32_t>(v.size());
    if (n == 0) {
      Scalar(n);
      return;
    }
    const auto [lo, hi] = std::minmax_element(v.begin(), v.end());
    const int64_t base = *lo;
    const bool wide = static_cast<uint64_t>(*hi) - static_cast<uint64_t>(base) > 0xffffffffULL;
    Scalar(n | (wide ? kWideBit : 0));
    Scalar(base);
    if (wide) {
      Append(v.data(), sizeof(int64_t) * n);
      return;
    }
    const size_t at = out_->size();
    out_->resize(at + sizeof(uint32_t) * n);
    uint8_t* p = out_->data() + at;
    for (uint32_t i = 0; i < n; ++i) {
      const uint32_t offset =
          static_cast<uint32_t>(static_cast<uint64_t>(v[i]) - static_cast<uint64_t>(base));
      std::memcpy(p + sizeof(uint32_t) * i, &offset, sizeof(uint32_t));
    }
  }
  // The first `exact` rows in float32, the others in the message's type,
  // padded to 4 bytes.
  void RowsOf(const Rows& rows, int64_t exact = 0) {
    Scalar(static_cast<uint32_t>(rows.rows));
    const size_t lead = size_t(std::min(exact, rows.rows));
    Append(rows.data, sizeof(float) * lead * shape_.width);
    const size_t rest = size_t(rows.rows) - lead;
    const size_t at = out_->size();
    const size_t bytes = RowTypeBytes(type_) * rest * shape_.width;
    out_->resize(at + bytes + (4 - bytes % 4) % 4, 0);
    EncodeRows(type_, shape_, rows.data + lead * shape_.width, rest, out_->data() + at);
  }
  // Bytes of bits, padded to the next section's 4-byte alignment.
  void Bits(const std::vector<uint8_t>& bits) {
    Scalar(static_cast<uint32_t>(bits.size()));
    Append(bits.data(), bits.size());
    out_->resize(out_->size() + (4 - bits.size() % 4) % 4, 0);
  }

 private:
  void Append(const void* data, size_t n) {
    if (n == 0) return;
    const size_t at = out_->size();
    out_->resize(at + n);
    std::memcpy(out_->data() + at, data, n);
  }
  std::vector<uint8_t>* out_;
  const RowShape shape_;
  const RowType type_;
};

class Reader {
 public:
  Reader(const std::string& table, const char* what, const uint8_t* data, size_t size)
      : table_(table), what_(what), data_(data), size_(size) {}

  template <typename T>
  void Scalar(T& value) {
    if (!Have(sizeof(T), "a field")) return;
    std::memcpy(&value, data_ + at_, sizeof(T));
    at_ += sizeof(T);
  }
  void Ints(std::vector<int64_t>& v) {
    uint32_t word = 0;
    Scalar(word);
    v.clear();
    if (!ok() || word == 0) return;
    const bool wide = (word & kWideBit) != 0;
    const uint32_t n = word & ~kWideBit;
    int64_t base = 0;
    Scalar(base);
    const size_t bytes = size_t(n) * (wide ? sizeof(int64_t) : sizeof(uint32_t));
    if (!ok() || !Have(bytes, "a column")) return;
    v.resize(n);
    const uint8_t* p = data_ + at_;
    if (wide) {
      std::memcpy(v.data(), p, bytes);
    } else {
      for (uint32_t i = 0; i < n; ++i) {
        uint32_t offset;
        std::memcpy(&offset, p + sizeof(uint32_t) * i, sizeof(uint32_t));
        v[i] = static_cast<int64_t>(static_cast<uint64_t>(base) + offset);
      }
    }
    at_ += bytes;
  }
  // As Writer::RowsOf wrote them. float32 rows are read in place; a
  // section with 16-bit rows is decoded whole into rows.decoded.
  void RowsOf(Rows& rows, int64_t exact = 0) {
    uint32_t n = 0;
    Scalar(n);
    if (!ok() || n > kMaxCount) return;
    const size_t lead = std::min(size_t(std::max<int64_t>(exact, 0)), size_t(n));
    const size_t rest = size_t(n) - lead;
    const size_t width = size_t(shape_.width);
    const size_t lead_bytes = sizeof(float) * lead * width;
    const size_t rest_bytes = RowTypeBytes(type_) * rest * width;
    const size_t padded = rest_bytes + (4 - rest_bytes % 4) % 4;
    if (!Have(lead_bytes, "rows") || !Have(lead_bytes + padded, "rows")) return;
    rows.rows = n;
    if (type_ == RowType::kFloat32) {
      rows.data = reinterpret_cast<const float*>(data_ + at_);
    } else {
      rows.decoded.resize(size_t(n) * width);
      if (lead_bytes > 0) std::memcpy(rows.decoded.data(), data_ + at_, lead_bytes);
      DecodeRows(type_, shape_, data_ + at_ + lead_bytes, rest, rows.decoded.data() + lead * width);
      rows.data = rows.decoded.data();
    }
    at_ += lead_bytes + padded;
  }
  // The message's row type, read from its header.
  void SetRows(RowShape shape, RowType type) {
    shape_ = shape;
    type_ = type;
  }
  void Bits(std::vector<uint8_t>& bits) {
    uint32_t n = 0;
    Scalar(n);
    const size_t padded = size_t(n) + (4 - n % 4) % 4;
    bits.clear();
    if (!ok() || n > kMaxCount || !Have(padded, "bits")) return;
    bits.assign(data_ + at_, data_ + at_ + n);
    at_ += padded;
  }
  // Every byte read, the header right, and the lengths consistent.
  Status Finish() {
    if (ok() && at_ != size_) Fail(std::to_string(size_ - at_) + " bytes left over");
    return status_;
  }
  void Check(bool condition, const std::string& problem) {
    if (ok() && !condition) Fail(problem);
  }
  bool ok() const { return status_.ok(); }

 private:
  bool Have(size_t n, const char* what) {
    if (!ok()) return false;
    if (n <= size_ - at_) return true;
    Fail(std::string(what) + " runs past its end");
    return false;
  }
  void Fail(const std::string& problem) {
    status_ = Status::InvalidArgument(TableLabel(table_) + ": malformed exchange " + what_ + " (" +
                                      std::to_string(size_) + " bytes): " + problem);
  }
  const std::string& table_;
  const char* what_;
  const uint8_t* data_;
  size_t size_;
  size_t at_ = 0;
  Status status_ = Status::Ok();
  RowShape shape_;
  RowType type_ = RowType::kFloat32;
};

// A message's fields in order, for the writer and the reader alike: the
// one definition of the layout.
template <typename Io, typename Request>
void RequestFields(Io& io, Request& r) {
  io.Scalar(r.sender.worker);
  io.Scalar(r.sender.generation);
  io.Scalar(r.sender.sequence);
  io.Scalar(r.sender.epoch);
  io.Scalar(r.read_staleness);
  io.Scalar(r.learning_rate);
  io.Scalar(r.push_unanswered);
  io.Scalar(r.initial_state);
  io.Ints(r.misses);
  io.Ints(r.evicted);
  io.Ints(r.push_keys);
  io.Ints(r.push_counts);
  io.Ints(r.push_base_clocks);
  io.RowsOf(r.push_deltas, r.push_unanswered);
}

template <typename Io, typename Answer>
void AnswerFields(Io& io, Answer& a) {
  io.Scalar(a.epoch);
  io.RowsOf(a.push_states);
  io.Ints(a.push_clocks);
  io.Bits(a.push_lean);
  io.Ints(a.refused_keys);
  io.RowsOf(a.miss_states);
  io.Ints(a.miss_clocks);
  io.Bits(a.miss_rebuilt);
  io.Ints(a.refresh_keys);
  io.RowsOf(a.refresh_states);
  io.Ints(a.refresh_clocks);
}

// Reads the header; the magic must be `magic` (`magic_v1` in the first
// version's messages), the version this build's and the width the
// receiving `side`'s own, `width`. The rows' type is read into `type`;
// `expected`, when given, is the one it must be.
void ReadHeader(Reader& reader, uint32_t magic, uint32_t magic_v1, const char* side, int32_t width,
                int32_t dim, RowType* type, const RowType* expected = nullptr) {
  const std::string mixed = "; run the same het_tf on the workers and the parameter servers";
  uint32_t got_magic = 0;
  reader.Scalar(got_magic);
  reader.Check(got_magic != magic_v1, "a message of wire version 1, but this " + std::string(side) +
                                          " speaks version " + std::to_string(kWireVersion) +
                                          mixed);
  reader.Check(got_magic == magic, "not an exchange message of this kind");
  uint32_t version = 0;
  reader.Scalar(version);
  reader.Check(version == kWireVersion, "a message of wire version " + std::to_string(version) +
                                            ", but this " + side + " speaks version " +
                                            std::to_string(kWireVersion) + mixed);
  int32_t got_width = 0;
  reader.Scalar(got_width);
  reader.Check(got_width == width, "rows of " + std::to_string(got_width) + " floats, but this " +
                                       side + "'s states have " + std::to_string(width));
  uint32_t got_type = 0;
  reader.Scalar(got_type);
  reader.Check(KnownRowType(got_type), "rows of an unknown type " + std::to_string(got_type));
  if (!reader.ok()) return;
  const RowType read = static_cast<RowType>(got_type);
  reader.Check(expected == nullptr || read == *expected,
               std::string("rows in ") + RowTypeName(read) + ", but this " + side + " asked for " +
                   RowTypeName(expected != nullptr ? *expected : read) +
                   "; run the same wire dtype on the workers and the parameter servers");
  *type = read;
  reader.SetRows(RowShape{dim, width}, read);
}

}  // namespace

Status CheckVersion(const std::string& table, int64_t version) {
  if (version == kWireVersion) return Status::Ok();
  return Status::InvalidArgument(
      TableLabel(table) + ": a request of wire version " + std::to_string(version) +
      (version == 0 ? " (from a het_tf before its ops carried one)" : "") +
      ", but this parameter server speaks version " + std::to_string(kWireVersion) +
      "; run the same het_tf on the workers and the parameter servers");
}

void EncodeRequest(const ExchangeRequest& request, std::vector<uint8_t>* out) {
  Writer writer(out, kRequestMagic, request.width, RowShape{request.dim, request.width},
                request.row_type);
  RequestFields(writer, request);
}

void EncodeAnswer(const ExchangeAnswer& answer, std::vector<uint8_t>* out) {
  Writer writer(out, kAnswerMagic, answer.width, RowShape{answer.dim, answer.width},
                answer.row_type);
  AnswerFields(writer, answer);
}

Status DecodeRequest(const std::string& table, const uint8_t* data, size_t size,
                     ExchangeRequest* r) {
  Reader reader(table, "request", data, size);
  ReadHeader(reader, kRequestMagic, kRequestMagicV1, "table", r->width, r->dim, &r->row_type);
  if (reader.ok()) RequestFields(reader, *r);
  const size_t n = r->push_keys.size();
  reader.Check(r->push_counts.size() == n && r->push_base_clocks.size() == n &&
                   r->push_deltas.rows == static_cast<int64_t>(n),
               "a push's keys, counts, base clocks and deltas differ in number");
  reader.Check(
      r->push_unanswered >= 0 && r->push_unanswered <= static_cast<int64_t>(n),
      std::to_string(r->push_unanswered) + " unanswered rows in a push of " + std::to_string(n));
  return reader.Finish();
}

std::vector<uint8_t> PackFlags(const uint8_t* flags, size_t n) {
  std::vector<uint8_t> bits;
  for (size_t i = 0; i < n; ++i) {
    if (!flags[i]) continue;
    bits.resize((n + 7) / 8, 0);
    bits[i / 8] |= static_cast<uint8_t>(1u << (i % 8));
  }
  return bits;
}

namespace {

// Whether flag bits fit n rows: none, or a byte per 8 rows with no bit
// past the last row.
bool FlagsFit(const std::vector<uint8_t>& bits, size_t n) {
  return bits.empty() ||
         (bits.size() == (n + 7) / 8 && (n % 8 == 0 || bits.back() >> (n % 8) == 0));
}

}  // namespace

Status DecodeAnswer(const std::string& table, const uint8_t* data, size_t size, ExchangeAnswer* a) {
  Reader reader(table, "answer", data, size);
  const RowType asked = a->row_type;
  ReadHeader(reader, kAnswerMagic, kAnswerMagicV1, "cache", a->width, a->dim, &a->row_type, &asked);
  if (reader.ok()) AnswerFields(reader, *a);
  const int64_t rebuilt = FlagCount(a->miss_rebuilt);
  const size_t misses = a->miss_clocks.size();
  reader.Check(FlagsFit(a->miss_rebuilt, misses),
               "the rebuilt misses' bits do not fit " + std::to_string(misses) + " misses");
  reader.Check(
      FlagsFit(a->push_lean, a->push_clocks.size()),
      "the lean pushes' bits do not fit " + std::to_string(a->push_clocks.size()) + " pushes");
  reader.Check(a->push_states.rows + FlagCount(a->push_lean) ==
                       static_cast<int64_t>(a->push_clocks.size()) &&
                   a->miss_states.rows + rebuilt == static_cast<int64_t>(misses) &&
                   a->refresh_states.rows == static_cast<int64_t>(a->refresh_keys.size()) &&
                   a->refresh_clocks.size() == a->refresh_keys.size(),
               "rows and clocks differ in number");
  return reader.Finish();
}

}  // namespace wire
}  // namespace het

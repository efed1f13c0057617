#include "cc_ops/data/core/criteo_format.h"

#include <cmath>
#include <cstdint>
#include <random>
#include <string>

#include "cc_ops/common/tests/harness.h"

namespace {

std::string Line(const std::string& label, const std::string& integer, const std::string& hex) {
  std::string line = label;
  for (int i = 0; i < het::kCriteoDenseFields; ++i) line += "\t" + integer;
  for (int i = 0; i < het::kCriteoCategoricalFields; ++i) line += "\t" + hex;
  return line;
}

}  // namespace

HET_TEST(CriteoParsesAFullLine) {
  het::CriteoRecord r;
  std::string why;
  EXPECT_TRUE(het::ParseCriteoLine(Line("1", "3", "68fd1e64"), true, &r, &why));
  EXPECT_EQ(r.label, 1.0f);
  EXPECT_NEAR(r.dense[0], std::log1p(3.0), 1e-6);
  EXPECT_EQ(r.keys[0], int64_t{0x68fd1e64});
  EXPECT_EQ(r.keys[25], (int64_t{25} << 33) | 0x68fd1e64);
}

HET_TEST(CriteoEmptyAndNegativeValues) {
  het::CriteoRecord r;
  std::string why;
  EXPECT_TRUE(het::ParseCriteoLine(Line("0", "", "") + "\r", true, &r, &why));
  EXPECT_EQ(r.label, 0.0f);
  EXPECT_EQ(r.dense[12], 0.0f);
  EXPECT_EQ(r.keys[3], het::CriteoMissingKey(3));
  EXPECT_TRUE(r.keys[3] != het::CriteoKey(3, 0));
  EXPECT_TRUE(het::ParseCriteoLine(Line("0", "-2", "00000000"), true, &r, &why));
  EXPECT_EQ(r.dense[1], 0.0f);
  EXPECT_EQ(r.keys[3], het::CriteoKey(3, 0));
}

HET_TEST(CriteoFieldsNeverCollide) {
  for (int a = 0; a < het::kCriteoCategoricalFields; ++a) {
    for (int b = a + 1; b < het::kCriteoCategoricalFields; ++b) {
      EXPECT_TRUE(het::CriteoKey(a, 0xffffffffu) != het::CriteoKey(b, 0xffffffffu));
      EXPECT_TRUE(het::CriteoMissingKey(a) != het::CriteoKey(b, 0));
    }
  }
}

HET_TEST(CriteoRejectsMalformedLines) {
  het::CriteoRecord r;
  const std::string good = Line("1", "5", "00000abc");
  const std::string bad[] = {
      "",
      good.substr(0, good.size() - 4),                // one field short
      good + "\t00000abc",                            // one field too many
      "2" + good.substr(1),                           // label not 0/1
      Line("1", "5x", "00000abc"),                    // integer with junk
      Line("1", "-", "00000abc"),                     // sign alone
      Line("1", "99999999999999999999", "00000abc"),  // overflows int64
      Line("1", "5", "123456789"),                    // nine hex digits
      Line("1", "5", "1234567"),                      // seven: a cut-off value
      Line("1", "5", "xyz"),                          // not hex
      Line("1", "5", "ab cd"),                        // a space inside
      Line("1", "5.5", "00000abc"),                   // not an integer
  };
  for (const std::string& line : bad) {
    std::string why;
    EXPECT_TRUE(!het::ParseCriteoLine(line, true, &r, &why));
    EXPECT_TRUE(!why.empty());
  }
  std::string why;
  EXPECT_TRUE(het::ParseCriteoLine(good.substr(2), false, &r, &why));  // unlabeled test file
  EXPECT_TRUE(!het::ParseCriteoLine(good, false, &r, &why));
}

HET_TEST(CriteoRandomBytesNeverCrashAndRarelyParse) {
  std::mt19937_64 rng(11);
  const std::string alphabet = "0123456789abcdefXYZ-\t\r\n ";
  het::CriteoRecord r;
  int parsed = 0;
  for (int i = 0; i < 20000; ++i) {
    std::string line = Line("1", "7", "0000001f");
    const int edits = 1 + rng() % 4;
    for (int e = 0; e < edits; ++e) {
      const size_t at = rng() % (line.size() + 1);
      switch (rng() % 3) {
        case 0:
          line.insert(at, 1, alphabet[rng() % alphabet.size()]);
          break;
        case 1:
          if (at < line.size()) line.erase(at, 1);
          break;
        default:
          if (at < line.size()) line[at] = alphabet[rng() % alphabet.size()];
          break;
      }
    }
    std::string why;
    if (het::ParseCriteoLine(line, true, &r, &why)) {
      ++parsed;
      // Whatever parses has exactly the format's shape.
      int tabs = 0;
      for (char c : line) tabs += c == '\t';
      EXPECT_EQ(tabs, 39);
    } else {
      EXPECT_TRUE(!why.empty());
    }
  }
  EXPECT_TRUE(parsed > 0);
}

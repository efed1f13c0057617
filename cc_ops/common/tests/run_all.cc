#include <cstdio>

#include "cc_ops/common/tests/harness.h"

int main() {
  int passed = 0, failed = 0;
  for (const auto& test : het_test::Registry()) {
    const int before = het_test::Failures();
    test.body();
    const bool ok = het_test::Failures() == before;
    std::printf("%s %s\n", ok ? "PASS" : "FAIL", test.name);
    (ok ? passed : failed)++;
  }
  std::printf("%d passed, %d failed\n", passed, failed);
  return failed == 0 ? 0 : 1;
}

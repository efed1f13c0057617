// A minimal test runner, so the core's tests need nothing but a compiler.
#ifndef HET_TF_COMMON_TESTS_HARNESS_H_
#define HET_TF_COMMON_TESTS_HARNESS_H_

#include <cmath>
#include <cstdio>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

namespace het_test {

struct Case {
  const char* name;
  std::function<void()> body;
};

inline std::vector<Case>& Registry() {
  static std::vector<Case> cases;
  return cases;
}

inline int& Failures() {
  static int failures = 0;
  return failures;
}

struct Register {
  Register(const char* name, std::function<void()> body) { Registry().push_back({name, body}); }
};

inline void Fail(const char* file, int line, const std::string& what) {
  std::fprintf(stderr, "  %s:%d: %s\n", file, line, what.c_str());
  ++Failures();
}

}  // namespace het_test

#define HET_TEST(name)                                          \
  static void name();                                           \
  static ::het_test::Register name##_registration(#name, name); \
  static void name()

#define EXPECT_TRUE(cond)                                                 \
  do {                                                                    \
    if (!(cond)) ::het_test::Fail(__FILE__, __LINE__, "expected " #cond); \
  } while (0)

#define EXPECT_EQ(a, b)                                                  \
  do {                                                                   \
    auto het_a_ = (a);                                                   \
    auto het_b_ = (b);                                                   \
    if (!(het_a_ == het_b_)) {                                           \
      std::ostringstream het_os_;                                        \
      het_os_ << #a " == " #b " failed: " << het_a_ << " vs " << het_b_; \
      ::het_test::Fail(__FILE__, __LINE__, het_os_.str());               \
    }                                                                    \
  } while (0)

#define EXPECT_NEAR(a, b, tol)                                          \
  do {                                                                  \
    double het_a_ = (a), het_b_ = (b);                                  \
    if (!(std::fabs(het_a_ - het_b_) <= (tol))) {                       \
      std::ostringstream het_os_;                                       \
      het_os_ << #a " ~ " #b " failed: " << het_a_ << " vs " << het_b_; \
      ::het_test::Fail(__FILE__, __LINE__, het_os_.str());              \
    }                                                                   \
  } while (0)

#define EXPECT_OK(expr)                                                                    \
  do {                                                                                     \
    ::het::Status het_s_ = (expr);                                                         \
    if (!het_s_.ok()) ::het_test::Fail(__FILE__, __LINE__, #expr ": " + het_s_.message()); \
  } while (0)

// Checks the error is an invalid argument whose message mentions `needle`.
#define EXPECT_INVALID(expr, needle)                                               \
  do {                                                                             \
    ::het::Status het_s_ = (expr);                                                 \
    if (het_s_.ok() || het_s_.message().find(needle) == std::string::npos) {       \
      ::het_test::Fail(__FILE__, __LINE__,                                         \
                       std::string(#expr " should fail mentioning '") + (needle) + \
                           "', got: " + (het_s_.ok() ? "ok" : het_s_.message()));  \
    }                                                                              \
  } while (0)

#endif  // HET_TF_COMMON_TESTS_HARNESS_H_

// A setting named by a string (a kernel attribute any client may set) read
// into its enum through one table, so that every such setting accepts its
// names and words its error the same way.
#ifndef HET_TF_COMMON_NAMED_CHOICE_H_
#define HET_TF_COMMON_NAMED_CHOICE_H_

#include <cctype>
#include <cstddef>
#include <string>

#include "cc_ops/common/status.h"

namespace het {

template <typename T>
struct NamedChoice {
  const char* name;  // lower case, words joined by '_'
  T value;
};

// Case and '-' for '_' do not matter: "LFU-opt" is lfu_opt.
template <typename T, size_t N>
Status ParseNamedChoice(const char* setting, const std::string& name,
                        const NamedChoice<T> (&choices)[N], T* out) {
  std::string plain(name);
  for (char& c : plain) {
    c = c == '-' ? '_' : static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  for (const NamedChoice<T>& choice : choices) {
    if (plain == choice.name) {
      *out = choice.value;
      return Status::Ok();
    }
  }
  std::string expected;
  for (size_t i = 0; i < N; ++i) {
    expected += (i == 0 ? "" : i + 1 == N ? " or " : ", ") + std::string(choices[i].name);
  }
  return Status::InvalidArgument("unknown " + std::string(setting) + " '" + name + "'; expected " +
                                 expected);
}

}  // namespace het

#endif  // HET_TF_COMMON_NAMED_CHOICE_H_

//===- cq4p-python-constants.cpp - the Python package's constants ---------===//
//
// Prints python/cq4p/format/constants.py: every CQ4P_ constant of the
// runtime's C headers (Headers.h), each with the value this compiler gives
// it, so that the Python package reads the format's numbers from their one
// definition without parsing C. Constants.inc, the list of names, is written
// at build time from the preprocessed headers (list_constants.py); the
// values are evaluated here. The module is checked in, so that the package
// works without a build; test/tools/python-constants.test fails when it
// differs from this program's output.
//
//===----------------------------------------------------------------------===//

#include "Headers.h"

#include <cstdio>
#include <cstring>
#include <string>
#include <type_traits>

namespace {

constexpr const char *kPreamble =
    R"("""Generated from the runtime's C headers by cq4p-python-constants: do not edit.

Every CQ4P_ macro and enumerator of format.h, kernel_abi.h and cq4p.h, as the
C++ compiler values it; test/tools/python-constants.test checks this copy.
Regenerate: build/bin/cq4p-python-constants > python/cq4p/format/constants.py"""
)";

// A line of at most this many characters gets the C spelling as a comment.
constexpr size_t kMaxLine = 100;

std::string pythonString(const char *text) {
  std::string quoted = "\"";
  for (const char *c = text; *c; ++c) {
    unsigned char byte = static_cast<unsigned char>(*c);
    if (byte == '\\' || byte == '"') {
      quoted += '\\';
      quoted += *c;
    } else if (byte < 0x20 || byte >= 0x7f) {
      char escaped[8];
      std::snprintf(escaped, sizeof(escaped), "\\x%02x", byte);
      quoted += escaped;
    } else {
      quoted += *c;
    }
  }
  return quoted + "\"";
}

// The C spelling of an integer, without its suffixes, when it says no more
// than the value (84u for 84).
bool spellsValue(const char *spelling, const std::string &value) {
  std::string digits = spelling;
  while (!digits.empty() && std::strchr("uUlL", digits.back()))
    digits.pop_back();
  return digits == value;
}

void printLine(const char *name, const std::string &value, const char *spelling) {
  std::string line = std::string(name) + " = " + value;
  if (*spelling && !spellsValue(spelling, value) && value[0] != '"' &&
      line.size() + 4 + std::strlen(spelling) <= kMaxLine)
    line += std::string("  # ") + spelling;
  std::printf("%s\n", line.c_str());
}

template <typename T>
void printConstant(const char *name, const T &value, const char *spelling) {
  using Value = std::remove_cv_t<T>;
  if constexpr (std::is_enum_v<Value>) {
    printConstant(name, static_cast<std::underlying_type_t<Value>>(value), spelling);
  } else if constexpr (std::is_same_v<Value, bool>) {
    printLine(name, value ? "True" : "False", spelling);
  } else if constexpr (std::is_integral_v<Value> && std::is_signed_v<Value>) {
    printLine(name, std::to_string(static_cast<long long>(value)), spelling);
  } else if constexpr (std::is_integral_v<Value>) {
    printLine(name, std::to_string(static_cast<unsigned long long>(value)), spelling);
  } else if constexpr (std::is_array_v<Value> &&
                       std::is_same_v<std::remove_cv_t<std::remove_extent_t<Value>>, char>) {
    printLine(name, pythonString(value), spelling);
  } else {
    static_assert(!sizeof(T), "a CQ4P_ constant that is neither an integer nor a string");
  }
}

} // namespace

int main() {
  std::printf("%s", kPreamble);
#define CQ4P_HEADER(path) std::printf("\n# %s\n", path);
#define CQ4P_CONSTANT(name, spelling) printConstant(#name, name, spelling);
#include "Constants.inc"
#undef CQ4P_CONSTANT
#undef CQ4P_HEADER
  return std::fflush(stdout) == 0 ? 0 : 1;
}

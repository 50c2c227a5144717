//===- Refusals.h - asserting a refusal and its message ---------*- C++ -*-===//

#ifndef CQ4P_TEST_UNIT_RUNTIME_REFUSALS_H
#define CQ4P_TEST_UNIT_RUNTIME_REFUSALS_H

#include "cq4p/runtime/Status.h"

#include <gtest/gtest.h>

#include <string>

namespace cq4p::test {

inline bool contains(const std::string &text, const std::string &part) {
  return text.find(part) != std::string::npos;
}

} // namespace cq4p::test

/// Expects `status` to carry `code_` and a message holding every part.
#define EXPECT_REFUSED(status, code_, ...)                                     \
  do {                                                                         \
    const ::cq4p::runtime::Status &s_ = (status);                              \
    EXPECT_EQ(s_.code(), code_) << s_.message();                               \
    for (const char *part_ : {__VA_ARGS__})                                    \
      EXPECT_TRUE(::cq4p::test::contains(s_.message(), part_))                 \
          << "message lacks \"" << part_ << "\": " << s_.message();           \
  } while (0)

#endif // CQ4P_TEST_UNIT_RUNTIME_REFUSALS_H

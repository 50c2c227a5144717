//===- Status.h - errors as values ------------------------------*- C++ -*-===//
//
// The runtime never throws and never aborts on bad input: a call that can
// fail returns a Status with a code (the C API's cq4p_code) and a message
// that carries the numbers (file, field, expected vs found).
//
//===----------------------------------------------------------------------===//

#ifndef CQ4P_RUNTIME_STATUS_H
#define CQ4P_RUNTIME_STATUS_H

#include "cq4p/cq4p.h"

#include <string>
#include <string_view>
#include <utility>

namespace cq4p::runtime {

class [[nodiscard]] Status {
public:
  Status() = default;
  Status(cq4p_code code, std::string message)
      : code_(code), message_(std::move(message)) {}

  static Status ok() { return Status(); }

  bool isOk() const { return code_ == CQ4P_OK; }
  explicit operator bool() const { return isOk(); }
  cq4p_code code() const { return code_; }
  const std::string &message() const { return message_; }

private:
  cq4p_code code_ = CQ4P_OK;
  std::string message_;
};

/// A FORMAT error in the house shape: "<path>: <field>: expected <expected>,
/// found <found>". The field names are shared with the Python reader.
Status formatError(const std::string &path, const char *field,
                   const std::string &expected, const std::string &found);

/// What a message echoes of a value the user gave (a flag's value, an
/// environment variable): at most kEchoBytes of it, cut before a UTF-8
/// character that does not fit, then "... (N bytes)" when it was longer, so
/// that an error stays one short line whatever was given.
constexpr size_t kEchoBytes = 64;
std::string excerpt(std::string_view text, size_t limit = kEchoBytes);

/// Copies a status's message into a C caller's buffer (always terminated).
void copyMessage(const Status &status, char *buffer, size_t size);

} // namespace cq4p::runtime

#endif // CQ4P_RUNTIME_STATUS_H

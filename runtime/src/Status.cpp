//===- Status.cpp - errors as values --------------------------------------===//

#include "cq4p/runtime/Status.h"

#include <cstring>

namespace cq4p::runtime {

Status formatError(const std::string &path, const char *field,
                   const std::string &expected, const std::string &found) {
  return Status(CQ4P_ERROR_FORMAT, path + ": " + field + ": expected " +
                                       expected + ", found " + found);
}

std::string excerpt(std::string_view text, size_t limit) {
  if (text.size() <= limit)
    return std::string(text);
  size_t cut = limit;
  // Not inside a character: back up over continuation bytes.
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80)
    --cut;
  return std::string(text.substr(0, cut)) + "... (" + std::to_string(text.size()) +
         " bytes)";
}

void copyMessage(const Status &status, char *buffer, size_t size) {
  if (buffer == nullptr || size == 0)
    return;
  size_t length = std::min(size - 1, status.message().size());
  std::memcpy(buffer, status.message().data(), length);
  buffer[length] = '\0';
}

} // namespace cq4p::runtime

//===- Status.cpp - errors as values --------------------------------------===//

#include "cq4p/runtime/Status.h"

#include <cstring>

namespace cq4p::runtime {

Status formatError(const std::string &path, const char *field,
                   const std::string &expected, const std::string &found) {
  return Status(CQ4P_ERROR_FORMAT, path + ": " + field + ": expected " +
                                       expected + ", found " + found);
}

void copyMessage(const Status &status, char *buffer, size_t size) {
  if (buffer == nullptr || size == 0)
    return;
  size_t length = std::min(size - 1, status.message().size());
  std::memcpy(buffer, status.message().data(), length);
  buffer[length] = '\0';
}

} // namespace cq4p::runtime

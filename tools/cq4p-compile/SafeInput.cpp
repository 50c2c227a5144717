//===- SafeInput.cpp - cq4p-compile's files, read by the runtime's rules --===//

#include "SafeInput.h"

#include "SafeOpen.h"

#include <cerrno>
#include <cstring>
#include <unistd.h>

bool mlir::cq4p::readRegularFile(int directoryFd, const std::string &name,
                                 const std::string &path, bool noFollow,
                                 uint64_t maxBytes, std::string &text,
                                 struct stat &identity, std::string &error) {
  int fd = -1;
  uint64_t size = 0;
  ::cq4p::runtime::Status status = ::cq4p::runtime::openRegularFile(
      directoryFd, name, path, noFollow, fd, size, &identity);
  if (!status) {
    error = status.message();
    return false;
  }
  if (size > maxBytes) {
    ::close(fd);
    error = path + ": expected at most " + std::to_string(maxBytes) +
            " bytes, found " + std::to_string(size);
    return false;
  }
  text.assign(size, '\0');
  uint64_t done = 0;
  while (done < size) {
    ssize_t got = ::read(fd, text.data() + done, size - done);
    if (got < 0 && errno == EINTR)
      continue;
    if (got <= 0) {
      int code = errno;
      ::close(fd);
      error = path + ": cannot read: " +
              (got < 0 ? std::string(std::strerror(code))
                       : "the file ended at byte " + std::to_string(done) +
                             " of " + std::to_string(size));
      return false;
    }
    done += uint64_t(got);
  }
  ::close(fd);
  return true;
}

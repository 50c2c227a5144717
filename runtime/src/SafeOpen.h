//===- SafeOpen.h - opening a file a bundle or a user names -----*- C++ -*-===//
//
// The one place the runtime opens the files it reads, so that every reader
// applies the same policy (docs/TRUST.md):
//  - a name inside a bundle is a plain file name (no '/', not "." or "..",
//    no NUL), opened relative to the bundle directory's descriptor and never
//    through a symbolic link (O_NOFOLLOW), so no entry can leave the bundle;
//  - every open is O_NONBLOCK and checked with fstat before a byte is read,
//    so a FIFO or a device (/dev/zero) is refused by name instead of hanging
//    or being read without end.
//
//===----------------------------------------------------------------------===//

#ifndef CQ4P_RUNTIME_SRC_SAFEOPEN_H
#define CQ4P_RUNTIME_SRC_SAFEOPEN_H

#include "cq4p/runtime/Status.h"

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fcntl.h>
#include <string>
#include <sys/stat.h>
#include <unistd.h>

namespace cq4p::runtime {

/// True when `name` can only name a file directly inside a directory.
inline bool isPlainFileName(const std::string &name) {
  return !name.empty() && name.find('/') == std::string::npos &&
         name.find('\\') == std::string::npos &&
         name.find('\0') == std::string::npos && name != "." && name != "..";
}

/// What a non-regular file is, for messages.
inline const char *fileKind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISLNK(mode)) return "a symbolic link";
  return "not a regular file";
}

/// Opens a regular file for reading: `name` relative to `directoryFd`
/// (AT_FDCWD for a path the user gave), without following a final symbolic
/// link when `noFollow`. `path` names the file in messages. On success `fd`
/// is open (close-on-exec, blocking again), `size` is its size and `identity`
/// (when given) what fstat said.
inline Status openRegularFile(int directoryFd, const std::string &name,
                              const std::string &path, bool noFollow, int &fd,
                              uint64_t &size, struct stat *identity = nullptr) {
  fd = -1;
  size = 0;
  int flags = O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY;
  if (noFollow)
    flags |= O_NOFOLLOW;
  int opened = ::openat(directoryFd, name.c_str(), flags);
  if (opened < 0) {
    int error = errno;
    if (error == ELOOP && noFollow)
      return Status(CQ4P_ERROR_FORMAT,
                    path + ": a symbolic link; a bundle's files must be "
                           "regular files inside its directory");
    return Status(CQ4P_ERROR_IO, path + ": cannot open: " + std::strerror(error));
  }
  struct stat st;
  if (::fstat(opened, &st) != 0) {
    int error = errno;
    ::close(opened);
    return Status(CQ4P_ERROR_IO, path + ": cannot stat: " + std::strerror(error));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(opened);
    return Status(CQ4P_ERROR_IO, path + ": " + fileKind(st.st_mode) +
                                     ", expected a regular file");
  }
  // Reads of a regular file never block; clear the flag so that nothing
  // downstream sees EAGAIN semantics.
  int status = ::fcntl(opened, F_GETFL);
  if (status >= 0)
    ::fcntl(opened, F_SETFL, status & ~O_NONBLOCK);
  fd = opened;
  size = static_cast<uint64_t>(st.st_size);
  if (identity != nullptr)
    *identity = st;
  return Status::ok();
}

} // namespace cq4p::runtime

#endif // CQ4P_RUNTIME_SRC_SAFEOPEN_H

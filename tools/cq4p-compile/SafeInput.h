//===- SafeInput.h - cq4p-compile's files, read by the runtime's rules ----===//
//
// cq4p-compile reads its model.mlir and --bundle's manifest.json as the
// runtime reads a bundle (runtime/src/SafeOpen.h, docs/TRUST.md): a regular
// file (a FIFO or a device is refused before a byte is read), optionally
// never through a symbolic link, of bounded size. A separate file so that
// the runtime's namespace stays out of the compiler's.
//
//===----------------------------------------------------------------------===//

#ifndef CQ4P_TOOLS_CQ4P_COMPILE_SAFEINPUT_H
#define CQ4P_TOOLS_CQ4P_COMPILE_SAFEINPUT_H

#include <cstdint>
#include <string>
#include <sys/stat.h>

namespace mlir::cq4p {

/// Reads the regular file `name` relative to `directoryFd` (AT_FDCWD for a
/// path the user gave) into `text`, refusing a symbolic link when
/// `noFollow` and a file over `maxBytes`. `path` names it in messages;
/// `identity` is what fstat said. False with a one-line `error` otherwise.
bool readRegularFile(int directoryFd, const std::string &name,
                     const std::string &path, bool noFollow, uint64_t maxBytes,
                     std::string &text, struct stat &identity,
                     std::string &error);

} // namespace mlir::cq4p

#endif // CQ4P_TOOLS_CQ4P_COMPILE_SAFEINPUT_H

//===- Inputs.h - cq4p-compile's input, --bundle and -o ---------*- C++ -*-===//
//
// The files cq4p-compile reads and the one it writes, checked before any
// compiling: the model.mlir and --bundle's manifest.json read by the
// runtime's rules (SafeInput.h), and an -o that would destroy an input, or
// that lld could not report a failed write to, refused.
//
//===----------------------------------------------------------------------===//

#ifndef CQ4P_TOOLS_CQ4P_COMPILE_INPUTS_H
#define CQ4P_TOOLS_CQ4P_COMPILE_INPUTS_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/MemoryBuffer.h"

#include <memory>
#include <string>
#include <sys/stat.h>
#include <utility>

namespace mlir::cq4p {

/// The input model.mlir: a regular file (a FIFO or a device is refused
/// before a byte is read, runtime/src/SafeOpen.h) or "-" for stdin.
std::unique_ptr<llvm::MemoryBuffer> readInput(const std::string &inputFile,
                                              std::string &errorMessage,
                                              struct stat &identity);

/// manifest.json's model_digest in `directory` (--bundle), or a message.
/// Read by the runtime's rules (runtime/src/SafeOpen.h): relative to the
/// directory's descriptor, never through a symbolic link, a regular file of
/// at most the runtime's manifest size (no FIFO to block on, no device to
/// read without end), and no deeper than its JSON reader goes. `identity`
/// is what fstat said of the manifest.
llvm::Expected<std::string> readBundleDigest(llvm::StringRef directory,
                                             struct stat &identity);

/// Refuses an -o that names one of the inputs (the same file, by device and
/// inode, whatever the path): writing it would destroy what is being read;
/// and, for --emit=lib (`library`), one that exists as anything but a
/// regular file.
llvm::Error
checkOutput(const std::string &outputFile, bool library,
            llvm::ArrayRef<std::pair<std::string, struct stat>> inputs);

} // namespace mlir::cq4p

#endif // CQ4P_TOOLS_CQ4P_COMPILE_INPUTS_H

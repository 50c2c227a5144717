//===- Temporaries.h - a library build's temporary files --------*- C++ -*-===//
//
// A library is linked from objects written to temporary files (one per
// variant, the variant table, the SME ABI routines, the system library
// stand-ins). They are removed on every exit: by TemporaryFiles when a build
// ends, and by removeNotedTemporaries from a handler that may not allocate
// (cq4p-compile's out-of-memory handler), which is why their paths are also
// noted in fixed storage.
//
//===----------------------------------------------------------------------===//

#ifndef CQ4P_TARGET_LIBRARY_TEMPORARIES_H
#define CQ4P_TARGET_LIBRARY_TEMPORARIES_H

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <string>
#include <vector>

namespace mlir::cq4p {

/// The temporary files and directories of one build, removed (files first)
/// when it is destroyed.
class TemporaryFiles {
public:
  TemporaryFiles() = default;
  TemporaryFiles(const TemporaryFiles &) = delete;
  TemporaryFiles &operator=(const TemporaryFiles &) = delete;
  ~TemporaryFiles();

  /// A new, empty temporary file named after `prefix` with `suffix`.
  llvm::Expected<std::string> createFile(llvm::StringRef prefix,
                                         llvm::StringRef suffix);
  /// A new temporary directory named after `prefix`.
  llvm::Expected<std::string> createDirectory(llvm::StringRef prefix);
  /// A file about to be written at `path` (in one of the directories).
  void add(const std::string &path);

private:
  std::vector<std::string> files, directories;
};

/// Removes every temporary file still noted; safe in a handler that may not
/// allocate (only unlink(2)).
void removeNotedTemporaries();

} // namespace mlir::cq4p

#endif // CQ4P_TARGET_LIBRARY_TEMPORARIES_H

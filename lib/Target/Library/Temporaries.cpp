//===- Temporaries.cpp - a library build's temporary files ----------------===//

#include "cq4p/Target/Library/Temporaries.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/Support/FileSystem.h"

#include <cstring>
#include <unistd.h>

using namespace mlir;
using namespace mlir::cq4p;

namespace {

/// The temporary files while they exist, for removeNotedTemporaries: fixed
/// storage, as its caller may not allocate. A path that does not fit is
/// still removed on every other exit.
constexpr size_t kMaxNotedFiles = 8;
char notedFiles[kMaxNotedFiles][4096];

void note(const std::string &path) {
  for (auto &slot : notedFiles)
    if (slot[0] == '\0' && path.size() < sizeof(slot)) {
      std::memcpy(slot, path.c_str(), path.size() + 1);
      return;
    }
}

void forget(const std::string &path) {
  for (auto &slot : notedFiles)
    if (path == slot)
      slot[0] = '\0';
}

llvm::Error message(const llvm::Twine &text) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), text);
}

} // namespace

TemporaryFiles::~TemporaryFiles() {
  for (const std::string &path : files) {
    llvm::sys::fs::remove(path);
    forget(path);
  }
  for (const std::string &path : directories)
    llvm::sys::fs::remove(path);
}

llvm::Expected<std::string> TemporaryFiles::createFile(llvm::StringRef prefix,
                                                       llvm::StringRef suffix) {
  llvm::SmallString<128> path;
  if (std::error_code error =
          llvm::sys::fs::createTemporaryFile(prefix, suffix, path))
    return message("cannot create a temporary object file: " + error.message());
  add(std::string(path));
  return std::string(path);
}

llvm::Expected<std::string>
TemporaryFiles::createDirectory(llvm::StringRef prefix) {
  llvm::SmallString<128> path;
  if (std::error_code error =
          llvm::sys::fs::createUniqueDirectory(prefix, path))
    return message("cannot create a temporary directory: " + error.message());
  directories.push_back(std::string(path));
  return std::string(path);
}

void TemporaryFiles::add(const std::string &path) {
  files.push_back(path);
  note(path);
}

void mlir::cq4p::removeNotedTemporaries() {
  for (const auto &slot : notedFiles)
    if (slot[0] != '\0')
      ::unlink(slot);
}

//===- Inputs.cpp - cq4p-compile's input, --bundle and -o -----------------===//

#include "Inputs.h"

#include "SafeInput.h"

#include "cq4p/Tools/InputNesting.h"
#include "cq4p/kernel_abi.h"

#include "mlir/Support/FileUtilities.h"
#include "llvm/Support/JSON.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <optional>
#include <unistd.h>

using namespace mlir;

namespace {

/// The largest model.mlir read: a converted graph is a few MiB at most.
constexpr uint64_t kMaxInputBytes = uint64_t(1) << 30;

llvm::Error message(const llvm::Twine &text) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), text);
}

} // namespace

std::unique_ptr<llvm::MemoryBuffer>
mlir::cq4p::readInput(const std::string &inputFile, std::string &errorMessage,
                      struct stat &identity) {
  if (inputFile == "-") {
    identity = {};
    return openInputFile(inputFile, &errorMessage);
  }
  std::string text;
  if (!readRegularFile(AT_FDCWD, inputFile, inputFile, /*noFollow=*/false,
                       kMaxInputBytes, text, identity, errorMessage))
    return nullptr;
  return llvm::MemoryBuffer::getMemBufferCopy(text, inputFile);
}

llvm::Expected<std::string>
mlir::cq4p::readBundleDigest(llvm::StringRef directory, struct stat &identity) {
  std::string path = (directory + "/manifest.json").str();
  std::string where = "--bundle " + directory.str() + ": " + path;
  int directoryFd =
      ::open(directory.str().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (directoryFd < 0)
    return message(
        "--bundle " + directory +
        ": cannot open the bundle directory: " + std::strerror(errno));
  std::string text, error;
  bool read = readRegularFile(directoryFd, "manifest.json", path,
                              /*noFollow=*/true, CQ4P_MAX_MANIFEST_BYTES, text,
                              identity, error);
  ::close(directoryFd);
  if (!read)
    return message("--bundle " + directory + ": " + error);
  if (std::optional<size_t> offset =
          findNestingPast(text, kMaxJsonNesting, /*json=*/true))
    return message(where + ": nesting deeper than " +
                   llvm::Twine(kMaxJsonNesting) + " levels at byte " +
                   llvm::Twine(*offset));
  llvm::Expected<llvm::json::Value> manifest = llvm::json::parse(text);
  if (!manifest)
    return message(where +
                   ": not JSON: " + llvm::toString(manifest.takeError()));
  const llvm::json::Object *object = manifest->getAsObject();
  std::optional<llvm::StringRef> digest =
      object ? object->getString("model_digest") : std::nullopt;
  if (!digest || digest->empty())
    return message(where + " has no model_digest to record (python -m cq4p "
                           "convert writes one)");
  return digest->str();
}

llvm::Error mlir::cq4p::checkOutput(
    const std::string &outputFile, bool library,
    llvm::ArrayRef<std::pair<std::string, struct stat>> inputs) {
  struct stat output;
  if (::stat(outputFile.c_str(), &output) != 0)
    return llvm::Error::success(); // not there yet: no input
  if (library && !S_ISREG(output.st_mode))
    // lld writes through a stream whose failure it cannot report (a
    // device such as /dev/full would end in "LLVM ERROR").
    return message("-o " + outputFile + " is " +
                   (S_ISCHR(output.st_mode)    ? "a character device"
                    : S_ISDIR(output.st_mode)  ? "a directory"
                    : S_ISFIFO(output.st_mode) ? "a FIFO"
                                               : "not a regular file") +
                   "; --emit=lib writes a regular file");
  for (const auto &[name, input] : inputs)
    if (output.st_dev == input.st_dev && output.st_ino == input.st_ino)
      return message("-o " + outputFile + " is the input " + name +
                     ": refusing to overwrite it");
  return llvm::Error::success();
}

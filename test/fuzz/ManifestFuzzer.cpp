//===- ManifestFuzzer.cpp - libFuzzer target for manifest.json ------------===//
//
// Any byte string as a bundle's manifest.json, in a bundle directory that
// holds one valid FP16 tensor (a.weights) and, beside it, a directory the
// bundle must never reach. Bundle::open either refuses with a message naming
// the manifest or the tensor, or accepts with every tensor mapped from a
// regular file directly inside the bundle directory. Built with
// AddressSanitizer and UBSan.
//
//===----------------------------------------------------------------------===//

#include "cq4p/runtime/Bundle.h"

#include "TestFiles.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <sys/stat.h>
#include <unistd.h>

using namespace cq4p::runtime;

namespace {

std::string gRoot, gBundle;

void removeDirectories() {
  for (const char *name : {"/bundle/manifest.json", "/bundle/a.weights",
                           "/bundle/link.weights", "/outside/b.weights"})
    ::unlink((gRoot + name).c_str());
  ::rmdir((gRoot + "/bundle").c_str());
  ::rmdir((gRoot + "/outside").c_str());
  ::rmdir(gRoot.c_str());
}

bool writeFile(const std::string &path, const uint8_t *data, size_t size) {
  FILE *file = std::fopen(path.c_str(), "wb");
  if (!file)
    return false;
  bool ok = std::fwrite(data, 1, size, file) == size;
  return std::fclose(file) == 0 && ok;
}

} // namespace

extern "C" int LLVMFuzzerInitialize(int *, char ***) {
  // Every input is written as a file: in memory (tmpfs) where there is one,
  // since a disk-backed /tmp can cost milliseconds a write.
  struct stat shm;
  std::string pattern = std::string(::stat("/dev/shm", &shm) == 0 && S_ISDIR(shm.st_mode)
                                        ? "/dev/shm"
                                        : "/tmp") +
                        "/cq4p-manifest-fuzz-XXXXXX";
  const char *root = ::mkdtemp(pattern.data());
  if (!root)
    std::abort();
  gRoot = root;
  std::atexit(removeDirectories);
  gBundle = gRoot + "/bundle";
  std::string outside = std::string(root) + "/outside";
  if (::mkdir(gBundle.c_str(), 0700) != 0 || ::mkdir(outside.c_str(), 0700) != 0)
    std::abort();
  std::vector<uint8_t> tensor = cq4p::test::fp16File({3, 5});
  // The same tensor inside and outside: reaching the outside one would be
  // accepted, which the check below catches by its path.
  if (!writeFile(gBundle + "/a.weights", tensor.data(), tensor.size()) ||
      !writeFile(outside + "/b.weights", tensor.data(), tensor.size()) ||
      ::symlink((outside + "/b.weights").c_str(), (gBundle + "/link.weights").c_str()) != 0)
    std::abort();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::string manifest = gBundle + "/manifest.json";
  if (!writeFile(manifest, data, size))
    std::abort();
  std::unique_ptr<Bundle> bundle;
  Status status = Bundle::open(gBundle, bundle);
  if (!status) {
    const std::string &message = status.message();
    if (bundle || message.empty() ||
        (message.rfind(gBundle, 0) != 0 && message.rfind("tensor '", 0) != 0))
      __builtin_trap();
    return 0;
  }
  for (const BundleTensor &tensor : bundle->tensors()) {
    const std::string &path = tensor.resolvedPath;
    if (path.rfind(gBundle + "/", 0) != 0 ||
        path.find('/', gBundle.size() + 1) != std::string::npos)
      __builtin_trap();
    struct stat st;
    if (::lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode))
      __builtin_trap();
  }
  return 0;
}

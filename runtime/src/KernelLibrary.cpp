//===- KernelLibrary.cpp - opening a kernel library -----------------------===//

#include "cq4p/runtime/KernelLibrary.h"

#include "KernelLibraryChecks.h"

#include "SafeOpen.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <unistd.h>
#include <utility>

namespace cq4p::runtime {

using namespace kernel_checks;

namespace {

/// Reads the whole regular file `path` (at most kMaxLibraryBytes).
Status readLibraryFile(const std::string &path, std::vector<uint8_t> &bytes) {
  int fd = -1;
  uint64_t size = 0;
  if (Status status = openRegularFile(AT_FDCWD, path, path, false, fd, size);
      !status)
    return status;
  if (size > kMaxLibraryBytes) {
    ::close(fd);
    return libraryError(CQ4P_ERROR_FORMAT, path,
                        "size: expected at most " + str(kMaxLibraryBytes) +
                            " bytes for a kernel library, found " + str(size));
  }
  bytes.resize(size);
  size_t got = 0;
  while (got < size) {
    ssize_t count = ::read(fd, bytes.data() + got, size - got);
    if (count < 0 && errno == EINTR)
      continue;
    if (count < 0) {
      int error = errno;
      ::close(fd);
      return libraryError(CQ4P_ERROR_IO, path,
                          std::string("cannot read: ") + std::strerror(error));
    }
    if (count == 0)
      break;
    got += size_t(count);
  }
  ::close(fd);
  bytes.resize(got); // a file that shrank while read is checked as it is now
  return Status::ok();
}

/// A segment of the loaded library: [begin, end) with its PF_* flags.
struct LoadedSegment {
  uintptr_t begin, end;
  uint32_t flags;
};

/// The loadable segments of the object whose load base is `base`.
std::vector<LoadedSegment> loadedSegments(uintptr_t base) {
  struct Search {
    uintptr_t base;
    std::vector<LoadedSegment> segments;
  } search{base, {}};
  ::dl_iterate_phdr(
      [](dl_phdr_info *info, size_t, void *data) {
        auto *search = static_cast<Search *>(data);
        if (info->dlpi_addr != search->base || search->base == 0)
          return 0;
        for (int i = 0; i < info->dlpi_phnum; ++i) {
          const ElfW(Phdr) &header = info->dlpi_phdr[i];
          if (header.p_type == PT_LOAD)
            search->segments.push_back(
                {info->dlpi_addr + header.p_vaddr,
                 info->dlpi_addr + header.p_vaddr + header.p_memsz,
                 header.p_flags});
        }
        return 1;
      },
      &search);
  return search.segments;
}

/// Where the pointers a library's table and descriptors hold may point.
class PointerCheck {
public:
  PointerCheck(const std::string &path, std::vector<LoadedSegment> segments)
      : path_(path), segments_(std::move(segments)) {}

  /// `what` (bytes bytes at pointer) lies inside one readable segment.
  Status readable(const std::string &what, const void *pointer,
                  uint64_t bytes) const {
    if (const LoadedSegment *segment = find(pointer, PF_R))
      if (fits(uintptr_t(pointer) - segment->begin, bytes,
               segment->end - segment->begin))
        return Status::ok();
    return refuse(what, str(bytes) + " bytes inside the library", pointer);
  }

  /// `what` is a NUL-terminated string inside one readable segment.
  Status string(const std::string &what, const char *pointer) const {
    const LoadedSegment *segment = find(pointer, PF_R);
    if (segment == nullptr ||
        std::memchr(pointer, 0, segment->end - uintptr_t(pointer)) == nullptr)
      return refuse(what, "a string inside the library", pointer);
    return Status::ok();
  }

  /// `what` points into an executable segment.
  Status code(const std::string &what, const void *pointer) const {
    if (find(pointer, PF_X) == nullptr)
      return refuse(what, "a function in the library's code", pointer);
    return Status::ok();
  }

private:
  const LoadedSegment *find(const void *pointer, uint32_t flag) const {
    for (const LoadedSegment &segment : segments_)
      if ((segment.flags & flag) && uintptr_t(pointer) >= segment.begin &&
          uintptr_t(pointer) < segment.end)
        return &segment;
    return nullptr;
  }
  Status refuse(const std::string &what, const std::string &expected,
                const void *pointer) const {
    return libraryError(CQ4P_ERROR_FORMAT, path_,
                        what + ": expected " + expected + ", found " +
                            (pointer ? hex(uintptr_t(pointer)) : "null"));
  }
  std::string path_;
  std::vector<LoadedSegment> segments_;
};

/// The size a library's dynamic symbol table gives the symbol at `address`
/// (0 when the loader does not know it).
uint64_t symbolSize(const void *address) {
  Dl_info info;
  void *entry = nullptr;
  if (::dladdr1(address, &info, &entry, RTLD_DL_SYMENT) == 0 ||
      entry == nullptr || info.dli_saddr != address)
    return 0;
  return static_cast<const ElfW(Sym) *>(entry)->st_size;
}

/// Every pointer of a kernel table, before any is followed.
Status checkTablePointers(const PointerCheck &check,
                          const cq4p_kernel_table &table) {
  // A table of another ABI is refused by validateKernelTable by its version
  // alone, and an oversized count by its value, without following pointers.
  if (table.abi_version != CQ4P_KERNEL_ABI_VERSION || table.count == 0 ||
      table.count > kMaxKernelCount)
    return Status::ok();
  if (Status status = check.readable(
          "kernels", table.kernels,
          uint64_t(table.count) * sizeof(cq4p_kernel_desc));
      !status)
    return status;
  for (uint32_t i = 0; i < table.count; ++i) {
    const cq4p_kernel_desc &kernel = table.kernels[i];
    std::string label = "kernel " + str(i);
    if (kernel.name != nullptr)
      if (Status status = check.string(label + ": name", kernel.name); !status)
        return status;
    label = kernelLabel(i, kernel);
    if (kernel.entry != nullptr)
      if (Status status = check.code(label + ": entry",
                                     reinterpret_cast<const void *>(kernel.entry));
          !status)
        return status;
  }
  return Status::ok();
}

/// Every pointer of a model descriptor, before any is followed.
Status checkModelPointers(const PointerCheck &check,
                          const cq4p_model_desc &model) {
  if (model.abi_version != CQ4P_KERNEL_ABI_VERSION)
    return Status::ok();
  const std::pair<const char *, const void *> steps[] = {
      {"model steps: prefill", reinterpret_cast<const void *>(model.prefill)},
      {"model steps: decode", reinterpret_cast<const void *>(model.decode)}};
  for (const auto &[what, pointer] : steps)
    if (pointer != nullptr)
      if (Status status = check.code(what, pointer); !status)
        return status;
  const std::pair<const char *, const char *> strings[] = {
      {"model steps: architecture", model.architecture},
      {"model steps: digest", model.digest}};
  for (const auto &[what, pointer] : strings)
    if (pointer != nullptr)
      if (Status status = check.string(what, pointer); !status)
        return status;
  if (model.binding_count == 0 || model.binding_count > kMaxModelBindingCount)
    return Status::ok();
  if (Status status = check.readable(
          "model steps: bindings", model.bindings,
          uint64_t(model.binding_count) * sizeof(cq4p_model_binding));
      !status)
    return status;
  for (uint32_t i = 0; i < model.binding_count; ++i)
    if (model.bindings[i].tensor != nullptr)
      if (Status status = check.string("model steps: binding " + str(i) +
                                           ": tensor",
                                       model.bindings[i].tensor);
          !status)
        return status;
  return Status::ok();
}

} // namespace

Status KernelLibrary::open(const std::string &path,
                           std::unique_ptr<KernelLibrary> &out) {
  return open(path, detectCpuFeatures(), out);
}

Status KernelLibrary::open(const std::string &path, const CpuFeatures &cpu,
                           std::unique_ptr<KernelLibrary> &out) {
  const char *level = std::getenv(kHostLevelVariable);
  return open(path, cpu, level ? level : "", kHostLevelVariable, out);
}

Status KernelLibrary::open(const std::string &path, const CpuFeatures &cpu,
                           const std::string &level, const std::string &origin,
                           std::unique_ptr<KernelLibrary> &out) {
  out.reset();
  {
    std::vector<uint8_t> bytes;
    if (Status status = readLibraryFile(path, bytes); !status)
      return status;
    if (Status status = checkElfFile(path, bytes.data(), bytes.size()); !status)
      return status;
  }

  // Without a slash dlopen would search the library path and could load a
  // different file from the one whose header was just checked.
  std::string loadPath =
      path.find('/') == std::string::npos ? "./" + path : path;
  dlerror();
  void *handle = ::dlopen(loadPath.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char *error = dlerror();
    return libraryError(CQ4P_ERROR_IO, path,
                        std::string("cannot load: ") +
                            (error ? error : "dlopen failed"));
  }
  std::unique_ptr<KernelLibrary> library(new KernelLibrary());
  library->path_ = path;
  library->handle_ = handle;

  link_map *map = nullptr;
  if (::dlinfo(handle, RTLD_DI_LINKMAP, &map) != 0 || map == nullptr)
    return libraryError(CQ4P_ERROR_IO, path, "cannot find where it was loaded");
  PointerCheck check(path, loadedSegments(map->l_addr));

  // The table and model steps: the chosen variant's when the library has
  // several, else kernel_abi.h's symbols.
  void *symbol = nullptr, *model = nullptr;
  dlerror();
  if (void *found = ::dlsym(handle, CQ4P_KERNEL_VARIANTS_SYMBOL)) {
    const auto *variants = static_cast<const cq4p_kernel_variants *>(found);
    if (Status status = check.readable(CQ4P_KERNEL_VARIANTS_SYMBOL, found,
                                       sizeof(cq4p_kernel_variants));
        !status)
      return status;
    if (variants->version != CQ4P_KERNEL_VARIANTS_VERSION)
      return libraryError(CQ4P_ERROR_UNSUPPORTED, path,
                          std::string(CQ4P_KERNEL_VARIANTS_SYMBOL) +
                              ": version: expected " +
                              str(CQ4P_KERNEL_VARIANTS_VERSION) +
                              " (this runtime's), found " +
                              str(variants->version) +
                              (variants->version < CQ4P_KERNEL_VARIANTS_VERSION
                                   ? abiAdvice(0)
                                   : abiAdvice(CQ4P_KERNEL_ABI_VERSION + 1)));
    if (variants->count == 0 || variants->count > CQ4P_MAX_KERNEL_VARIANTS)
      return libraryError(CQ4P_ERROR_FORMAT, path,
                          std::string(CQ4P_KERNEL_VARIANTS_SYMBOL) +
                              ": count: expected 1.." +
                              str(CQ4P_MAX_KERNEL_VARIANTS) + ", found " +
                              str(variants->count));
    if (Status status = check.readable(
            std::string(CQ4P_KERNEL_VARIANTS_SYMBOL) + ": variants",
            variants->variants,
            uint64_t(variants->count) * sizeof(cq4p_kernel_variant));
        !status)
      return status;
    for (uint32_t i = 0; i < variants->count; ++i) {
      const cq4p_kernel_variant &variant = variants->variants[i];
      std::string label =
          std::string(CQ4P_KERNEL_VARIANTS_SYMBOL) + ": variant " + str(i);
      if (Status status = check.string(label + ": name", variant.name);
          !status)
        return status;
      label += " (" + std::string(variant.name) + ")";
      if (Status status = check.readable(label + ": kernels", variant.kernels,
                                         sizeof(cq4p_kernel_table));
          !status)
        return status;
      if (variant.model != nullptr)
        if (Status status = check.readable(label + ": model", variant.model,
                                           sizeof(cq4p_model_desc));
            !status)
          return status;
    }
    size_t index = 0;
    if (Status status = chooseVariant(path, variants->variants,
                                      variants->count, cpu, level, origin,
                                      index);
        !status)
      return status;
    const cq4p_kernel_variant &chosen = variants->variants[index];
    symbol = const_cast<cq4p_kernel_table *>(chosen.kernels);
    model = const_cast<cq4p_model_desc *>(chosen.model);
    library->variant_ = chosen.name;
    library->variantCount_ = variants->count;
  } else {
    if (!level.empty())
      return libraryError(CQ4P_ERROR_ARGUMENT, path,
                          origin + " asks for the " + excerpt(level) +
                              " variant; the library records no variants "
                              "(an AArch64 library, or one compiled before "
                              "cq4p-compile made them)");
    dlerror();
    symbol = ::dlsym(handle, CQ4P_KERNEL_TABLE_SYMBOL);
    if (symbol == nullptr) {
      const char *error = dlerror();
      return libraryError(CQ4P_ERROR_NOT_FOUND, path,
                          std::string("no `") + CQ4P_KERNEL_TABLE_SYMBOL +
                              "` symbol: not a cq4p kernel library (" +
                              (error ? error : "the symbol is null") + ")");
    }
    // Optional: a library compiled from kernels alone has no model steps.
    dlerror();
    model = ::dlsym(handle, CQ4P_MODEL_SYMBOL);
  }
  if (Status status = check.readable(CQ4P_KERNEL_TABLE_SYMBOL, symbol,
                                     sizeof(cq4p_kernel_table));
      !status)
    return status;
  if (uint64_t size = symbolSize(symbol); size != 0 && size < sizeof(cq4p_kernel_table))
    return libraryError(CQ4P_ERROR_FORMAT, path,
                        std::string(CQ4P_KERNEL_TABLE_SYMBOL) + ": expected " +
                            str(sizeof(cq4p_kernel_table)) + " bytes, found " +
                            str(size));
  library->table_ = static_cast<const cq4p_kernel_table *>(symbol);
  if (Status status = checkTablePointers(check, *library->table_); !status)
    return status;
  if (Status status = validateKernelTable(path, *library->table_); !status)
    return status;
  if (Status status = checkKernelsRunnable(path, *library->table_, cpu);
      !status)
    return status;

  if (model != nullptr) {
    const auto *desc = static_cast<const cq4p_model_desc *>(model);
    if (Status status = check.readable(CQ4P_MODEL_SYMBOL, model,
                                       sizeof(cq4p_model_desc));
        !status)
      return status;
    if (uint64_t size = symbolSize(model); size != 0 && size < sizeof(cq4p_model_desc))
      return libraryError(CQ4P_ERROR_FORMAT, path,
                          std::string(CQ4P_MODEL_SYMBOL) + ": expected " +
                              str(sizeof(cq4p_model_desc)) + " bytes, found " +
                              str(size));
    if (Status status = checkModelPointers(check, *desc); !status)
      return status;
    if (Status status = validateModelDesc(path, *desc); !status)
      return status;
    if (Status status = checkModelRunnable(path, *desc, cpu); !status)
      return status;
    library->model_ = desc;
    library->bundleDigest_ = desc->digest != nullptr ? desc->digest : "";
  }

  // Optional: the digest of the bundle the library was compiled for.
  dlerror();
  if (const auto *digest = static_cast<const char *>(
          ::dlsym(handle, CQ4P_BUNDLE_DIGEST_SYMBOL))) {
    if (Status status = check.string(CQ4P_BUNDLE_DIGEST_SYMBOL, digest); !status)
      return status;
    size_t length = std::strlen(digest);
    uint64_t size = symbolSize(digest);
    if (length == 0 || length > kMaxBundleDigestBytes ||
        (size != 0 && length >= size))
      return libraryError(CQ4P_ERROR_FORMAT, path,
                          std::string(CQ4P_BUNDLE_DIGEST_SYMBOL) +
                              ": expected a string of 1 to " +
                              str(kMaxBundleDigestBytes) +
                              " bytes inside the symbol, found " + str(length) +
                              " bytes" +
                              (size != 0 ? " in a symbol of " + str(size) : ""));
    if (library->model_ != nullptr && !library->bundleDigest_.empty() &&
        library->bundleDigest_ != digest)
      return libraryError(CQ4P_ERROR_FORMAT, path,
                          std::string(CQ4P_BUNDLE_DIGEST_SYMBOL) + ": " + digest +
                              ", but the model steps were compiled for bundle "
                              "digest " +
                              library->bundleDigest_);
    library->bundleDigest_ = digest;
  }
  out = std::move(library);
  return Status::ok();
}

KernelLibrary::~KernelLibrary() {
  if (handle_ != nullptr)
    ::dlclose(handle_);
}

} // namespace cq4p::runtime

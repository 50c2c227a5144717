//===- KernelLibrary.cpp - loading and checking a kernel library ----------===//

#include "cq4p/runtime/KernelLibrary.h"

#include "SafeOpen.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <unistd.h>
#include <utility>

namespace cq4p::runtime {
namespace {

constexpr size_t kElf64HeaderBytes = 64;
constexpr size_t kElfMachineEnd = 20; // e_ident[16], e_type, e_machine
constexpr uint8_t kElfClass64 = 2;
constexpr uint8_t kElfDataLittle = 1;
constexpr uint8_t kElfDataBig = 2;
constexpr uint16_t kElfTypeDyn = 3;
constexpr uint16_t kElfMachineX86_64 = 62;
constexpr uint16_t kElfMachineAArch64 = 183;

std::string str(uint64_t value) { return std::to_string(value); }

struct ElfMachine {
  uint16_t code;
  const char *description; // with its article, as the message uses it
  const char *constant;
};

// Machines a library handed to cq4p plausibly comes from; the rest are
// named by number.
constexpr ElfMachine kMachines[] = {
    {3, "an x86 (32-bit)", "EM_386"},
    {8, "a MIPS", "EM_MIPS"},
    {20, "a PowerPC", "EM_PPC"},
    {21, "a 64-bit PowerPC", "EM_PPC64"},
    {22, "an IBM S/390", "EM_S390"},
    {40, "a 32-bit Arm", "EM_ARM"},
    {kElfMachineX86_64, "an x86-64", "EM_X86_64"},
    {kElfMachineAArch64, "an AArch64", "EM_AARCH64"},
    {243, "a RISC-V", "EM_RISCV"},
    {258, "a LoongArch", "EM_LOONGARCH"},
};

std::string describeMachine(uint16_t code) {
  for (const ElfMachine &machine : kMachines)
    if (machine.code == code)
      return std::string(machine.description) + " (" + machine.constant + ")";
  return "an ELF machine " + str(code);
}

uint16_t hostElfMachine() {
  switch (hostArch()) {
  case CpuArch::X86_64:
    return kElfMachineX86_64;
  case CpuArch::AArch64:
    return kElfMachineAArch64;
  case CpuArch::Other:
    break;
  }
  return 0;
}

Status libraryError(cq4p_code code, const std::string &path,
                    const std::string &what) {
  return Status(code, path + ": " + what);
}

std::string kernelLabel(size_t index, const cq4p_kernel_desc &kernel) {
  std::string label = "kernel " + str(index);
  if (kernel.name != nullptr)
    label += std::string(" (") + kernel.name + ")";
  return label;
}

bool isKnownOp(uint32_t op) {
  return op >= CQ4P_KERNEL_QUANTIZE_HADAMARD && op <= CQ4P_KERNEL_ATTENTION;
}

bool isKnownTarget(uint32_t target) {
  return target >= CQ4P_TARGET_HOST && target <= CQ4P_TARGET_AARCH64_SME2;
}

/// What to do about a library of another ABI version.
std::string abiAdvice(uint32_t version) {
  return version < CQ4P_KERNEL_ABI_VERSION
             ? ": an older cq4p-compile built it; recompile it with "
               "cq4p-compile"
             : ": a newer cq4p-compile built it; recompile it with the "
               "cq4p-compile of this runtime";
}

/// Why code of `target` needing `features` cannot run on `cpu`, or an
/// empty string when it can. Shared by kernels and model steps.
std::string whyNotRunnable(uint32_t target, uint64_t features,
                           const CpuFeatures &cpu) {
  std::string name = kernelTargetName(target);
  // Host code records its instruction set (an x86-64 level and the dot's
  // extensions) in `features`, checked below; the ELF header check has
  // already matched its architecture to this process.
  if (target != CQ4P_TARGET_HOST && cpu.arch != CpuArch::AArch64)
    return "targets " + name + "; this process is " + archName(cpu.arch);
  if (target == CQ4P_TARGET_AARCH64_SME2) {
    if (!(cpu.features & CQ4P_FEATURE_AARCH64_SME2))
      return "targets aarch64-sme2, which needs SME2; this CPU has no SME2 "
             "(it has: " +
             featureList(cpu.features) + ")";
    if (cpu.smeVectorBits != kSme2VectorBits)
      return "targets aarch64-sme2, built for a " + str(kSme2VectorBits) +
             "-bit streaming vector length; this CPU's is " +
             str(cpu.smeVectorBits) + " bits";
  }
  if (uint64_t missing = features & ~cpu.features)
    return "needs " + featureList(missing) +
           ", which this CPU lacks (it has: " + featureList(cpu.features) +
           ")";
  return "";
}

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

/// `offset + size` within `limit`, without overflow.
bool fits(uint64_t offset, uint64_t size, uint64_t limit) {
  return offset <= limit && size <= limit - offset;
}

std::string hex(uint64_t value) {
  char buffer[24];
  std::snprintf(buffer, sizeof(buffer), "0x%llx",
                static_cast<unsigned long long>(value));
  return buffer;
}

/// The name of a dynamic tag that makes code run at load or unload.
const char *initTagName(int64_t tag) {
  switch (tag) {
  case DT_INIT: return "DT_INIT";
  case DT_FINI: return "DT_FINI";
  case DT_INIT_ARRAY: return "DT_INIT_ARRAY";
  case DT_FINI_ARRAY: return "DT_FINI_ARRAY";
  case DT_PREINIT_ARRAY: return "DT_PREINIT_ARRAY";
  default: return nullptr;
  }
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

Status checkElfHeader(const std::string &path, const uint8_t *bytes,
                      size_t size) {
  static const uint8_t kMagic[4] = {0x7f, 'E', 'L', 'F'};
  if (size < 4 || std::memcmp(bytes, kMagic, 4) != 0) {
    std::string found = str(size) + " bytes";
    if (size >= 4) {
      char hex[16];
      std::snprintf(hex, sizeof(hex), "%02x %02x %02x %02x", bytes[0],
                    bytes[1], bytes[2], bytes[3]);
      found = hex;
    }
    return libraryError(CQ4P_ERROR_FORMAT, path,
                        "not an ELF file: expected the magic 7f 45 4c 46, "
                        "found " + found);
  }
  if (size < kElfMachineEnd)
    return libraryError(CQ4P_ERROR_FORMAT, path,
                        "truncated ELF header: expected 64 bytes, found " +
                            str(size));
  uint8_t elfClass = bytes[4], data = bytes[5];
  if (data != kElfDataLittle && data != kElfDataBig)
    return libraryError(CQ4P_ERROR_FORMAT, path,
                        "ELF data encoding: expected 1 (little-endian) or 2 "
                        "(big-endian), found " + str(data));
  uint16_t machine = data == kElfDataLittle
                         ? uint16_t(bytes[18] | bytes[19] << 8)
                         : uint16_t(bytes[18] << 8 | bytes[19]);
  // The machine first: it is the defect a user most often has (a library
  // built for the phone, copied to the laptop) and the one dlopen words worst.
  uint16_t host = hostElfMachine();
  if (host != 0 && machine != host)
    return libraryError(CQ4P_ERROR_UNSUPPORTED, path,
                        describeMachine(machine) + " library; this process is " +
                            archName(hostArch()));
  if (elfClass != kElfClass64)
    return libraryError(CQ4P_ERROR_UNSUPPORTED, path,
                        "ELF class: expected 2 (ELFCLASS64, this process is "
                        "64-bit), found " + str(elfClass));
  if (data != kElfDataLittle)
    return libraryError(CQ4P_ERROR_UNSUPPORTED, path,
                        "a big-endian ELF library; this process is "
                        "little-endian");
  if (size < kElf64HeaderBytes)
    return libraryError(CQ4P_ERROR_FORMAT, path,
                        "truncated ELF header: expected 64 bytes, found " +
                            str(size));
  uint16_t type = uint16_t(bytes[16] | bytes[17] << 8);
  if (type != kElfTypeDyn)
    return libraryError(CQ4P_ERROR_UNSUPPORTED, path,
                        "ELF type: expected 3 (ET_DYN, a shared library), "
                        "found " + str(type));
  return Status::ok();
}

Status checkElfFile(const std::string &path, const uint8_t *bytes,
                    size_t size) {
  if (Status status = checkElfHeader(path, bytes, size); !status)
    return status;
  Elf64_Ehdr header;
  std::memcpy(&header, bytes, sizeof(header));
  auto refuse = [&](const std::string &message) {
    return libraryError(CQ4P_ERROR_FORMAT, path, message);
  };
  if (header.e_phnum == 0 || header.e_phentsize != sizeof(Elf64_Phdr))
    return refuse("program headers: expected entries of " +
                  str(sizeof(Elf64_Phdr)) + " bytes, found " +
                  str(header.e_phnum) + " of " + str(header.e_phentsize));
  if (!fits(header.e_phoff, uint64_t(header.e_phnum) * sizeof(Elf64_Phdr), size))
    return refuse("program headers: expected " + str(header.e_phnum) +
                  " entries at offset " + str(header.e_phoff) +
                  " inside the file, found a file of " + str(size) +
                  " bytes (truncated?)");
  if (header.e_shoff != 0 &&
      (header.e_shentsize != sizeof(Elf64_Shdr) ||
       !fits(header.e_shoff, uint64_t(header.e_shnum) * sizeof(Elf64_Shdr), size)))
    return refuse("section headers: expected " + str(header.e_shnum) +
                  " entries of " + str(sizeof(Elf64_Shdr)) + " bytes at offset " +
                  str(header.e_shoff) + " inside the file, found a file of " +
                  str(size) + " bytes (truncated?)");

  std::vector<Elf64_Phdr> loads;
  const Elf64_Phdr *dynamic = nullptr;
  std::vector<Elf64_Phdr> headers(header.e_phnum);
  std::memcpy(headers.data(), bytes + header.e_phoff,
              headers.size() * sizeof(Elf64_Phdr));
  for (size_t i = 0; i < headers.size(); ++i) {
    const Elf64_Phdr &segment = headers[i];
    std::string label = "program header " + str(i);
    if (segment.p_type != PT_LOAD && segment.p_type != PT_DYNAMIC)
      continue;
    if (!fits(segment.p_offset, segment.p_filesz, size))
      return refuse(label + ": expected its " + str(segment.p_filesz) +
                    " bytes at offset " + str(segment.p_offset) +
                    " inside the file, found a file of " + str(size) +
                    " bytes (truncated?)");
    if (segment.p_type == PT_DYNAMIC) {
      dynamic = &segment;
      continue;
    }
    if (segment.p_filesz > segment.p_memsz)
      return refuse(label + ": expected file size <= memory size (" +
                    str(segment.p_memsz) + "), found " + str(segment.p_filesz));
    if (!fits(segment.p_vaddr, segment.p_memsz, UINT64_MAX))
      return refuse(label + ": address range overflows");
    loads.push_back(segment);
  }
  if (loads.empty())
    return refuse("program headers: expected a loadable segment, found none");
  if (dynamic == nullptr)
    return refuse("program headers: expected a dynamic section (PT_DYNAMIC), "
                  "found none");

  auto runsAtLoad = [&](const std::string &what) {
    return refuse("code that runs when the library is loaded or unloaded (" +
                  what +
                  "): cq4p-compile writes none, and it would run before the "
                  "library's kernel table could be checked");
  };
  // The dynamic section as the loader reads it, up to DT_NULL.
  uint64_t entries = dynamic->p_filesz / sizeof(Elf64_Dyn);
  bool terminated = false;
  uint64_t symtab = 0, relocations[2][2] = {}; // {address, bytes}: RELA, JMPREL
  for (uint64_t i = 0; i < entries && !terminated; ++i) {
    Elf64_Dyn entry;
    std::memcpy(&entry, bytes + dynamic->p_offset + i * sizeof(Elf64_Dyn),
                sizeof(entry));
    switch (entry.d_tag) {
    case DT_NULL: terminated = true; break;
    case DT_SYMTAB: symtab = entry.d_un.d_ptr; break;
    case DT_RELA: relocations[0][0] = entry.d_un.d_ptr; break;
    case DT_RELASZ: relocations[0][1] = entry.d_un.d_val; break;
    case DT_JMPREL: relocations[1][0] = entry.d_un.d_ptr; break;
    case DT_PLTRELSZ: relocations[1][1] = entry.d_un.d_val; break;
    case DT_REL: return refuse("relocations: expected RELA (DT_RELA), found DT_REL");
    default:
      if (const char *name = initTagName(entry.d_tag))
        return runsAtLoad(name);
    }
  }
  if (!terminated)
    return refuse("dynamic section: expected a DT_NULL entry within its " +
                  str(dynamic->p_filesz) + " bytes, found none");

  // The file offset of `bytes` bytes at address `address`, when a loadable
  // segment holds them in the file.
  auto fileOffset = [&](uint64_t address, uint64_t count, uint64_t &offset) {
    for (const Elf64_Phdr &segment : loads)
      if (address >= segment.p_vaddr &&
          fits(address - segment.p_vaddr, count, segment.p_filesz)) {
        offset = segment.p_offset + (address - segment.p_vaddr);
        return true;
      }
    return false;
  };
  // GNU indirect functions: the loader calls their resolvers while it
  // relocates, which is code running at load as surely as a constructor.
  const uint32_t irelative = header.e_machine == EM_AARCH64 ? R_AARCH64_IRELATIVE
                                                            : R_X86_64_IRELATIVE;
  for (const auto &[address, bytesOfTable] : relocations) {
    if (bytesOfTable == 0)
      continue;
    uint64_t offset = 0;
    if (!fileOffset(address, bytesOfTable, offset))
      return refuse("relocations: expected " + str(bytesOfTable) + " bytes at " +
                    hex(address) + " inside the file's segments, found none");
    for (uint64_t at = 0; at + sizeof(Elf64_Rela) <= bytesOfTable;
         at += sizeof(Elf64_Rela)) {
      Elf64_Rela relocation;
      std::memcpy(&relocation, bytes + offset + at, sizeof(relocation));
      if (ELF64_R_TYPE(relocation.r_info) == irelative)
        return runsAtLoad("an IRELATIVE relocation");
      uint64_t index = ELF64_R_SYM(relocation.r_info);
      uint64_t symbolOffset = 0;
      if (index == 0)
        continue;
      if (index > UINT64_MAX / sizeof(Elf64_Sym) ||
          !fileOffset(symtab + index * sizeof(Elf64_Sym), sizeof(Elf64_Sym),
                      symbolOffset))
        return refuse("relocations: symbol " + str(index) +
                      " is outside the file's segments");
      Elf64_Sym symbol;
      std::memcpy(&symbol, bytes + symbolOffset, sizeof(symbol));
      if (ELF64_ST_TYPE(symbol.st_info) == STT_GNU_IFUNC &&
          symbol.st_shndx != SHN_UNDEF)
        return runsAtLoad("a relocation to the indirect function symbol " +
                          str(index));
    }
  }
  return Status::ok();
}

std::string kernelOpName(uint32_t op) {
  switch (op) {
  case CQ4P_KERNEL_QUANTIZE_HADAMARD:
    return "QUANTIZE_HADAMARD";
  case CQ4P_KERNEL_QUANTIZE_ORTHOGONAL:
    return "QUANTIZE_ORTHOGONAL";
  case CQ4P_KERNEL_MATMUL:
    return "MATMUL";
  case CQ4P_KERNEL_EMBEDDING:
    return "EMBEDDING";
  case CQ4P_KERNEL_ATTENTION:
    return "ATTENTION";
  default:
    return "op " + str(op);
  }
}

std::string kernelTargetName(uint32_t target) {
  switch (target) {
  case CQ4P_TARGET_HOST:
    return "host";
  case CQ4P_TARGET_AARCH64_NEON:
    return "aarch64-neon";
  case CQ4P_TARGET_AARCH64_SME2:
    return "aarch64-sme2";
  default:
    return "target " + str(target);
  }
}

std::string describeKernel(const cq4p_kernel_desc &kernel) {
  std::string text = kernel.name != nullptr ? kernel.name : "(unnamed)";
  text += " (" + kernelOpName(kernel.op);
  if (kernel.op != CQ4P_KERNEL_QUANTIZE_HADAMARD &&
      kernel.op != CQ4P_KERNEL_QUANTIZE_ORTHOGONAL)
    text += " N=" + str(kernel.n);
  text += " K=" + str(kernel.k) + " gs=" + str(kernel.group_size);
  text += kernel.orthogonal ? " orthogonal" : " hadamard";
  text += " rows " + str(kernel.min_rows) + "..";
  if (kernel.max_rows != 0)
    text += str(kernel.max_rows);
  text += ", " + kernelTargetName(kernel.target) + ")";
  return text;
}

Status validateKernelTable(const std::string &path,
                           const cq4p_kernel_table &table) {
  if (table.abi_version != CQ4P_KERNEL_ABI_VERSION)
    return libraryError(CQ4P_ERROR_UNSUPPORTED, path,
                        "kernel ABI version: expected " +
                            str(CQ4P_KERNEL_ABI_VERSION) +
                            " (this runtime's), found " +
                            str(table.abi_version) +
                            abiAdvice(table.abi_version));
  if (table.count > kMaxKernelCount)
    return libraryError(CQ4P_ERROR_FORMAT, path,
                        "kernel count: expected at most " +
                            str(kMaxKernelCount) + ", found " +
                            str(table.count));
  if (table.count > 0 && table.kernels == nullptr)
    return libraryError(CQ4P_ERROR_FORMAT, path,
                        "kernels: expected " + str(table.count) +
                            " descriptors, found a null pointer");
  for (size_t i = 0; i < table.count; ++i) {
    const cq4p_kernel_desc &kernel = table.kernels[i];
    std::string label = kernelLabel(i, kernel);
    auto refuse = [&](const char *field, const std::string &expected,
                      const std::string &found) {
      return libraryError(CQ4P_ERROR_FORMAT, path,
                          label + ": " + field + ": expected " + expected +
                              ", found " + found);
    };
    if (kernel.name == nullptr)
      return refuse("name", "a string", "null");
    if (kernel.entry == nullptr)
      return refuse("entry", "a function", "null");
    if (!isKnownOp(kernel.op))
      return refuse("op",
                    "1..5 (QUANTIZE_HADAMARD, QUANTIZE_ORTHOGONAL, MATMUL, "
                    "EMBEDDING, ATTENTION)",
                    str(kernel.op));
    if (!isKnownTarget(kernel.target))
      return refuse("target", "1..3 (host, aarch64-neon, aarch64-sme2)",
                    str(kernel.target));
    if (uint64_t unknown = kernel.features & ~knownFeatureBits())
      return refuse("features", "CQ4P_FEATURE_* bits only",
                    featureList(unknown));
    if (kernel.n == 0)
      return refuse("n", "> 0", "0");
    if (kernel.k == 0)
      return refuse("k", "> 0", "0");
    if (kernel.group_size == 0)
      return refuse("group_size", "> 0", "0");
    // Attention records heads in n and kv heads in group_size.
    bool attention = kernel.op == CQ4P_KERNEL_ATTENTION;
    if (attention && kernel.n % kernel.group_size != 0)
      return refuse("group_size",
                    "a divisor of the heads (" + str(kernel.n) + ")",
                    str(kernel.group_size));
    if (!attention && kernel.k % kernel.group_size != 0)
      return refuse("group_size",
                    "a divisor of K (" + str(kernel.k) + ")",
                    str(kernel.group_size));
    if (!attention && kernel.window != 0)
      return refuse("window", "0 (only attention has a window)",
                    str(kernel.window));
    if (kernel.orthogonal > 1)
      return refuse("orthogonal", "0 or 1", str(kernel.orthogonal));
    if (kernel.op == CQ4P_KERNEL_QUANTIZE_HADAMARD && kernel.orthogonal)
      return refuse("orthogonal", "0 (a Hadamard quantize kernel)", "1");
    if ((kernel.op == CQ4P_KERNEL_QUANTIZE_ORTHOGONAL ||
         kernel.op == CQ4P_KERNEL_EMBEDDING) &&
        !kernel.orthogonal)
      return refuse("orthogonal",
                    "1 (" + kernelOpName(kernel.op) +
                        " reads an orthogonal tensor)",
                    "0");
    if (kernel.min_rows < 1)
      return refuse("min_rows", ">= 1", "0");
    if (kernel.max_rows != 0 && kernel.max_rows < kernel.min_rows)
      return refuse("max_rows",
                    "0 (no bound) or >= min_rows (" + str(kernel.min_rows) +
                        ")",
                    str(kernel.max_rows));
  }
  return Status::ok();
}

Status checkKernelsRunnable(const std::string &path,
                            const cq4p_kernel_table &table,
                            const CpuFeatures &cpu) {
  for (size_t i = 0; i < table.count; ++i) {
    const cq4p_kernel_desc &kernel = table.kernels[i];
    std::string why = whyNotRunnable(kernel.target, kernel.features, cpu);
    if (!why.empty())
      return libraryError(CQ4P_ERROR_UNSUPPORTED, path,
                          kernelLabel(i, kernel) + " " + why);
  }
  return Status::ok();
}

std::string bindingKindName(uint32_t kind) {
  switch (kind) {
  case CQ4P_BINDING_CQ4:
    return "CQ4";
  case CQ4P_BINDING_FP16:
    return "FP16";
  case CQ4P_BINDING_FP32:
    return "FP32";
  default:
    return "kind " + str(kind);
  }
}

std::string kvDtypeName(uint32_t dtype) {
  switch (dtype) {
  case CQ4P_KV_F32:
    return "f32";
  case CQ4P_KV_F16:
    return "f16";
  default:
    return "kv dtype " + str(dtype);
  }
}

size_t kvDtypeBytes(uint32_t dtype) {
  switch (dtype) {
  case CQ4P_KV_F32:
    return 4;
  case CQ4P_KV_F16:
    return 2;
  default:
    return 0;
  }
}

Status validateModelDesc(const std::string &path,
                         const cq4p_model_desc &model) {
  auto refuse = [&](const std::string &field, const std::string &expected,
                    const std::string &found) {
    return libraryError(CQ4P_ERROR_FORMAT, path,
                        "model steps: " + field + ": expected " + expected +
                            ", found " + found);
  };
  if (model.abi_version != CQ4P_KERNEL_ABI_VERSION)
    return libraryError(CQ4P_ERROR_UNSUPPORTED, path,
                        "model steps: ABI version: expected " +
                            str(CQ4P_KERNEL_ABI_VERSION) +
                            " (this runtime's), found " +
                            str(model.abi_version) +
                            abiAdvice(model.abi_version));
  if (model.prefill == nullptr)
    return refuse("prefill", "a function", "null");
  if (model.decode == nullptr)
    return refuse("decode", "a function", "null");
  if (model.architecture == nullptr)
    return refuse("architecture", "a string", "null");
  if (model.digest == nullptr)
    return refuse("digest", "a string (empty: any bundle)", "null");
  const std::pair<const char *, uint64_t> sizes[] = {
      {"vocab", model.vocab},
      {"hidden", model.hidden},
      {"layers", model.layers},
      {"kv_width", model.kv_width},
      {"kv_position_bytes", model.kv_position_bytes}};
  for (const auto &[field, value] : sizes)
    if (value == 0)
      return refuse(field, "> 0", "0");
  if (kvDtypeBytes(model.kv_dtype) == 0)
    return refuse("kv_dtype", "1 (f32) or 2 (f16)", str(model.kv_dtype));
  // Per position, every layer's keys and values: 2 x kv_width elements each
  // at the most.
  uint64_t widestPosition = 0;
  if (__builtin_mul_overflow(model.layers, 2 * model.kv_width, &widestPosition) ||
      __builtin_mul_overflow(widestPosition, uint64_t(kvDtypeBytes(model.kv_dtype)),
                             &widestPosition) ||
      model.kv_position_bytes > widestPosition)
    return refuse("kv_position_bytes",
                  "at most layers x 2 x kv_width x " +
                      str(kvDtypeBytes(model.kv_dtype)) + " bytes",
                  str(model.kv_position_bytes));
  if (model.state_bytes > kMaxStateBytes)
    return refuse("state_bytes", "at most " + str(kMaxStateBytes),
                  str(model.state_bytes));
  if (!isKnownTarget(model.target))
    return refuse("target", "1..3 (host, aarch64-neon, aarch64-sme2)",
                  str(model.target));
  if (uint64_t unknown = model.features & ~knownFeatureBits())
    return refuse("features", "CQ4P_FEATURE_* bits only",
                  featureList(unknown));
  if (model.prefill_chunk < 1 || model.prefill_chunk > kMaxPrefillChunk)
    return refuse("prefill_chunk", "1.." + str(kMaxPrefillChunk),
                  str(model.prefill_chunk));
  if (model.binding_count > kMaxModelBindingCount)
    return refuse("binding_count", "at most " + str(kMaxModelBindingCount),
                  str(model.binding_count));
  if (model.binding_count > 0 && model.bindings == nullptr)
    return refuse("bindings", str(model.binding_count) + " bindings",
                  "a null pointer");

  for (uint32_t i = 0; i < model.binding_count; ++i) {
    const cq4p_model_binding &binding = model.bindings[i];
    std::string label = "binding " + str(i);
    if (binding.tensor == nullptr)
      return refuse(label + ": tensor", "a tensor name", "null");
    if (binding.tensor[0] == '\0')
      return refuse(label + ": tensor", "a tensor name", "an empty string");
    label += " ('" + std::string(binding.tensor) + "')";
    auto refuseField = [&](const char *field, const std::string &expected,
                           const std::string &found) {
      return refuse(label + ": " + field, expected, found);
    };
    if (binding.reserved != 0)
      return refuseField("reserved", "0", str(binding.reserved));
    if (binding.orthogonal > 1)
      return refuseField("orthogonal", "0 or 1", str(binding.orthogonal));
    if (binding.n == 0)
      return refuseField("n", "> 0", "0");
    switch (binding.kind) {
    case CQ4P_BINDING_CQ4:
      if (binding.k == 0)
        return refuseField("k", "> 0", "0");
      if (binding.group_size == 0)
        return refuseField("group_size", "> 0", "0");
      if (binding.k % binding.group_size != 0)
        return refuseField("group_size",
                           "a divisor of K (" + str(binding.k) + ")",
                           str(binding.group_size));
      break;
    case CQ4P_BINDING_FP16:
    case CQ4P_BINDING_FP32:
      // A dense binding is its element count alone; anything else set
      // would be a field the runtime ignores, so it is refused instead.
      if (binding.k != 0)
        return refuseField("k", "0 (a dense binding)", str(binding.k));
      if (binding.group_size != 0)
        return refuseField("group_size", "0 (a dense binding)",
                           str(binding.group_size));
      if (binding.orthogonal != 0)
        return refuseField("orthogonal", "0 (a dense binding)",
                           str(binding.orthogonal));
      break;
    default:
      return refuseField("kind", "1 (CQ4), 2 (FP16) or 3 (FP32)",
                         str(binding.kind));
    }
  }
  return Status::ok();
}

Status checkModelRunnable(const std::string &path,
                          const cq4p_model_desc &model,
                          const CpuFeatures &cpu) {
  std::string why = whyNotRunnable(model.target, model.features, cpu);
  if (!why.empty())
    return libraryError(CQ4P_ERROR_UNSUPPORTED, path, "model steps: " + why);
  return Status::ok();
}

Status chooseVariant(const std::string &path,
                     const cq4p_kernel_variant *variants, size_t count,
                     const CpuFeatures &cpu, const std::string &level,
                     const std::string &origin, size_t &index) {
  std::string names, lacking;
  for (size_t i = 0; i < count; ++i) {
    names += std::string(i ? ", " : "") + variants[i].name;
    if (uint64_t missing = variants[i].features & ~cpu.features)
      lacking += std::string(lacking.empty() ? "" : "; ") + variants[i].name +
                 " needs " + featureList(missing);
  }
  if (!level.empty()) {
    for (size_t i = 0; i < count; ++i) {
      if (level != variants[i].name)
        continue;
      if (uint64_t missing = variants[i].features & ~cpu.features)
        return libraryError(CQ4P_ERROR_UNSUPPORTED, path,
                            origin + " asks for the " + excerpt(level) +
                                " variant, which needs " +
                                featureList(missing) +
                                ": this CPU lacks it (it has: " +
                                featureList(cpu.features) + ")");
      index = i;
      return Status::ok();
    }
    return libraryError(CQ4P_ERROR_ARGUMENT, path,
                        origin + " asks for the " + excerpt(level) +
                            " variant; the library has " + str(count) + ": " +
                            names);
  }
  for (size_t i = count; i-- > 0;)
    if ((variants[i].features & ~cpu.features) == 0) {
      index = i;
      return Status::ok();
    }
  // One variant (a library pinned to a level): worded as a kernel's check.
  std::string what = count == 1 ? std::string("its ") + variants[0].name +
                                      " code needs " +
                                      featureList(variants[0].features &
                                                  ~cpu.features)
                                : "none of its " + str(count) +
                                      " code variants runs here: " + lacking;
  return libraryError(CQ4P_ERROR_UNSUPPORTED, path,
                      what + ", which this CPU lacks (it has: " +
                          featureList(cpu.features) + ")");
}

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

std::vector<const cq4p_kernel_desc *>
KernelLibrary::find(cq4p_kernel_op op, uint64_t n, uint64_t k,
                    uint32_t groupSize, bool orthogonal) const {
  bool quantize = op == CQ4P_KERNEL_QUANTIZE_HADAMARD ||
                  op == CQ4P_KERNEL_QUANTIZE_ORTHOGONAL;
  // Panel bytes mean the same whatever rotated the weights: one matmul
  // kernel serves a Hadamard projection and an orthogonal lm_head alike.
  bool rotationMatters = op != CQ4P_KERNEL_MATMUL;
  std::vector<const cq4p_kernel_desc *> found;
  for (size_t i = 0; i < kernelCount(); ++i) {
    const cq4p_kernel_desc &kernel = this->kernel(i);
    if (kernel.op == uint32_t(op) && kernel.k == k &&
        kernel.group_size == groupSize &&
        (!rotationMatters || (kernel.orthogonal != 0) == orthogonal) &&
        (quantize || kernel.n == n))
      found.push_back(&kernel);
  }
  return found;
}

std::string KernelLibrary::listKernels(cq4p_kernel_op op, size_t limit) const {
  std::string list;
  size_t listed = 0, rest = 0;
  for (size_t i = 0; i < kernelCount(); ++i) {
    if (kernel(i).op != uint32_t(op))
      continue;
    if (listed == limit) {
      ++rest;
      continue;
    }
    list += "\n  " + describeKernel(kernel(i));
    ++listed;
  }
  if (listed == 0)
    return " no " + kernelOpName(op) + " kernel";
  if (rest > 0)
    list += "\n  ... and " + str(rest) + " more";
  return list;
}

namespace {
/// Whether a loaded library holds SME2 code: its model steps target
/// aarch64-sme2, or (a kernel-only library) one of its kernels does.
bool isSme2Library(const KernelLibrary &library) {
  if (library.model() != nullptr)
    return library.model()->target == CQ4P_TARGET_AARCH64_SME2;
  for (size_t i = 0; i < library.kernelCount(); ++i)
    if (library.kernel(i).target == CQ4P_TARGET_AARCH64_SME2)
      return true;
  return false;
}
} // namespace

const char *backendName(Backend backend) {
  switch (backend) {
  case Backend::Auto: return "auto";
  case Backend::Neon: return "neon";
  case Backend::Sme2: return "sme2";
  }
  return "?";
}

Status KernelLibrary::openForBackend(Backend backend, const std::string &neonPath,
                                     const std::string &sme2Path,
                                     const CpuFeatures &cpu,
                                     std::unique_ptr<KernelLibrary> &out,
                                     Backend &chosen, std::string *declined) {
  out.reset();
  if (declined)
    declined->clear();
  if (backend != Backend::Neon) {
    if (sme2Path.empty()) {
      if (backend == Backend::Sme2)
        return Status(CQ4P_ERROR_ARGUMENT,
                      "backend sme2: expected an SME2 kernel library, found none");
    } else {
      Status status = open(sme2Path, cpu, out);
      if (status && !isSme2Library(*out)) {
        // A library for this machine, but not SME2 code (a host library on
        // x86-64, a NEON one on AArch64): refused, not run as the backend.
        uint32_t target = out->model() != nullptr ? out->model()->target
                          : out->kernelCount() > 0 ? out->kernel(0).target
                                                   : 0;
        out.reset();
        status = libraryError(
            CQ4P_ERROR_ARGUMENT, sme2Path,
            "not an SME2 library: its code targets " +
                kernelTargetName(target) +
                "; the sme2 backend needs a library compiled with "
                "cq4p-compile --target=aarch64-sme2");
      }
      if (status) {
        chosen = Backend::Sme2;
        return status;
      }
      if (backend == Backend::Sme2)
        return status;
      if (declined)
        *declined = status.message();
    }
  }
  if (neonPath.empty())
    return Status(CQ4P_ERROR_ARGUMENT,
                  std::string("backend ") + backendName(backend) +
                      ": expected a NEON kernel library, found none");
  chosen = Backend::Neon;
  return open(neonPath, cpu, out);
}

} // namespace cq4p::runtime

//===- KernelLibraryElf.cpp - the library file, before dlopen -------------===//

#include "cq4p/runtime/KernelLibrary.h"

#include "KernelLibraryChecks.h"

#include <cstring>
#include <elf.h>

namespace cq4p::runtime {

using namespace kernel_checks;

namespace {

constexpr size_t kElf64HeaderBytes = 64;
constexpr size_t kElfMachineEnd = 20; // e_ident[16], e_type, e_machine
constexpr uint8_t kElfClass64 = 2;
constexpr uint8_t kElfDataLittle = 1;
constexpr uint8_t kElfDataBig = 2;
constexpr uint16_t kElfTypeDyn = 3;
constexpr uint16_t kElfMachineX86_64 = 62;
constexpr uint16_t kElfMachineAArch64 = 183;

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

} // namespace cq4p::runtime

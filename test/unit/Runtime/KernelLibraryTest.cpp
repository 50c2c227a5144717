//===- KernelLibraryTest.cpp - loading, and refusing, kernel libraries ----===//

#include "FakeKernelModule.h"
#include "TempDir.h"
#include "TestFiles.h"

#include "cq4p/runtime/KernelLibrary.h"

#include "Refusals.h"

#include <gtest/gtest.h>

#include <cstring>
#include <elf.h>
#include <sys/stat.h>

#include <fstream>
#include <iterator>

using namespace cq4p::runtime;
using namespace cq4p::test;

namespace {


std::vector<uint8_t> readAll(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

/// The first 64 bytes of an ELF64 shared object for `machine`.
std::vector<uint8_t> elfHeader(uint16_t machine, uint8_t elfClass = 2,
                               uint16_t type = 3) {
  std::vector<uint8_t> h(64, 0);
  h[0] = 0x7f;
  h[1] = 'E';
  h[2] = 'L';
  h[3] = 'F';
  h[4] = elfClass;
  h[5] = 1; // little-endian
  h[6] = 1; // EV_CURRENT
  h[16] = uint8_t(type);
  h[18] = uint8_t(machine);
  h[19] = uint8_t(machine >> 8);
  return h;
}

/// Every feature the ABI knows, on this process's architecture.
CpuFeatures everything() {
  CpuFeatures cpu;
  cpu.arch = hostArch();
  cpu.features = knownFeatureBits();
  cpu.smeVectorBits = kSme2VectorBits;
  return cpu;
}

TEST(KernelLibrary, OpensTheFakeLibrary) {
  std::unique_ptr<KernelLibrary> library;
  Status status = KernelLibrary::open(CQ4P_FAKE_KERNELS_PATH, library);
  ASSERT_TRUE(status) << status.message();
  EXPECT_GT(library->kernelCount(), 10u);
  EXPECT_EQ(library->table().abi_version, CQ4P_KERNEL_ABI_VERSION);
  auto matmul = library->find(CQ4P_KERNEL_MATMUL, 100, 256, 32, false);
  ASSERT_EQ(matmul.size(), 2u);
  EXPECT_EQ(matmul[0]->max_rows, 1u);
  EXPECT_EQ(matmul[1]->min_rows, 2u);
  // Quantize kernels match whatever N.
  EXPECT_EQ(library->find(CQ4P_KERNEL_QUANTIZE_HADAMARD, 7, 256, 128, false).size(), 1u);
  EXPECT_TRUE(library->find(CQ4P_KERNEL_MATMUL, 101, 256, 32, false).empty());
  EXPECT_TRUE(library->find(CQ4P_KERNEL_MATMUL, 100, 256, 64, false).empty());
  // Matmul kernels read panels, which mean the same whatever the rotation:
  // one serves a Hadamard tensor and an orthogonal one of the same shape.
  // Quantize and embedding kernels depend on the rotation.
  EXPECT_EQ(library->find(CQ4P_KERNEL_MATMUL, 72, 256, 128, true).size(), 2u);
  EXPECT_TRUE(library->find(CQ4P_KERNEL_QUANTIZE_HADAMARD, 7, 256, 128, true).empty());
  EXPECT_TRUE(library->find(CQ4P_KERNEL_QUANTIZE_ORTHOGONAL, 7, 256, 128, false).empty());
  EXPECT_TRUE(contains(library->listKernels(CQ4P_KERNEL_EMBEDDING),
                       "embedding_n100_k256 (EMBEDDING N=100 K=256 gs=128 "
                       "orthogonal rows 1.."));
  EXPECT_TRUE(contains(library->listKernels(CQ4P_KERNEL_MATMUL, 2), "more"));
}

TEST(KernelLibrary, RefusesAnOlderAbiVersion) {
  FakeKernelModule module(CQ4P_FAKE_KERNELS_ABI2_PATH);
  ASSERT_TRUE(module.loaded());
  std::unique_ptr<KernelLibrary> library;
  EXPECT_REFUSED(KernelLibrary::open(CQ4P_FAKE_KERNELS_ABI2_PATH, library),
                 CQ4P_ERROR_UNSUPPORTED, CQ4P_FAKE_KERNELS_ABI2_PATH,
                 "kernel ABI version: expected 4 (this runtime's), found 2: "
                 "an older cq4p-compile built it; recompile it with "
                 "cq4p-compile");
  EXPECT_EQ(library, nullptr);
  EXPECT_EQ(module.totalCalls(), 0);
}

TEST(KernelLibrary, RefusesAForeignMachineBeforeLoading) {
  TempDir dir;
  std::string path = dir.file("foreign.so");
#if defined(__x86_64__)
  std::vector<uint8_t> bytes = elfHeader(183);
  const char *expected = "foreign.so: an AArch64 (EM_AARCH64) library; this "
                         "process is x86-64";
#else
  std::vector<uint8_t> bytes = elfHeader(62);
  const char *expected = "foreign.so: an x86-64 (EM_X86_64) library; this "
                         "process is AArch64";
#endif
  // A body that dlopen could never map: only the header check can refuse
  // it with this message.
  bytes.resize(4096, 0xAB);
  ASSERT_TRUE(writeBytes(path, bytes));
  std::unique_ptr<KernelLibrary> library;
  Status status = KernelLibrary::open(path, library);
  EXPECT_EQ(status.code(), CQ4P_ERROR_UNSUPPORTED);
  EXPECT_EQ(status.message(), dir.path() + "/" + expected);

  ASSERT_TRUE(writeBytes(path, elfHeader(40, 1)));
  EXPECT_REFUSED(KernelLibrary::open(path, library), CQ4P_ERROR_UNSUPPORTED,
                 "a 32-bit Arm (EM_ARM) library; this process is");
  ASSERT_TRUE(writeBytes(path, elfHeader(4242)));
  EXPECT_REFUSED(KernelLibrary::open(path, library), CQ4P_ERROR_UNSUPPORTED,
                 "an ELF machine 4242 library");
}

TEST(KernelLibrary, RefusesHeadersThatAreNotThisProcesssLibraries) {
#if defined(__x86_64__)
  uint16_t host = 62;
#else
  uint16_t host = 183;
#endif
  std::string path = "lib.so";
  std::vector<uint8_t> h = elfHeader(host, 1);
  EXPECT_REFUSED(checkElfHeader(path, h.data(), h.size()),
                 CQ4P_ERROR_UNSUPPORTED, "ELF class: expected 2");
  h = elfHeader(host);
  h[5] = 2;
  std::swap(h[18], h[19]); // the same machine, big-endian
  EXPECT_REFUSED(checkElfHeader(path, h.data(), h.size()),
                 CQ4P_ERROR_UNSUPPORTED, "big-endian");
  h = elfHeader(host);
  h[5] = 7;
  EXPECT_REFUSED(checkElfHeader(path, h.data(), h.size()), CQ4P_ERROR_FORMAT,
                 "ELF data encoding", "found 7");
  h = elfHeader(host, 2, 2);
  EXPECT_REFUSED(checkElfHeader(path, h.data(), h.size()),
                 CQ4P_ERROR_UNSUPPORTED, "expected 3 (ET_DYN", "found 2");
  h = elfHeader(host);
  EXPECT_REFUSED(checkElfHeader(path, h.data(), 40), CQ4P_ERROR_FORMAT,
                 "truncated ELF header: expected 64 bytes, found 40");
  EXPECT_REFUSED(checkElfHeader(path, h.data(), 10), CQ4P_ERROR_FORMAT,
                 "found 10");
  EXPECT_TRUE(checkElfHeader(path, h.data(), h.size()));
}

TEST(KernelLibrary, RefusesFilesThatAreNotLibraries) {
  TempDir dir;
  std::unique_ptr<KernelLibrary> library;
  std::string text = dir.file("notes.so");
  std::vector<uint8_t> words = {'h', 'e', 'l', 'l', 'o', '\n'};
  ASSERT_TRUE(writeBytes(text, words));
  EXPECT_REFUSED(KernelLibrary::open(text, library), CQ4P_ERROR_FORMAT,
                 "notes.so: not an ELF file", "found 68 65 6c 6c");
  std::string empty = dir.file("empty.so");
  ASSERT_TRUE(writeBytes(empty, {}));
  EXPECT_REFUSED(KernelLibrary::open(empty, library), CQ4P_ERROR_FORMAT,
                 "not an ELF file", "found 0 bytes");
  EXPECT_REFUSED(KernelLibrary::open(dir.file("missing.so"), library),
                 CQ4P_ERROR_IO, "missing.so: cannot open");

  std::vector<uint8_t> real = readAll(CQ4P_FAKE_KERNELS_PATH);
  ASSERT_GT(real.size(), 4096u);
  std::string header = dir.file("header-only.so");
  ASSERT_TRUE(writeBytes(header, std::vector<uint8_t>(real.begin(), real.begin() + 30)));
  EXPECT_REFUSED(KernelLibrary::open(header, library), CQ4P_ERROR_FORMAT,
                 "truncated ELF header: expected 64 bytes, found 30");
  // A whole header, then nothing (not even the program headers): refused
  // before dlopen, which would read past the end.
  std::string cut = dir.file("cut.so");
  ASSERT_TRUE(writeBytes(cut, std::vector<uint8_t>(real.begin(), real.begin() + 100)));
  EXPECT_REFUSED(KernelLibrary::open(cut, library), CQ4P_ERROR_FORMAT,
                 "cut.so: program headers: expected ", "(truncated?)");
  EXPECT_EQ(library, nullptr);
}

TEST(KernelLibrary, RefusesEveryTruncationBeforeLoading) {
  // Cut anywhere, a library must be refused by a message, never by a fault
  // inside dlopen (SIGBUS on a mapped segment past the end of the file).
  TempDir dir;
  std::vector<uint8_t> real = readAll(CQ4P_FAKE_KERNELS_PATH);
  std::string cut = dir.file("cut.so");
  for (size_t size = 64; size < real.size(); size += 997) {
    ASSERT_TRUE(writeBytes(cut, std::vector<uint8_t>(real.begin(), real.begin() + size)));
    std::unique_ptr<KernelLibrary> library;
    Status status = KernelLibrary::open(cut, library);
    EXPECT_FALSE(status) << "accepted at " << size << " of " << real.size() << " bytes";
    EXPECT_FALSE(library);
    std::vector<uint8_t> whole(real.begin(), real.begin() + size);
    EXPECT_FALSE(checkElfFile(cut, whole.data(), whole.size())) << size;
  }
}

TEST(KernelLibrary, RefusesInitialisersBeforeTheyRun) {
  // dlopen runs a library's initialisers before the runtime can check its
  // table. The fake library has none; its first dynamic entry's tag turned
  // into each initialiser or finaliser tag stands for one that has.
  TempDir dir;
  std::vector<uint8_t> real = readAll(CQ4P_FAKE_KERNELS_PATH);
  Elf64_Ehdr header;
  std::memcpy(&header, real.data(), sizeof(header));
  for (size_t i = 0; i < header.e_phnum; ++i) {
    Elf64_Phdr segment;
    std::memcpy(&segment, real.data() + header.e_phoff + i * sizeof(segment), sizeof(segment));
    if (segment.p_type != PT_DYNAMIC)
      continue;
    for (int64_t tag : {int64_t(DT_INIT), int64_t(DT_INIT_ARRAY), int64_t(DT_PREINIT_ARRAY),
                        int64_t(DT_FINI), int64_t(DT_FINI_ARRAY)}) {
      std::vector<uint8_t> bytes = real;
      std::memcpy(bytes.data() + segment.p_offset, &tag, sizeof(tag));
      std::string path = dir.file("init.so");
      ASSERT_TRUE(writeBytes(path, bytes));
      std::unique_ptr<KernelLibrary> library;
      EXPECT_REFUSED(KernelLibrary::open(path, library), CQ4P_ERROR_FORMAT,
                     "init.so: code that runs when the library is loaded or unloaded (DT_",
                     "it would run before the library's kernel table could be checked");
    }
  }
}

TEST(KernelLibrary, RefusesFifosAndDevicesUnread) {
  TempDir dir;
  std::string fifo = dir.file("fifo.so");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  std::unique_ptr<KernelLibrary> library;
  EXPECT_REFUSED(KernelLibrary::open(fifo, library), CQ4P_ERROR_IO,
                 "fifo.so: a FIFO, expected a regular file");
  EXPECT_REFUSED(KernelLibrary::open("/dev/zero", library), CQ4P_ERROR_IO,
                 "/dev/zero: a character device, expected a regular file");
}

TEST(KernelLibrary, RefusesALibraryWithoutTheTable) {
  std::unique_ptr<KernelLibrary> library;
  EXPECT_REFUSED(KernelLibrary::open(CQ4P_FAKE_KERNELS_NO_TABLE_PATH, library),
                 CQ4P_ERROR_NOT_FOUND, "no `cq4p_kernel_table` symbol");
}

TEST(KernelLibrary, RefusesADescriptorWithABadShape) {
  FakeKernelModule module(CQ4P_FAKE_KERNELS_BAD_SHAPE_PATH);
  std::unique_ptr<KernelLibrary> library;
  EXPECT_REFUSED(KernelLibrary::open(CQ4P_FAKE_KERNELS_BAD_SHAPE_PATH, library),
                 CQ4P_ERROR_FORMAT, "(matmul_bad_shape): group_size",
                 "expected a divisor of K (250), found 128");
  EXPECT_EQ(module.totalCalls(), 0);
}

TEST(KernelLibrary, RefusesAKernelNeedingAMissingFeature) {
  FakeKernelModule module(CQ4P_FAKE_KERNELS_FEATURES_PATH);
  ASSERT_TRUE(module.loaded());
  std::unique_ptr<KernelLibrary> library;
#if defined(__aarch64__)
  uint64_t dropped = CQ4P_FEATURE_AARCH64_I8MM;
  const char *name = "i8mm";
  uint64_t base = CQ4P_FEATURE_AARCH64_DOTPROD;
  const char *baseName = "dotprod";
#else
  uint64_t dropped = CQ4P_FEATURE_X86_AVX512VNNI;
  const char *name = "avx512vnni";
  uint64_t base = CQ4P_FEATURE_X86_SSSE3;
  const char *baseName = "ssse3";
#endif
  CpuFeatures cpu = everything();
  cpu.features &= ~dropped;
  std::string lacking = std::string(name) + ", which this CPU lacks";
  EXPECT_REFUSED(
      KernelLibrary::open(CQ4P_FAKE_KERNELS_FEATURES_PATH, cpu, library),
      CQ4P_ERROR_UNSUPPORTED, "(matmul_n64_k256_gs32_rows1_1) needs",
      lacking.c_str());
  EXPECT_EQ(library, nullptr);
  EXPECT_TRUE(KernelLibrary::open(CQ4P_FAKE_KERNELS_FEATURES_PATH, everything(), library));

  // The good library's kernels need the baseline feature only.
  cpu = everything();
  cpu.features &= ~dropped;
  EXPECT_TRUE(KernelLibrary::open(CQ4P_FAKE_KERNELS_PATH, cpu, library));
  cpu.features &= ~base;
  EXPECT_REFUSED(KernelLibrary::open(CQ4P_FAKE_KERNELS_PATH, cpu, library),
                 CQ4P_ERROR_UNSUPPORTED, baseName);

  // Against this machine: refused exactly when it lacks one of them.
  CpuFeatures here = detectCpuFeatures();
  Status status = KernelLibrary::open(CQ4P_FAKE_KERNELS_FEATURES_PATH, library);
  uint64_t needed = 0;
  for (size_t i = 0; library && i < library->kernelCount(); ++i)
    needed |= library->kernel(i).features;
  if (status)
    EXPECT_EQ(needed & ~here.features, 0u);
  else
    EXPECT_TRUE(contains(status.message(), "which this CPU lacks")) << status.message();
  EXPECT_EQ(module.totalCalls(), 0);
}

// The variants of a default x86-64 host library, narrowest first, with the
// bits cq4p-compile records for them.
constexpr uint64_t kV3Bits = CQ4P_FEATURE_X86_64_V2 | CQ4P_FEATURE_X86_SSSE3 |
                             CQ4P_FEATURE_X86_64_V3 | CQ4P_FEATURE_X86_AVX2;
constexpr uint64_t kV4Bits = kV3Bits | CQ4P_FEATURE_X86_64_V4 |
                             CQ4P_FEATURE_X86_AVX512BW |
                             CQ4P_FEATURE_X86_AVX512VNNI;
const cq4p_kernel_variant kVariants[] = {
    {"x86-64-v3", kV3Bits, nullptr, nullptr},
    {"x86-64-v3+avxvnni", kV3Bits | CQ4P_FEATURE_X86_AVXVNNI, nullptr, nullptr},
    {"x86-64-v4+avx512vnni", kV4Bits, nullptr, nullptr},
};

CpuFeatures x86(uint64_t features) {
  CpuFeatures cpu;
  cpu.arch = CpuArch::X86_64;
  cpu.features = features;
  return cpu;
}

TEST(KernelLibrary, ChoosesTheWidestVariantTheCpuRuns) {
  struct Case {
    uint64_t cpu;
    size_t expected;
  } cases[] = {
      {kV3Bits, 0},                                   // Haswell .. Skylake
      {kV3Bits | CQ4P_FEATURE_X86_AVXVNNI, 1},        // Alder Lake
      {kV4Bits, 2},                                   // Ice Lake server
      {kV4Bits | CQ4P_FEATURE_X86_AVXVNNI, 2},        // Sapphire Rapids
      {kV4Bits | CQ4P_FEATURE_X86_AVX512VBMI, 2},     // Zen 4
      // AVX-512 without VNNI (Skylake-X): v4's variant needs VNNI, skipped.
      {kV4Bits & ~CQ4P_FEATURE_X86_AVX512VNNI, 0},
  };
  for (const Case &c : cases) {
    size_t index = 99;
    Status status = chooseVariant("lib.so", kVariants, 3, x86(c.cpu), "",
                                  kHostLevelVariable, index);
    ASSERT_TRUE(status) << status.message();
    EXPECT_EQ(index, c.expected) << featureList(c.cpu);
  }
  // A feature bit this runtime does not know is one no CPU reports: the
  // variant needing it is skipped, not chosen.
  const cq4p_kernel_variant future[] = {
      kVariants[0], {"x86-64-v5", kV4Bits | (uint64_t(1) << 40), nullptr, nullptr}};
  size_t index = 99;
  ASSERT_TRUE(chooseVariant("lib.so", future, 2, x86(~uint64_t(0) >> 24), "",
                            kHostLevelVariable, index));
  EXPECT_EQ(index, 0u);

  EXPECT_REFUSED(chooseVariant("lib.so", kVariants, 3,
                               x86(CQ4P_FEATURE_X86_64_V2 | CQ4P_FEATURE_X86_SSSE3),
                               "", kHostLevelVariable, index),
                 CQ4P_ERROR_UNSUPPORTED,
                 "lib.so: none of its 3 code variants runs here: x86-64-v3 "
                 "needs avx2, x86-64-v3; x86-64-v3+avxvnni needs avx2, "
                 "x86-64-v3, avxvnni; x86-64-v4+avx512vnni needs avx2, ",
                 ", which this CPU lacks (it has: ssse3, x86-64-v2)");
  EXPECT_REFUSED(chooseVariant("lib.so", &kVariants[2], 1, x86(kV3Bits), "",
                               kHostLevelVariable, index),
                 CQ4P_ERROR_UNSUPPORTED,
                 "lib.so: its x86-64-v4+avx512vnni code needs avx512bw, "
                 "avx512vnni, x86-64-v4, which this CPU lacks (it has: ssse3, "
                 "avx2, x86-64-v2, x86-64-v3)");
}

TEST(KernelLibrary, RunsTheVariantAskedForOrRefusesIt) {
  size_t index = 99;
  // A narrower variant than the widest, on a CPU that runs all three.
  ASSERT_TRUE(chooseVariant("lib.so", kVariants, 3, x86(kV4Bits | CQ4P_FEATURE_X86_AVXVNNI),
                            "x86-64-v3", kHostLevelVariable, index));
  EXPECT_EQ(index, 0u);
  ASSERT_TRUE(chooseVariant("lib.so", kVariants, 3, x86(kV4Bits | CQ4P_FEATURE_X86_AVXVNNI),
                            "x86-64-v3+avxvnni", kHostLevelVariable, index));
  EXPECT_EQ(index, 1u);
  // One the CPU cannot run: refused, naming what it lacks.
  EXPECT_REFUSED(chooseVariant("lib.so", kVariants, 3, x86(kV3Bits),
                               "x86-64-v4+avx512vnni", kHostLevelVariable, index),
                 CQ4P_ERROR_UNSUPPORTED,
                 "CQ4P_HOST_LEVEL asks for the x86-64-v4+avx512vnni variant, "
                 "which needs avx512bw, avx512vnni, x86-64-v4: this CPU lacks it");
  // One the library does not hold.
  EXPECT_REFUSED(chooseVariant("lib.so", kVariants, 3, x86(kV4Bits), "x86-64-v2",
                               kHostLevelVariable, index),
                 CQ4P_ERROR_ARGUMENT,
                 "asks for the x86-64-v2 variant; the library has 3: x86-64-v3, "
                 "x86-64-v3+avxvnni, x86-64-v4+avx512vnni");
  // A library that records no variants refuses any level asked for.
  std::unique_ptr<KernelLibrary> library;
  EXPECT_REFUSED(KernelLibrary::open(CQ4P_FAKE_KERNELS_PATH, everything(),
                                     "x86-64-v3", "--test", library),
                 CQ4P_ERROR_ARGUMENT,
                 "--test asks for the x86-64-v3 variant; the library records "
                 "no variants");
  ASSERT_TRUE(KernelLibrary::open(CQ4P_FAKE_KERNELS_PATH, everything(), "",
                                  "--test", library));
  EXPECT_EQ(library->variant(), "");
  EXPECT_EQ(library->variantCount(), 0u);
}

TEST(KernelLibrary, LoadsTheVariantItChoosesFromTheLibrarysTable) {
#if defined(__aarch64__)
  uint64_t wide = CQ4P_FEATURE_AARCH64_I8MM;
  const char *wideName = "i8mm";
#else
  uint64_t wide = CQ4P_FEATURE_X86_AVX512VBMI;
  const char *wideName = "avx512vbmi";
#endif
  std::unique_ptr<KernelLibrary> library;
  ASSERT_TRUE(KernelLibrary::open(CQ4P_FAKE_KERNELS_VARIANTS_PATH, everything(),
                                  "", "--test", library));
  EXPECT_EQ(library->variant(), "wide");
  EXPECT_EQ(library->variantCount(), 2u);
  EXPECT_EQ(library->find(CQ4P_KERNEL_MATMUL, 100, 256, 32, false).size(), 2u);
  // Without the wide variant's feature, the base one (the exported table).
  CpuFeatures cpu = everything();
  cpu.features &= ~wide;
  ASSERT_TRUE(KernelLibrary::open(CQ4P_FAKE_KERNELS_VARIANTS_PATH, cpu, "",
                                  "--test", library));
  EXPECT_EQ(library->variant(), "base");
  std::string lacking = std::string("--test asks for the wide variant, which "
                                    "needs ") +
                        wideName + ": this CPU lacks it";
  EXPECT_REFUSED(KernelLibrary::open(CQ4P_FAKE_KERNELS_VARIANTS_PATH, cpu,
                                     "wide", "--test", library),
                 CQ4P_ERROR_UNSUPPORTED, lacking.c_str());
  EXPECT_EQ(library, nullptr);
  // A variant table of another version is refused before any is chosen.
  EXPECT_REFUSED(KernelLibrary::open(CQ4P_FAKE_KERNELS_VARIANTS_V2_PATH,
                                     everything(), "", "--test", library),
                 CQ4P_ERROR_UNSUPPORTED,
                 "cq4p_kernel_variants: version: expected 1 (this runtime's), "
                 "found 2: a newer cq4p-compile built it");
}

TEST(KernelLibrary, TheSme2BackendRefusesALibraryOfOtherCode) {
  // The fake library is this machine's code (host, or NEON on AArch64):
  // as --sme2-library it is refused by name, not run as SME2.
  std::unique_ptr<KernelLibrary> library;
  Backend chosen = Backend::Auto;
  EXPECT_REFUSED(KernelLibrary::openForBackend(
                     Backend::Sme2, CQ4P_FAKE_KERNELS_PATH,
                     CQ4P_FAKE_KERNELS_PATH, everything(), library, chosen),
                 CQ4P_ERROR_ARGUMENT,
                 CQ4P_FAKE_KERNELS_PATH ": not an SME2 library: its code "
                 "targets ",
                 "--target=aarch64-sme2");
  EXPECT_EQ(library, nullptr);
  // Auto declines it, saying why, and takes the other library.
  std::string declined;
  ASSERT_TRUE(KernelLibrary::openForBackend(Backend::Auto, CQ4P_FAKE_KERNELS_PATH,
                                            CQ4P_FAKE_KERNELS_PATH, everything(),
                                            library, chosen, &declined));
  EXPECT_EQ(chosen, Backend::Neon);
  EXPECT_TRUE(contains(declined, "not an SME2 library")) << declined;
}

TEST(KernelLibrary, Sme2LibraryNeedsSme2AndA512BitVectorLength) {
  std::unique_ptr<KernelLibrary> library;
  Status status = KernelLibrary::open(CQ4P_FAKE_KERNELS_SME2_PATH, library);
#if defined(__aarch64__)
  CpuFeatures here = detectCpuFeatures();
  bool runnable = (here.features & CQ4P_FEATURE_AARCH64_SME2) &&
                  here.smeVectorBits == kSme2VectorBits;
  EXPECT_EQ(bool(status), runnable) << status.message();
#else
  EXPECT_REFUSED(status, CQ4P_ERROR_UNSUPPORTED,
                 "targets aarch64-sme2; this process is x86-64");
#endif

  // The CPU check on its own, for an AArch64 CPU of each kind.
  cq4p_kernel_desc kernel = {"sme2_matmul", CQ4P_KERNEL_MATMUL,
                             CQ4P_TARGET_AARCH64_SME2, CQ4P_FEATURE_AARCH64_SME2,
                             64, 256, 128, 0, 1, 0, &kernel};
  cq4p_kernel_table table = {CQ4P_KERNEL_ABI_VERSION, 1, &kernel};
  CpuFeatures phone;
  phone.arch = CpuArch::AArch64;
  phone.features = CQ4P_FEATURE_AARCH64_DOTPROD | CQ4P_FEATURE_AARCH64_I8MM;
  EXPECT_REFUSED(checkKernelsRunnable("lib.so", table, phone),
                 CQ4P_ERROR_UNSUPPORTED,
                 "lib.so: kernel 0 (sme2_matmul) targets aarch64-sme2, which "
                 "needs SME2; this CPU has no SME2 (it has: dotprod, i8mm)");
  phone.features |= CQ4P_FEATURE_AARCH64_SME2;
  phone.smeVectorBits = 256;
  EXPECT_REFUSED(checkKernelsRunnable("lib.so", table, phone),
                 CQ4P_ERROR_UNSUPPORTED,
                 "512-bit streaming vector length; this CPU's is 256 bits");
  phone.smeVectorBits = 512;
  EXPECT_TRUE(checkKernelsRunnable("lib.so", table, phone));
  CpuFeatures laptop = everything();
  laptop.arch = CpuArch::X86_64;
  EXPECT_REFUSED(checkKernelsRunnable("lib.so", table, laptop),
                 CQ4P_ERROR_UNSUPPORTED, "this process is x86-64");
  kernel.target = CQ4P_TARGET_AARCH64_NEON;
  kernel.features = CQ4P_FEATURE_AARCH64_DOTPROD;
  EXPECT_REFUSED(checkKernelsRunnable("lib.so", table, laptop),
                 CQ4P_ERROR_UNSUPPORTED, "targets aarch64-neon");
  kernel.target = CQ4P_TARGET_HOST;
  kernel.features = 0;
  EXPECT_TRUE(checkKernelsRunnable("lib.so", table, laptop));
}

TEST(KernelLibrary, ValidatesEveryDescriptorField) {
  static const int entryTarget = 0;
  const cq4p_kernel_desc good = {"k", CQ4P_KERNEL_MATMUL, CQ4P_TARGET_HOST, 0,
                                 64, 256, 128, 0, 1, 1, &entryTarget};
  struct Case {
    const char *what;
    void (*breakIt)(cq4p_kernel_desc &);
    const char *message;
  };
  const Case cases[] = {
      {"null name", [](cq4p_kernel_desc &d) { d.name = nullptr; },
       "kernel 0: name: expected a string, found null"},
      {"null entry", [](cq4p_kernel_desc &d) { d.entry = nullptr; },
       "kernel 0 (k): entry: expected a function, found null"},
      {"op", [](cq4p_kernel_desc &d) { d.op = 9; }, "op: expected 1..5"},
      {"target", [](cq4p_kernel_desc &d) { d.target = 0; },
       "target: expected 1..3 (host, aarch64-neon, aarch64-sme2), found 0"},
      {"features", [](cq4p_kernel_desc &d) { d.features = 1ull << 40; },
       "features: expected CQ4P_FEATURE_* bits only, found unknown feature bit 40"},
      {"n", [](cq4p_kernel_desc &d) { d.n = 0; }, "n: expected > 0, found 0"},
      {"k", [](cq4p_kernel_desc &d) { d.k = 0; }, "k: expected > 0, found 0"},
      {"gs", [](cq4p_kernel_desc &d) { d.group_size = 0; },
       "group_size: expected > 0, found 0"},
      {"k % gs", [](cq4p_kernel_desc &d) { d.group_size = 96; },
       "group_size: expected a divisor of K (256), found 96"},
      {"orthogonal", [](cq4p_kernel_desc &d) { d.orthogonal = 2; },
       "orthogonal: expected 0 or 1, found 2"},
      {"hadamard quantize",
       [](cq4p_kernel_desc &d) {
         d.op = CQ4P_KERNEL_QUANTIZE_HADAMARD;
         d.orthogonal = 1;
       },
       "orthogonal: expected 0 (a Hadamard quantize kernel)"},
      {"embedding", [](cq4p_kernel_desc &d) { d.op = CQ4P_KERNEL_EMBEDDING; },
       "orthogonal: expected 1 (EMBEDDING reads an orthogonal tensor)"},
      {"min_rows", [](cq4p_kernel_desc &d) { d.min_rows = 0; },
       "min_rows: expected >= 1, found 0"},
      {"max_rows",
       [](cq4p_kernel_desc &d) {
         d.min_rows = 4;
         d.max_rows = 3;
       },
       "max_rows: expected 0 (no bound) or >= min_rows (4), found 3"},
  };
  cq4p_kernel_desc kernels[2] = {good, good};
  cq4p_kernel_table table = {CQ4P_KERNEL_ABI_VERSION, 2, kernels};
  EXPECT_TRUE(validateKernelTable("lib.so", table));
  for (const Case &c : cases) {
    SCOPED_TRACE(c.what);
    kernels[0] = good;
    c.breakIt(kernels[0]);
    EXPECT_REFUSED(validateKernelTable("lib.so", table), CQ4P_ERROR_FORMAT,
                   "lib.so: ", c.message);
  }
  kernels[0] = good;
  kernels[1].max_rows = 0; // no upper bound is fine
  EXPECT_TRUE(validateKernelTable("lib.so", table));
  kernels[1].k = 100;
  EXPECT_REFUSED(validateKernelTable("lib.so", table), CQ4P_ERROR_FORMAT,
                 "kernel 1 (k): group_size");

  cq4p_kernel_table huge = {CQ4P_KERNEL_ABI_VERSION, kMaxKernelCount + 1, kernels};
  EXPECT_REFUSED(validateKernelTable("lib.so", huge), CQ4P_ERROR_FORMAT,
                 "kernel count: expected at most 65536, found 65537");
  cq4p_kernel_table null = {CQ4P_KERNEL_ABI_VERSION, 3, nullptr};
  EXPECT_REFUSED(validateKernelTable("lib.so", null), CQ4P_ERROR_FORMAT,
                 "kernels: expected 3 descriptors, found a null pointer");
  cq4p_kernel_table old = {2, 2, kernels};
  EXPECT_REFUSED(validateKernelTable("lib.so", old), CQ4P_ERROR_UNSUPPORTED,
                 "kernel ABI version: expected 4 (this runtime's), found 2",
                 "recompile it with cq4p-compile");
  cq4p_kernel_table newer = {99, 2, kernels};
  EXPECT_REFUSED(validateKernelTable("lib.so", newer), CQ4P_ERROR_UNSUPPORTED,
                 "kernel ABI version: expected 4 (this runtime's), found 99",
                 "a newer cq4p-compile built it");
}

TEST(KernelLibrary, AKernelOnlyLibraryHasNoModel) {
  std::unique_ptr<KernelLibrary> library;
  ASSERT_TRUE(KernelLibrary::open(CQ4P_FAKE_KERNELS_PATH, library));
  EXPECT_EQ(library->model(), nullptr);
}

TEST(KernelLibrary, ReadsTheBundleDigestItRecords) {
  std::unique_ptr<KernelLibrary> library;
  ASSERT_TRUE(KernelLibrary::open(CQ4P_FAKE_KERNELS_PATH, library));
  EXPECT_EQ(library->bundleDigest(), "");
  Status status = KernelLibrary::open(CQ4P_FAKE_KERNELS_DIGEST_PATH, library);
  ASSERT_TRUE(status) << status.message();
  EXPECT_EQ(library->bundleDigest(), "toy-digest-1");
  EXPECT_EQ(library->model(), nullptr);
  // A model library's steps record it too (libraries before the symbol).
  ASSERT_TRUE(KernelLibrary::open(CQ4P_FAKE_MODEL_PATH, library));
  EXPECT_EQ(library->bundleDigest(), "toy-digest-1");
  ASSERT_TRUE(KernelLibrary::open(CQ4P_FAKE_MODEL_ANY_DIGEST_PATH, library));
  EXPECT_EQ(library->bundleDigest(), "");

  EXPECT_REFUSED(KernelLibrary::open(CQ4P_FAKE_KERNELS_BAD_DIGEST_PATH, library),
                 CQ4P_ERROR_FORMAT,
                 "cq4p_bundle_digest: expected a string of 1 to 256 bytes inside "
                 "the symbol, found 0 bytes in a symbol of 1");
  EXPECT_REFUSED(KernelLibrary::open(CQ4P_FAKE_MODEL_OTHER_DIGEST_PATH, library),
                 CQ4P_ERROR_FORMAT,
                 "cq4p_bundle_digest: f00d, but the model steps were compiled "
                 "for bundle digest toy-digest-1");
  EXPECT_EQ(library, nullptr);
}

TEST(KernelLibrary, OpensTheModelSteps) {
  std::unique_ptr<KernelLibrary> library;
  Status status = KernelLibrary::open(CQ4P_FAKE_MODEL_PATH, library);
  ASSERT_TRUE(status) << status.message();
  ASSERT_NE(library->model(), nullptr);
  const cq4p_model_desc &model = *library->model();
  EXPECT_EQ(model.abi_version, CQ4P_KERNEL_ABI_VERSION);
  EXPECT_STREQ(model.architecture, "toy");
  EXPECT_STREQ(model.digest, "toy-digest-1");
  EXPECT_EQ(model.binding_count, 3u);
  EXPECT_STREQ(model.bindings[2].tensor, "toy.head");
  EXPECT_EQ(library->kernelCount(), 0u);
}

TEST(KernelLibrary, ModelStepsMustRunOnThisCpu) {
  std::unique_ptr<KernelLibrary> library;
  Status status = KernelLibrary::open(CQ4P_FAKE_MODEL_SME2_PATH, library);
#if defined(__aarch64__)
  CpuFeatures here = detectCpuFeatures();
  bool runnable = (here.features & CQ4P_FEATURE_AARCH64_SME2) &&
                  here.smeVectorBits == kSme2VectorBits;
  EXPECT_EQ(bool(status), runnable) << status.message();
  if (!status)
    EXPECT_TRUE(contains(status.message(), "model steps: targets aarch64-sme2"))
        << status.message();
#else
  EXPECT_REFUSED(status, CQ4P_ERROR_UNSUPPORTED,
                 "model steps: targets aarch64-sme2; this process is x86-64");
#endif
  cq4p_model_desc model = {};
  model.target = CQ4P_TARGET_AARCH64_SME2;
  model.features = CQ4P_FEATURE_AARCH64_SME2;
  CpuFeatures phone;
  phone.arch = CpuArch::AArch64;
  phone.features = CQ4P_FEATURE_AARCH64_DOTPROD;
  EXPECT_REFUSED(checkModelRunnable("lib.so", model, phone),
                 CQ4P_ERROR_UNSUPPORTED,
                 "lib.so: model steps: targets aarch64-sme2, which needs SME2; "
                 "this CPU has no SME2 (it has: dotprod)");
  phone.features |= CQ4P_FEATURE_AARCH64_SME2;
  phone.smeVectorBits = 512;
  EXPECT_TRUE(checkModelRunnable("lib.so", model, phone));
  model.target = CQ4P_TARGET_AARCH64_NEON;
  model.features = CQ4P_FEATURE_AARCH64_I8MM;
  phone.features = CQ4P_FEATURE_AARCH64_DOTPROD;
  EXPECT_REFUSED(checkModelRunnable("lib.so", model, phone),
                 CQ4P_ERROR_UNSUPPORTED, "model steps: needs i8mm");
}

void noStep(const cq4p_step_args *) {}

TEST(KernelLibrary, ValidatesEveryModelField) {
  static const cq4p_model_binding goodBindings[] = {
      {"embed", CQ4P_BINDING_CQ4, 1, 1024, 512, 128, 0},
      {"norm", CQ4P_BINDING_FP16, 0, 512, 0, 0, 0},
  };
  cq4p_model_binding bindings[2] = {goodBindings[0], goodBindings[1]};
  const cq4p_model_desc good = {
      CQ4P_KERNEL_ABI_VERSION, 2, bindings, "llama", "abc", 1024, 512, 2, 256,
      CQ4P_KV_F32, CQ4P_TARGET_HOST, 0, 64, 4096, noStep, noStep, 2 * 2 * 256 * 4, 0};
  struct Case {
    const char *what;
    void (*breakIt)(cq4p_model_desc &, cq4p_model_binding *);
    const char *message;
  };
  const Case cases[] = {
      {"old abi", [](cq4p_model_desc &d, cq4p_model_binding *) { d.abi_version = 2; },
       "model steps: ABI version: expected 4 (this runtime's), found 2: an "
       "older cq4p-compile built it; recompile it with cq4p-compile"},
      {"prefill", [](cq4p_model_desc &d, cq4p_model_binding *) { d.prefill = nullptr; },
       "model steps: prefill: expected a function, found null"},
      {"decode", [](cq4p_model_desc &d, cq4p_model_binding *) { d.decode = nullptr; },
       "model steps: decode: expected a function, found null"},
      {"architecture",
       [](cq4p_model_desc &d, cq4p_model_binding *) { d.architecture = nullptr; },
       "model steps: architecture: expected a string, found null"},
      {"digest", [](cq4p_model_desc &d, cq4p_model_binding *) { d.digest = nullptr; },
       "model steps: digest: expected a string (empty: any bundle), found null"},
      {"vocab", [](cq4p_model_desc &d, cq4p_model_binding *) { d.vocab = 0; },
       "model steps: vocab: expected > 0, found 0"},
      {"hidden", [](cq4p_model_desc &d, cq4p_model_binding *) { d.hidden = 0; },
       "model steps: hidden: expected > 0, found 0"},
      {"layers", [](cq4p_model_desc &d, cq4p_model_binding *) { d.layers = 0; },
       "model steps: layers: expected > 0, found 0"},
      {"kv_width", [](cq4p_model_desc &d, cq4p_model_binding *) { d.kv_width = 0; },
       "model steps: kv_width: expected > 0, found 0"},
      {"kv_position_bytes zero",
       [](cq4p_model_desc &d, cq4p_model_binding *) { d.kv_position_bytes = 0; },
       "model steps: kv_position_bytes: expected > 0, found 0"},
      {"kv_position_bytes past the widest layers",
       [](cq4p_model_desc &d, cq4p_model_binding *) { d.kv_position_bytes = 4097; },
       "model steps: kv_position_bytes: expected at most layers x 2 x kv_width x 4 "
       "bytes, found 4097"},
      {"state_bytes",
       [](cq4p_model_desc &d, cq4p_model_binding *) { d.state_bytes = (1ull << 30) + 1; },
       "model steps: state_bytes: expected at most 1073741824, found 1073741825"},
      {"kv_dtype", [](cq4p_model_desc &d, cq4p_model_binding *) { d.kv_dtype = 7; },
       "model steps: kv_dtype: expected 1 (f32) or 2 (f16), found 7"},
      {"target", [](cq4p_model_desc &d, cq4p_model_binding *) { d.target = 4; },
       "model steps: target: expected 1..3 (host, aarch64-neon, aarch64-sme2), "
       "found 4"},
      {"features",
       [](cq4p_model_desc &d, cq4p_model_binding *) { d.features = 1ull << 40; },
       "model steps: features: expected CQ4P_FEATURE_* bits only, found "
       "unknown feature bit 40"},
      {"chunk 0", [](cq4p_model_desc &d, cq4p_model_binding *) { d.prefill_chunk = 0; },
       "model steps: prefill_chunk: expected 1..1048576, found 0"},
      {"chunk huge",
       [](cq4p_model_desc &d, cq4p_model_binding *) { d.prefill_chunk = 1ull << 40; },
       "model steps: prefill_chunk: expected 1..1048576, found 1099511627776"},
      {"binding count",
       [](cq4p_model_desc &d, cq4p_model_binding *) { d.binding_count = 70000; },
       "model steps: binding_count: expected at most 65536, found 70000"},
      {"bindings null",
       [](cq4p_model_desc &d, cq4p_model_binding *) { d.bindings = nullptr; },
       "model steps: bindings: expected 2 bindings, found a null pointer"},
      {"tensor null",
       [](cq4p_model_desc &, cq4p_model_binding *b) { b[1].tensor = nullptr; },
       "model steps: binding 1: tensor: expected a tensor name, found null"},
      {"tensor empty",
       [](cq4p_model_desc &, cq4p_model_binding *b) { b[1].tensor = ""; },
       "model steps: binding 1: tensor: expected a tensor name, found an "
       "empty string"},
      {"kind", [](cq4p_model_desc &, cq4p_model_binding *b) { b[1].kind = 4; },
       "model steps: binding 1 ('norm'): kind: expected 1 (CQ4), 2 (FP16) or "
       "3 (FP32), found 4"},
      {"reserved", [](cq4p_model_desc &, cq4p_model_binding *b) { b[0].reserved = 1; },
       "model steps: binding 0 ('embed'): reserved: expected 0, found 1"},
      {"orthogonal",
       [](cq4p_model_desc &, cq4p_model_binding *b) { b[0].orthogonal = 2; },
       "binding 0 ('embed'): orthogonal: expected 0 or 1, found 2"},
      {"n", [](cq4p_model_desc &, cq4p_model_binding *b) { b[1].n = 0; },
       "binding 1 ('norm'): n: expected > 0, found 0"},
      {"cq4 k", [](cq4p_model_desc &, cq4p_model_binding *b) { b[0].k = 0; },
       "binding 0 ('embed'): k: expected > 0, found 0"},
      {"cq4 gs", [](cq4p_model_desc &, cq4p_model_binding *b) { b[0].group_size = 0; },
       "binding 0 ('embed'): group_size: expected > 0, found 0"},
      {"cq4 k % gs",
       [](cq4p_model_desc &, cq4p_model_binding *b) { b[0].group_size = 96; },
       "binding 0 ('embed'): group_size: expected a divisor of K (512), found 96"},
      {"dense k", [](cq4p_model_desc &, cq4p_model_binding *b) { b[1].k = 3; },
       "binding 1 ('norm'): k: expected 0 (a dense binding), found 3"},
      {"dense gs",
       [](cq4p_model_desc &, cq4p_model_binding *b) { b[1].group_size = 32; },
       "binding 1 ('norm'): group_size: expected 0 (a dense binding), found 32"},
      {"dense orthogonal",
       [](cq4p_model_desc &, cq4p_model_binding *b) { b[1].orthogonal = 1; },
       "binding 1 ('norm'): orthogonal: expected 0 (a dense binding), found 1"},
  };
  EXPECT_TRUE(validateModelDesc("lib.so", good));
  for (const Case &c : cases) {
    SCOPED_TRACE(c.what);
    cq4p_model_desc model = good;
    bindings[0] = goodBindings[0];
    bindings[1] = goodBindings[1];
    c.breakIt(model, bindings);
    Status status = validateModelDesc("lib.so", model);
    EXPECT_FALSE(status);
    EXPECT_TRUE(contains(status.message(), std::string("lib.so: ")))
        << status.message();
    EXPECT_TRUE(contains(status.message(), c.message)) << status.message();
  }
  cq4p_model_desc none = good;
  none.binding_count = 0;
  none.bindings = nullptr;
  none.digest = "";
  none.kv_dtype = CQ4P_KV_F16;
  none.kv_position_bytes = 2 * 2 * 256 * 2;
  EXPECT_TRUE(validateModelDesc("lib.so", none));
}

TEST(CpuFeatures, DetectsThisProcess) {
  CpuFeatures cpu = detectCpuFeatures();
  EXPECT_EQ(cpu.arch, hostArch());
  EXPECT_EQ(cpu.features & ~knownFeatureBits(), 0u);
#if defined(__x86_64__)
  EXPECT_EQ(cpu.arch, CpuArch::X86_64);
  EXPECT_EQ(cpu.features & (CQ4P_FEATURE_AARCH64_DOTPROD | CQ4P_FEATURE_AARCH64_SME2), 0u);
#elif defined(__aarch64__)
  EXPECT_EQ(cpu.arch, CpuArch::AArch64);
  EXPECT_EQ(cpu.features & CQ4P_FEATURE_X86_SSSE3, 0u);
#endif
  if (cpu.features & CQ4P_FEATURE_AARCH64_SME2) {
    EXPECT_GT(cpu.smeVectorBits, 0u);
    EXPECT_EQ(cpu.smeVectorBits % 128, 0u);
  }
  std::printf("  this CPU: %s, features: %s, SME vector length: %u bits\n",
              archName(cpu.arch), featureList(cpu.features).c_str(),
              cpu.smeVectorBits);
  EXPECT_EQ(featureList(0), "none");
  EXPECT_EQ(featureList(CQ4P_FEATURE_AARCH64_DOTPROD | CQ4P_FEATURE_X86_AVX2),
            "dotprod, avx2");
}

} // namespace

//===- cq4p-compile.cpp - AOT-compiles a per-model kernel library ---------===//
//
//   cq4p-compile model.mlir --target=aarch64-neon -o libmodel.so
//
// Lowers every cq4p.linear / cq4p.embedding / cq4p.prefill_attention of the
// input through the target's kernel pipeline (cq4p-neon-pipeline,
// cq4p-sme2-pipeline or cq4p-host-pipeline), generates code in process with
// LLVM, and links a shared library with lld (also in process) that exports
// the C-ABI kernels and `cq4p_kernel_table`
// (runtime/include/cq4p/kernel_abi.h). The library builder
// (include/cq4p/Target/Library) does the work: target choice, the x86-64
// levels of a default host library, code generation and the link. This tool
// reads and checks its flags and files, and says what went wrong.
//
// The library records the model_digest of the bundle it is for
// (`cq4p_bundle_digest`) when it is known: from a model.mlir's `cq4p.model`
// attribute, or from the manifest.json of the bundle --bundle names; the
// runtime then refuses the library for any other bundle. For AArch64
// triples whose shared libraries need an SDK this machine lacks (Android,
// Apple), it writes a relocatable object instead (--emit=obj).
//
//===----------------------------------------------------------------------===//

#include "cq4p/Dialect/CQ4P/IR/CQ4P.h"
#include "cq4p/Target/Library/LibraryBuilder.h"
#include "cq4p/Target/Library/TargetChoice.h"
#include "cq4p/Target/Library/Temporaries.h"
#include "cq4p/Target/LLVMIR/CQ4PIntrToLLVMIRTranslation.h"
#include "cq4p/Tools/InputNesting.h"
#include "cq4p/Tools/LargeStack.h"
#include "cq4p/kernel_abi.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/ArmNeon/ArmNeonDialect.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/InitAllExtensions.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Target/LLVMIR/Dialect/ArmNeon/ArmNeonToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/ArmSME/ArmSMEToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/Builtin/BuiltinToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/LLVMIR/LLVMToLLVMIRTranslation.h"

#include "llvm/ADT/StringSwitch.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/ErrorHandling.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/SourceMgr.h"

#include "Inputs.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <string>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

using namespace mlir;
namespace cl = llvm::cl;

static cl::OptionCategory category("cq4p-compile options");
static cl::opt<std::string> inputFile(cl::Positional, cl::desc("<input.mlir>"),
                                      cl::Required, cl::cat(category));
static cl::opt<std::string> outputFile(
    "o",
    cl::desc("The file to write (required): the shared library, or with --emit "
             "the object, LLVM IR or MLIR"),
    cl::value_desc("LIB.so"), cl::Required, cl::cat(category));
static cl::opt<std::string> targetName(
    "target",
    cl::desc("What the code runs on (required): host (this machine's "
             "processor), aarch64-neon (Armv8.2-A with the dot product) or "
             "aarch64-sme2 (SME2 streaming leaves, 512-bit vectors)"),
    cl::value_desc("TARGET"), cl::Required, cl::cat(category));
static cl::opt<std::string>
    tripleName("triple",
               cl::desc("Target triple (default: aarch64-linux-gnu for "
                        "aarch64-neon, this machine's for host)"),
               cl::cat(category));
static cl::opt<std::string>
    emitKind("emit", cl::desc("lib (the default: a shared library), obj, llvm "
                              "(LLVM IR) or mlir (the LLVM dialect)"),
             cl::init("lib"), cl::cat(category));
static cl::opt<int64_t> gemmRows(
    "gemm-rows",
    cl::desc("Rows per GEMM tile (1 to 8; default: 8 for aarch64-neon, whose "
             "packed tiles keep 16 accumulators, else 4)"),
    cl::init(0), cl::cat(category));
static cl::opt<int64_t>
    prefillChunk("prefill-chunk",
                 cl::desc("Most tokens one prefill step of a model takes, "
                          "2 to 65536 (default 128; a longer prompt runs as "
                          "chunks)"),
                 cl::init(128), cl::cat(category));
static cl::opt<std::string>
    kvCache("kv-cache",
            cl::desc("Element type of a model's KV cache: f32 (default) or "
                     "f16 (half the memory and attention reads)"),
            cl::init("f32"), cl::cat(category));
static cl::opt<bool> fuseDenseMlp(
    "fuse-dense-mlp",
    cl::desc("A model's gate and up projections and their gating in one "
             "dispatch sharing one quantized activation (off by default: on "
             "some phones it costs decode time)"),
    cl::init(false), cl::cat(category));
static cl::opt<bool> gateInTransform(
    "gate-in-transform",
    cl::desc("A model's gating (act(gate) * up) formed by the down "
             "projection's activation transform as it loads the gate and up "
             "rows (default true); =false runs it as a separate pass (the "
             "same bits: for comparisons)"),
    cl::init(true), cl::cat(category));
static cl::opt<bool> sme2FmlalRotation(
    "sme2-fmlal-rotation",
    cl::desc("aarch64-sme2: the lm_head's rotation from fp16-rounded "
             "activations with FMLAL (default true); =false keeps NEON's bits "
             "(docs/MODEL.md)"),
    cl::init(true), cl::cat(category));
static cl::opt<std::string>
    tuneCpu("tune-cpu",
            cl::desc("CPU whose scheduling model tunes the code (aarch64; "
                     "default neoverse-v2; the instruction set stays "
                     "armv8.2-a+dotprod)"),
            cl::init("neoverse-v2"), cl::cat(category));
static cl::opt<std::string> bundleDirectory(
    "bundle",
    cl::desc("The bundle the library is for: its manifest.json's model_digest "
             "is recorded in the library, and the runtime refuses the library "
             "for any other bundle (default: none; a model.mlir records its "
             "own digest)"),
    cl::value_desc("DIR"), cl::cat(category));
/// --host-cpu's help, its levels listed from kernel_abi.h's CQ4P_X86_LEVELS
/// (the table the option reads), so that a level added there is named here.
static std::string hostCpuHelp() {
  std::vector<std::string> all, defaults;
#define CQ4P_HELP_LEVEL(name, cpu, extra, features, byDefault)                 \
  all.push_back(name);                                                         \
  if (byDefault)                                                               \
    defaults.push_back(name);
  CQ4P_X86_LEVELS(CQ4P_HELP_LEVEL)
#undef CQ4P_HELP_LEVEL
  auto list = [](const std::vector<std::string> &names, const char *last) {
    std::string text;
    for (size_t i = 0; i < names.size(); ++i)
      text += (i == 0 ? "" : i + 1 == names.size() ? last : ", ") + names[i];
    return text;
  };
  return "--target=host on x86-64: pins the one instruction set the library "
         "may use: " +
         list(all, ", ") +
         ", native (the widest of these this machine runs, tuned for its "
         "CPU) or widest (the same level with the levels' own tuning: the code "
         "the default library runs on this machine). By default a library holds the kernels of " +
         list(defaults, " and ") +
         ", and the runtime runs the widest this CPU has (--emit=mlir and "
         "llvm: " +
         (defaults.empty() ? std::string("none") : defaults.front()) +
         " alone)";
}
static const std::string hostCpuDescription = hostCpuHelp();
static cl::opt<std::string> hostCpu("host-cpu", cl::desc(hostCpuDescription),
                                    cl::cat(category));

namespace {

int fail(const llvm::Twine &message) {
  llvm::errs() << "cq4p-compile: error: " << message << "\n";
  return 1;
}

/// Prints a failed step's message; 0 if it succeeded.
int fail(llvm::Error error) {
  int status = 0;
  llvm::handleAllErrors(std::move(error), [&](const llvm::ErrorInfoBase &info) {
    status = fail(info.message());
  });
  return status;
}

/// The stack of the thread that compiles: MLIR's parser at kMaxIrNesting
/// levels needs a few MiB, and the recursion of lowering and code generation
/// the same headroom (docs/TRUST.md).
constexpr unsigned kStackBytes = 64u << 20;

/// What cq4p-compile says when memory runs out, written while memory is
/// still there: the handler may not allocate.
char outOfMemoryMessage[1024];
size_t outOfMemoryLength = 0;

void sayOnOutOfMemory(const std::string &message) {
  outOfMemoryLength = std::min(message.size(), sizeof(outOfMemoryMessage));
  std::memcpy(outOfMemoryMessage, message.data(), outOfMemoryLength);
}

/// LLVM's handler for a failed allocation anywhere in the process (its
/// safe_malloc, and operator new through LLVM's out-of-memory new-handler,
/// installed in main), instead of LLVM's abort: one line and exit status 1,
/// the library builder's temporary files removed.
void onOutOfMemory(void *, const char *, bool) {
  ssize_t written = ::write(STDERR_FILENO, outOfMemoryMessage, outOfMemoryLength);
  (void)written;
  cq4p::removeNotedTemporaries();
  ::_exit(1);
}

int compile();

} // namespace

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  llvm::install_out_of_memory_new_handler();
  llvm::install_bad_alloc_error_handler(onOutOfMemory);
  cl::HideUnrelatedOptions(category);
  cl::ParseCommandLineOptions(
      argc, argv,
      "cq4p-compile: builds the kernel library of a model (a bundle's model.mlir)\n"
      "or of graph-level cq4p IR: the target's pipeline (cq4p-opt's\n"
      "cq4p-<target>-pipeline), LLVM code generation and an lld link, in process.\n"
      "The runtime (cq4p-run, the C and Python APIs) loads the library beside the\n"
      "bundle.\n"
      "\n"
      "  cq4p-compile bundle/model.mlir --target=host -o libmodel.so\n"
      "  cq4p-compile bundle/model.mlir --target=aarch64-neon -o libmodel-neon.so\n"
      "  cq4p-compile bundle/model.mlir --target=aarch64-sme2 -o libmodel-sme2.so\n");
  return cq4p::runOnLargeStack(kStackBytes, compile);
}


namespace {

int compile() {
  std::optional<cq4p::EmitKind> emit =
      llvm::StringSwitch<std::optional<cq4p::EmitKind>>(emitKind)
          .Case("lib", cq4p::EmitKind::Library)
          .Case("obj", cq4p::EmitKind::Object)
          .Case("llvm", cq4p::EmitKind::LlvmIr)
          .Case("mlir", cq4p::EmitKind::Mlir)
          .Default(std::nullopt);
  if (!emit)
    return fail("unknown --emit '" + emitKind +
                "' (expected lib, obj, llvm or mlir)");
  if (gemmRows.getNumOccurrences() && (gemmRows < 1 || gemmRows > 8))
    return fail("--gemm-rows must be in [1, 8], got " +
                llvm::Twine(int64_t(gemmRows)));
  cq4p::TargetRequest request;
  request.target = targetName;
  request.triple = tripleName;
  if (hostCpu.getNumOccurrences())
    request.hostCpu = hostCpu;
  request.oneLevel =
      *emit == cq4p::EmitKind::Mlir || *emit == cq4p::EmitKind::LlvmIr;
  llvm::Expected<std::vector<cq4p::TargetChoice>> chosen =
      cq4p::chooseTargets(request);
  if (!chosen)
    return fail(chosen.takeError());
  const std::vector<cq4p::TargetChoice> &variants = *chosen;
  const cq4p::TargetChoice &first = variants.front();
  if (int status = fail(cq4p::checkTuneCpu(first, targetName, tuneCpu,
                                           tuneCpu.getNumOccurrences() > 0)))
    return status;
  cq4p::LibraryOptions options;
  options.emit = *emit;
  options.output = outputFile;
  options.inputName = inputFile;
  options.aarch64TuneCpu = tuneCpu;
  options.gemmRows = gemmRows.getNumOccurrences()
                         ? int64_t(gemmRows)
                         : first.kernelTarget == cq4p::Target::aarch64_neon
                               ? 8
                               : 4;
  options.prefillChunk = prefillChunk;
  options.fuseDenseMlp = fuseDenseMlp;
  options.gateInTransform = gateInTransform;
  options.sme2FmlalRotation = sme2FmlalRotation;
  if (*emit == cq4p::EmitKind::Library && !first.triple.isOSBinFormatELF())
    return fail("a shared library for '" + first.triple.str() +
                "' needs that platform's SDK: use --emit=obj and link it there");
  if (prefillChunk < 2 || prefillChunk > 65536)
    return fail("--prefill-chunk=" + llvm::Twine(prefillChunk) +
                " is out of range (2 to 65536)");
  std::optional<cq4p::KvDtype> kvDtype = cq4p::symbolizeKvDtype(kvCache);
  if (!kvDtype)
    return fail("--kv-cache=" + kvCache + " is not a KV cache element type "
                "(f32 or f16)");
  options.kvCache = *kvDtype;

  DialectRegistry registry;
  registry.insert<cq4p::CQ4PDialect, arith::ArithDialect,
                  arm_neon::ArmNeonDialect, func::FuncDialect,
                  LLVM::LLVMDialect, math::MathDialect, memref::MemRefDialect,
                  scf::SCFDialect, tensor::TensorDialect,
                  vector::VectorDialect>();
  registerAllExtensions(registry);
  registerBuiltinDialectTranslation(registry);
  registerLLVMDialectTranslation(registry);
  registerArmNeonDialectTranslation(registry);
  registerArmSMEDialectTranslation(registry);
  cq4p_intr::registerCQ4PIntrDialectTranslation(registry);
  MLIRContext context(registry);

  sayOnOutOfMemory("cq4p-compile: error: out of memory reading " + inputFile +
                   "\n");
  llvm::SourceMgr sourceMgr;
  SourceMgrDiagnosticHandler diagnostics(sourceMgr, &context);
  std::string errorMessage;
  struct stat inputIdentity;
  std::unique_ptr<llvm::MemoryBuffer> input =
      cq4p::readInput(inputFile, errorMessage, inputIdentity);
  if (!input)
    return fail(errorMessage);
  if (std::optional<size_t> offset = cq4p::findNestingPast(
          input->getBuffer(), cq4p::kMaxIrNesting, /*json=*/false)) {
    llvm::errs() << cq4p::describeIrNestingPast(inputFile, input->getBuffer(),
                                                *offset)
                 << "\n";
    return 1;
  }
  sourceMgr.AddNewSourceBuffer(std::move(input), llvm::SMLoc());
  OwningOpRef<ModuleOp> module = parseSourceFile<ModuleOp>(sourceMgr, &context);
  if (!module)
    return 1;

  // The digest of the bundle the library is for, if known.
  std::string &digest = options.digest;
  if (auto model = (*module)->getAttrOfType<DictionaryAttr>("cq4p.model"))
    if (auto text = model.getAs<StringAttr>("digest"))
      digest = text.getValue().str();
  std::vector<std::pair<std::string, struct stat>> inputs;
  if (inputFile != "-")
    inputs.push_back({inputFile, inputIdentity});
  if (!bundleDirectory.empty()) {
    struct stat manifestIdentity;
    llvm::Expected<std::string> named =
        cq4p::readBundleDigest(bundleDirectory, manifestIdentity);
    if (!named)
      return fail(named.takeError());
    inputs.push_back({bundleDirectory + "/manifest.json", manifestIdentity});
    if (!digest.empty() && digest != *named)
      return fail(inputFile + " was written for bundle digest " + digest +
                  ", but --bundle " + bundleDirectory + " has " + *named);
    digest = *named;
  }
  if (int status = fail(cq4p::checkOutput(
          outputFile, *emit == cq4p::EmitKind::Library, inputs)))
    return status;
  // What the runtime accepts as a recorded digest (kernel_abi.h).
  if (digest.size() > CQ4P_MAX_BUNDLE_DIGEST_BYTES ||
      StringRef(digest).contains('\0'))
    return fail("the bundle digest to record: expected at most " +
                llvm::Twine(CQ4P_MAX_BUNDLE_DIGEST_BYTES) +
                " bytes without NUL, found " + llvm::Twine(digest.size()) +
                " bytes");

  // Kernels are made per distinct shape: memory grows with their number
  // (bench/compile/results.md), and is the first thing to run out.
  size_t shapes = cq4p::countKernelShapes(*module);
  if (shapes == 0)
    return fail(inputFile + " has no cq4p.linear, cq4p.embedding or "
                            "cq4p.prefill_attention to compile");
  std::string outOfMemory =
      "out of memory compiling " + inputFile + " for --target=" + targetName +
      ": " + std::to_string(shapes) + " distinct kernel shapes, at about " +
      cq4p::kMemoryPerShape +
      " each: split the functions over several files and compile a library "
      "of each (a layer binds to any library with its shape's kernels), or "
      "give the compiler more memory";
  // A data or address-space limit below what the shapes need is refused
  // before any work: past it, an allocation can fail where LLVM does not
  // check (a crash, not this message). The estimate is bench/compile's
  // lower bound: the fixed cost plus 3 MiB per shape.
  for (int resource : {RLIMIT_DATA, RLIMIT_AS}) {
    struct rlimit limit;
    uint64_t need = (uint64_t(cq4p::kFixedMemoryMiB) + 3 * shapes) << 20;
    if (getrlimit(resource, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY &&
        uint64_t(limit.rlim_cur) < need)
      return fail(outOfMemory + " (about " + std::to_string(need >> 20) +
                  " MiB in all, above the " +
                  (resource == RLIMIT_DATA ? "data" : "address space") +
                  " limit of " + std::to_string(uint64_t(limit.rlim_cur) >> 20) +
                  " MiB)");
  }
  sayOnOutOfMemory("cq4p-compile: error: " + outOfMemory + "\n");

  // lld resets every command-line option of the process when it is done:
  // the options were copied into `options` above, and none is read after.
  return fail(cq4p::buildKernelLibrary(std::move(module), variants, options));
}

} // namespace

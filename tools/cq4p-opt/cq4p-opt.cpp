//===- cq4p-opt.cpp - the cq4p optimizer driver ---------------------------===//
//
// The mlir-opt of cq4p: parses, verifies and transforms IR in the cq4p
// dialect and in the upstream dialects its lowerings produce (func, arith,
// scf, memref, tensor, vector, arm_neon, arm_sme, arm_sve, llvm, ub). IR
// that does not verify is reported with the verifier's message and a
// non-zero exit status.
//
//===----------------------------------------------------------------------===//

#include "cq4p/Conversion/Passes.h"
#include "cq4p/Dialect/CQ4P/IR/CQ4P.h"
#include "cq4p/Dialect/CQ4P/Transforms/Passes.h"
#include "cq4p/Pipelines/Pipelines.h"
#include "cq4p/Tools/InputNesting.h"
#include "cq4p/Tools/LargeStack.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/ArmNeon/ArmNeonDialect.h"
#include "mlir/Dialect/ArmSME/IR/ArmSME.h"
#include "mlir/Dialect/ArmSVE/IR/ArmSVEDialect.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Dialect/UB/IR/UBOps.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/InitAllExtensions.h"
#include "mlir/InitAllPasses.h"
#include "mlir/Support/FileUtilities.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/raw_ostream.h"

namespace {

/// What --help says first; the pass list below it holds cq4p's passes
/// (cq4p-*, convert-cq4p-to-*) and pipelines with each option's default.
constexpr const char *kOverview =
    "cq4p-opt: the cq4p optimizer driver (mlir-opt with cq4p's dialects, passes and\n"
    "pipelines). It parses and verifies IR in the cq4p dialect and the upstream\n"
    "dialects its lowerings produce, runs the passes given in order and prints the\n"
    "result; IR that does not verify is reported with the verifier's message and a\n"
    "non-zero exit status.\n"
    "\n"
    "  cq4p-opt model.mlir --cq4p-lower-model=\"prefill-chunk=64 kv-cache=f16\"\n"
    "  cq4p-opt model.mlir --cq4p-host-pipeline   # host kernels in the LLVM dialect\n"
    "  cq4p-opt kernels.mlir --cq4p-neon-pipeline=\"gemm-rows=8\"\n"
    "\n"
    "cq4p's own passes are named cq4p-* and convert-cq4p-to-*, its pipelines\n"
    "cq4p-host-pipeline, cq4p-neon-pipeline and cq4p-sme2-pipeline (graph-level IR to\n"
    "exported kernels in the LLVM dialect). The pass list below describes each with its\n"
    "options, their ranges and defaults; cq4p-compile runs a pipeline and builds the\n"
    "library.\n";

/// The stack of the thread that parses, verifies and transforms: the parser
/// at kMaxIrNesting levels needs a few MiB (docs/TRUST.md), and deep
/// recursion elsewhere (printing, verification) gets the same headroom.
constexpr unsigned kStackBytes = 64u << 20;

/// MlirOptMain over a buffer read once: the nesting bound is checked on the
/// same bytes the parser then reads.
int run(llvm::StringRef inputFilename, llvm::StringRef outputFilename,
        mlir::DialectRegistry &registry) {
  mlir::MlirOptMainConfig config = mlir::MlirOptMainConfig::createFromCLOptions();
  std::string errorMessage;
  std::unique_ptr<llvm::MemoryBuffer> file =
      mlir::openInputFile(inputFilename, &errorMessage);
  if (!file) {
    llvm::errs() << errorMessage << "\n";
    return 1;
  }
  if (std::optional<size_t> offset = mlir::cq4p::findNestingPast(
          file->getBuffer(), mlir::cq4p::kMaxIrNesting, /*json=*/false)) {
    llvm::errs() << mlir::cq4p::describeIrNestingPast(
                        inputFilename, file->getBuffer(), *offset)
                 << "\n";
    return 1;
  }
  auto output = mlir::openOutputFile(outputFilename, &errorMessage);
  if (!output) {
    llvm::errs() << errorMessage << "\n";
    return 1;
  }
  if (mlir::failed(
          mlir::MlirOptMain(output->os(), std::move(file), registry, config)))
    return 1;
  output->keep();
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  mlir::DialectRegistry registry;
  registry.insert<mlir::cq4p::CQ4PDialect, mlir::cq4p_intr::CQ4PIntrDialect,
                  mlir::arith::ArithDialect,
                  mlir::arm_neon::ArmNeonDialect, mlir::arm_sme::ArmSMEDialect,
                  mlir::arm_sve::ArmSVEDialect, mlir::func::FuncDialect,
                  mlir::LLVM::LLVMDialect, mlir::math::MathDialect,
                  mlir::memref::MemRefDialect,
                  mlir::scf::SCFDialect, mlir::tensor::TensorDialect,
                  mlir::ub::UBDialect, mlir::vector::VectorDialect>();
  // Interfaces the upstream lowerings to LLVM rely on (convert-to-llvm).
  mlir::registerAllExtensions(registry);
  mlir::registerAllPasses();
  mlir::cq4p::registerCQ4PTransformsPasses();
  mlir::cq4p::registerCQ4PConversionPasses();
  mlir::cq4p::registerPipelines();
  std::pair<std::string, std::string> files = mlir::registerAndParseCLIOptions(
      argc, argv, kOverview, registry);
  const std::string &inputFilename = files.first;
  const std::string &outputFilename = files.second;
  mlir::MlirOptMainConfig config = mlir::MlirOptMainConfig::createFromCLOptions();
  if (config.shouldShowDialects() || config.shouldListPasses())
    return mlir::asMainReturnCode(
        mlir::MlirOptMain(argc, argv, inputFilename, outputFilename, registry));
  return mlir::cq4p::runOnLargeStack(kStackBytes, [&] {
    return run(inputFilename, outputFilename, registry);
  });
}

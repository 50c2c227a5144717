//===- Codegen.cpp - a variant's LLVM module into an object file ----------===//
//
// Codegen.h's steps. The SME ABI routines are assembled in process by LLVM's
// MC, with the MC layer of the target machine that generates the kernels, so
// that one cq4p-compile serves every AArch64 triple without an assembler.
//
//===----------------------------------------------------------------------===//

#include "cq4p/Target/Library/Codegen.h"

#include "cq4p/Target/Library/PreRaScheduling.h"

#include "mlir/Support/FileUtilities.h"
#include "llvm/IR/LegacyPassManager.h"
#include "llvm/MC/MCAsmBackend.h"
#include "llvm/MC/MCAsmInfo.h"
#include "llvm/MC/MCCodeEmitter.h"
#include "llvm/MC/MCContext.h"
#include "llvm/MC/MCInstrInfo.h"
#include "llvm/MC/MCObjectFileInfo.h"
#include "llvm/MC/MCObjectWriter.h"
#include "llvm/MC/MCParser/MCAsmParser.h"
#include "llvm/MC/MCParser/MCTargetAsmParser.h"
#include "llvm/MC/MCRegisterInfo.h"
#include "llvm/MC/MCStreamer.h"
#include "llvm/MC/MCSubtargetInfo.h"
#include "llvm/MC/TargetRegistry.h"
#include "llvm/Passes/PassBuilder.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/ToolOutputFile.h"

#include "SmeAbiSource.h"

using namespace mlir;

namespace {

llvm::Error message(const llvm::Twine &text) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), text);
}

/// Where an output stream's bytes went wrong: the write's errno text.
llvm::Error failedWriting(llvm::raw_fd_ostream &os, llvm::StringRef path) {
  std::error_code error = os.error();
  os.clear_error();
  return message("cannot write " + path + ": " + error.message());
}

/// What a kernel library adds to sme_abi.S: the flags the routines read,
/// set for a library that loads only where SME2 runs (the runtime's copy
/// sets them in a constructor, sme_abi_features.c), and every symbol hidden.
constexpr const char kLibraryDefinitions[] = R"(
  .data
  .hidden cq4p_sme_abi_has_sme
cq4p_sme_abi_has_sme:
  .byte 1
  .hidden cq4p_sme_abi_has_sve
cq4p_sme_abi_has_sve:
  .byte 0
  .hidden __arm_sme_state
  .hidden __arm_tpidr2_save
  .hidden __arm_tpidr2_restore
  .hidden __arm_za_disable
  .hidden __arm_get_current_vg
)";

} // namespace

void mlir::cq4p::setFunctionAttributes(llvm::Module &module,
                                       const TargetChoice &choice,
                                       llvm::StringRef aarch64TuneCpu) {
  for (llvm::Function &function : module) {
    if (function.isDeclaration())
      continue;
    function.addFnAttr("target-cpu", choice.cpu);
    function.addFnAttr("target-features", choice.features);
    if (choice.triple.isAArch64()) {
      function.addFnAttr("tune-cpu", aarch64TuneCpu);
      // The kernels keep their emitted, register-budgeted order
      // (PreRaScheduling.h says why).
      function.addFnAttr(kNoPreRaScheduling);
    } else if (!choice.tuneCpu.empty())
      function.addFnAttr("tune-cpu", choice.tuneCpu);
    if (choice.vectorBits > 0) {
      // Wide vectors stay whole even where the tuning prefers 256 bits.
      std::string bits = std::to_string(choice.vectorBits);
      function.addFnAttr("prefer-vector-width", bits);
      function.addFnAttr("min-legal-vector-width", bits);
    }
  }
}

void mlir::cq4p::optimize(llvm::Module &module, llvm::TargetMachine &machine) {
  llvm::LoopAnalysisManager lam;
  llvm::FunctionAnalysisManager fam;
  llvm::CGSCCAnalysisManager cgam;
  llvm::ModuleAnalysisManager mam;
  llvm::PassBuilder builder(&machine);
  builder.registerModuleAnalyses(mam);
  builder.registerCGSCCAnalyses(cgam);
  builder.registerFunctionAnalyses(fam);
  builder.registerLoopAnalyses(lam);
  builder.crossRegisterProxies(lam, fam, cgam, mam);
  builder.buildPerModuleDefaultPipeline(llvm::OptimizationLevel::O3)
      .run(module, mam);
}

llvm::Error mlir::cq4p::emitObject(llvm::TargetMachine &machine,
                                   llvm::Module &module,
                                   const std::string &path) {
  std::string errorMessage;
  auto out = openOutputFile(path, &errorMessage);
  if (!out)
    return message(errorMessage);
  llvm::legacy::PassManager codegen;
  if (machine.addPassesToEmitFile(codegen, out->os(), nullptr,
                                  llvm::CodeGenFileType::ObjectFile))
    return message("the target cannot emit object files");
  // The pre-RA scheduler, per function (PreRaScheduling.h).
  PreRaSchedulingGate gate(module);
  llvm::OptPassGate &previousGate = module.getContext().getOptPassGate();
  module.getContext().setOptPassGate(gate);
  codegen.run(module);
  module.getContext().setOptPassGate(previousGate);
  out->os().close();
  if (out->os().has_error())
    return failedWriting(out->os(), path);
  out->keep();
  return llvm::Error::success();
}

llvm::Error mlir::cq4p::assembleSmeAbiRoutines(llvm::TargetMachine &machine,
                                               const std::string &path) {
  const llvm::Triple &triple = machine.getTargetTriple();
  const llvm::Target &target = machine.getTarget();
  const llvm::MCTargetOptions &options = machine.Options.MCOptions;
  std::string source = std::string(kSmeAbiAssembly) + kLibraryDefinitions;
  llvm::SourceMgr sources;
  sources.AddNewSourceBuffer(
      llvm::MemoryBuffer::getMemBuffer(source, "sme_abi.S"), llvm::SMLoc());
  std::string diagnostics;
  sources.setDiagHandler(
      [](const llvm::SMDiagnostic &diagnostic, void *context) {
        llvm::raw_string_ostream os(*static_cast<std::string *>(context));
        diagnostic.print(nullptr, os, /*ShowColors=*/false);
      },
      &diagnostics);

  const llvm::MCSubtargetInfo &subtarget = *machine.getMCSubtargetInfo();
  llvm::MCContext context(triple, machine.getMCAsmInfo(),
                          machine.getMCRegisterInfo(), &subtarget, &sources,
                          &options);
  std::unique_ptr<llvm::MCObjectFileInfo> fileInfo(
      target.createMCObjectFileInfo(context, /*PIC=*/true));
  context.setObjectFileInfo(fileInfo.get());

  std::string errorMessage;
  auto out = openOutputFile(path, &errorMessage);
  if (!out)
    return message(errorMessage);
  std::unique_ptr<llvm::MCAsmBackend> backend(target.createMCAsmBackend(
      subtarget, *machine.getMCRegisterInfo(), options));
  std::unique_ptr<llvm::MCCodeEmitter> emitter(
      target.createMCCodeEmitter(*machine.getMCInstrInfo(), context));
  if (!backend || !emitter)
    return message("the target cannot assemble the SME ABI routines");
  std::unique_ptr<llvm::MCObjectWriter> writer =
      backend->createObjectWriter(out->os());
  std::unique_ptr<llvm::MCStreamer> streamer(target.createMCObjectStreamer(
      triple, context, std::move(backend), std::move(writer),
      std::move(emitter), subtarget));
  std::unique_ptr<llvm::MCAsmParser> parser(llvm::createMCAsmParser(
      sources, context, *streamer, *machine.getMCAsmInfo()));
  std::unique_ptr<llvm::MCTargetAsmParser> targetParser(
      target.createMCAsmParser(subtarget, *parser, *machine.getMCInstrInfo(),
                               options));
  if (!targetParser)
    return message("the target cannot assemble the SME ABI routines");
  parser->setTargetParser(*targetParser);
  if (parser->Run(/*NoInitialTextSection=*/false))
    return message("assembling the SME ABI routines for " + triple.str() +
                   " failed:\n" + diagnostics);
  streamer.reset();
  out->os().close();
  if (out->os().has_error())
    return failedWriting(out->os(), path);
  out->keep();
  return llvm::Error::success();
}

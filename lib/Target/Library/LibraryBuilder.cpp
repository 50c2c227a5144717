//===- LibraryBuilder.cpp - a model's kernel library, built in process ----===//
//
// The steps LibraryBuilder.h lists, in order. Each variant's objects are
// written to temporary files that are removed on every exit; only the
// output, when the build succeeds, remains.
//
//===----------------------------------------------------------------------===//

#include "cq4p/Target/Library/LibraryBuilder.h"

#include "cq4p/Pipelines/Pipelines.h"
#include "cq4p/Target/Library/Codegen.h"
#include "cq4p/Target/Library/Link.h"
#include "cq4p/Target/Library/Temporaries.h"
#include "cq4p/Target/Library/Variants.h"
#include "cq4p/kernel_abi.h"

#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Support/FileUtilities.h"
#include "mlir/Target/LLVMIR/Export.h"
#include "llvm/IR/LLVMContext.h"
#include "llvm/IR/Module.h"
#include "llvm/Support/ToolOutputFile.h"

#include <set>

using namespace mlir;
using namespace mlir::cq4p;

namespace {

llvm::Error message(const llvm::Twine &text) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), text);
}

/// Writes `print`'s text to `path` (--emit=mlir and llvm).
template <typename Print>
llvm::Error writeText(const std::string &path, Print print) {
  std::string errorMessage;
  auto out = openOutputFile(path, &errorMessage);
  if (!out)
    return message(errorMessage);
  print(out->os());
  out->os().close();
  if (out->os().has_error()) {
    std::error_code error = out->os().error();
    out->os().clear_error();
    return message("cannot write " + path + ": " + error.message());
  }
  out->keep();
  return llvm::Error::success();
}

/// kernel_abi.h's optional `const char cq4p_bundle_digest[]`.
void addBundleDigest(ModuleOp module, llvm::StringRef digest) {
  OpBuilder b = OpBuilder::atBlockEnd(module.getBody());
  std::string text = digest.str() + std::string(1, '\0');
  LLVM::GlobalOp::create(
      b, module.getLoc(),
      LLVM::LLVMArrayType::get(IntegerType::get(module.getContext(), 8),
                               text.size()),
      /*isConstant=*/true, LLVM::Linkage::External, CQ4P_BUNDLE_DIGEST_SYMBOL,
      b.getStringAttr(text));
}

/// Generates `module` into a new temporary object, appended to `objects`.
llvm::Error emitTemporaryObject(llvm::TargetMachine &machine,
                                llvm::Module &module, llvm::StringRef prefix,
                                TemporaryFiles &temporaries,
                                std::vector<std::string> &objects) {
  llvm::Expected<std::string> path = temporaries.createFile(prefix, "o");
  if (!path)
    return path.takeError();
  if (llvm::Error error = emitObject(machine, module, *path))
    return error;
  objects.push_back(*path);
  return llvm::Error::success();
}

} // namespace

size_t mlir::cq4p::countKernelShapes(ModuleOp module) {
  std::set<std::string> shapes;
  module->walk([&](Operation *op) {
    if (!isa<LinearOp, EmbeddingOp, PrefillAttentionOp>(op))
      return;
    std::string shape = op->getName().getStringRef().str();
    llvm::raw_string_ostream os(shape);
    for (Type type : op->getOperandTypes())
      os << " " << type;
    for (NamedAttribute attribute : op->getAttrs())
      os << " " << attribute.getName() << "=" << attribute.getValue();
    shapes.insert(shape);
  });
  return shapes.size();
}

llvm::Error
mlir::cq4p::buildKernelLibrary(OwningOpRef<ModuleOp> module,
                               const std::vector<TargetChoice> &variants,
                               const LibraryOptions &options) {
  initializeLlvmTargets();
  MLIRContext *context = module->getContext();
  const TargetChoice &first = variants.front();
  KernelPipelineOptions pipeline;
  pipeline.gemmRows = options.gemmRows;
  pipeline.prefillChunk = options.prefillChunk;
  pipeline.kvCache = options.kvCache;
  pipeline.fuseDenseMlp = options.fuseDenseMlp;
  pipeline.gateInTransform = options.gateInTransform;
  pipeline.sme2FmlalRotation = options.sme2FmlalRotation;
  {
    // The model's planning, kernel outlining and tiling, the same for
    // every variant: run once.
    PassManager pm(context);
    buildKernelFrontPipeline(pm, first.kernelTarget, pipeline);
    if (failed(pm.run(*module)))
      return message("lowering " + options.inputName + " failed");
  }

  // The objects the link takes, in order. With one variant and nothing else
  // to link, --emit=obj writes the variant's object itself.
  TemporaryFiles temporaries;
  std::vector<std::string> objects;
  std::vector<VariantEntry> entries;
  bool sme2 = first.kernelTarget == Target::aarch64_sme2;
  bool directObject = options.emit == EmitKind::Object &&
                      variants.size() == 1 && first.level.empty() && !sme2;
  for (size_t index = 0; index < variants.size(); ++index) {
    const TargetChoice &choice = variants[index];
    OwningOpRef<ModuleOp> variant = index + 1 < variants.size()
                                        ? OwningOpRef<ModuleOp>(module->clone())
                                        : std::move(module);
    PassManager pm(context);
    pipeline.x86Dot = choice.x86Dot;
    pipeline.features = choice.kernelFeatures;
    buildKernelBackPipeline(pm, choice.kernelTarget, pipeline);
    if (failed(pm.run(*variant)))
      return message("lowering " + options.inputName +
                     (choice.level.empty() ? "" : " for " + choice.level) +
                     " failed");
    if (index == 0 && !options.digest.empty())
      addBundleDigest(*variant, options.digest);
    if (options.emit == EmitKind::Mlir)
      return writeText(options.output,
                       [&](llvm::raw_ostream &os) { variant->print(os); });

    llvm::Expected<std::unique_ptr<llvm::TargetMachine>> machine =
        createTargetMachine(choice);
    if (!machine)
      return machine.takeError();
    llvm::LLVMContext llvmContext;
    std::unique_ptr<llvm::Module> llvmModule =
        translateModuleToLLVMIR(*variant, llvmContext, "cq4p-kernels");
    if (!llvmModule)
      return message("translating the kernels to LLVM IR failed");
    variant = nullptr;
    llvmModule->setTargetTriple(choice.triple);
    llvmModule->setDataLayout((*machine)->createDataLayout());
    std::string suffix = index == 0 ? "" : variantSuffix(choice.level);
    if (!suffix.empty())
      renameVariantSymbols(*llvmModule, suffix);
    if (!choice.level.empty())
      entries.push_back(
          {choice.level, suffix, choice.kernelFeatures,
           llvmModule->getNamedGlobal(CQ4P_MODEL_SYMBOL + suffix) != nullptr});
    setFunctionAttributes(*llvmModule, choice, options.aarch64TuneCpu);
    optimize(*llvmModule, **machine);
    if (options.emit == EmitKind::LlvmIr)
      return writeText(options.output, [&](llvm::raw_ostream &os) {
        llvmModule->print(os, nullptr);
      });

    if (directObject)
      return emitObject(**machine, *llvmModule, options.output);
    if (choice.kernelTarget == Target::aarch64_sme2) {
      // The SME ABI routines the streaming leaves call (lazy ZA saves),
      // local to the library, linked ahead of the kernels.
      llvm::Expected<std::string> routines =
          temporaries.createFile("cq4p-sme-abi", "o");
      if (!routines)
        return routines.takeError();
      if (llvm::Error error = assembleSmeAbiRoutines(**machine, *routines))
        return error;
      objects.push_back(*routines);
    }
    if (llvm::Error error = emitTemporaryObject(
            **machine, *llvmModule, "cq4p-kernels", temporaries, objects))
      return error;
  }

  llvm::Expected<std::unique_ptr<llvm::TargetMachine>> machine =
      createTargetMachine(first);
  if (!machine)
    return machine.takeError();
  if (!entries.empty()) {
    // The variant table, an object of its own (data only).
    llvm::LLVMContext llvmContext;
    std::unique_ptr<llvm::Module> table =
        buildVariantTable(llvmContext, entries);
    table->setTargetTriple(first.triple);
    table->setDataLayout((*machine)->createDataLayout());
    if (llvm::Error error = emitTemporaryObject(
            **machine, *table, "cq4p-variants", temporaries, objects))
      return error;
  }
  if (options.emit == EmitKind::Object)
    return linkRelocatable(objects, options.output, temporaries);
  return linkSharedLibrary(objects, options.output, first.triple, **machine,
                           temporaries);
}

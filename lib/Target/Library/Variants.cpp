//===- Variants.cpp - several instruction set levels in one library -------===//
//
// The renaming of a variant's symbols and the variant table (Variants.h).
//
//===----------------------------------------------------------------------===//

#include "cq4p/Target/Library/Variants.h"

#include "cq4p/Codegen/KernelAbi.h"
#include "cq4p/kernel_abi.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/IR/Constants.h"
#include "llvm/IR/GlobalVariable.h"

using namespace mlir;

std::string mlir::cq4p::variantSuffix(llvm::StringRef level) {
  std::string suffix = "__";
  for (char c : level)
    suffix += llvm::isAlnum(c) ? c : '_';
  return suffix;
}

void mlir::cq4p::renameVariantSymbols(llvm::Module &module,
                                      llvm::StringRef suffix) {
  for (llvm::GlobalValue &value : module.global_values()) {
    if (value.isDeclaration() || value.hasLocalLinkage() ||
        value.hasAppendingLinkage() || value.getName().starts_with("llvm."))
      continue;
    value.setName(value.getName() + suffix);
    value.setVisibility(llvm::GlobalValue::HiddenVisibility);
    if (auto *object = dyn_cast<llvm::GlobalObject>(&value))
      if (const llvm::Comdat *comdat = object->getComdat()) {
        llvm::Comdat *renamed =
            module.getOrInsertComdat((comdat->getName() + suffix).str());
        renamed->setSelectionKind(comdat->getSelectionKind());
        object->setComdat(renamed);
      }
  }
}

std::unique_ptr<llvm::Module>
mlir::cq4p::buildVariantTable(llvm::LLVMContext &context,
                              const std::vector<VariantEntry> &entries) {
  auto module = std::make_unique<llvm::Module>("cq4p-kernel-variants", context);
  using Variant = cq4p::abi::Fields<cq4p_kernel_variant>;
  using Variants = cq4p::abi::Fields<cq4p_kernel_variants>;
  auto *ptr = llvm::PointerType::getUnqual(context);
  auto *entryType = cq4p::abi::llvmStructType<cq4p_kernel_variant>(context);
  auto *tableType = cq4p::abi::llvmStructType<cq4p_kernel_variants>(context);
  auto intField = [](llvm::StructType *type, unsigned field, uint64_t value) {
    return llvm::ConstantInt::get(type->getElementType(field), value);
  };
  auto declare = [&](const std::string &name, bool hidden) {
    auto *symbol = new llvm::GlobalVariable(
        *module, llvm::Type::getInt8Ty(context), /*isConstant=*/true,
        llvm::GlobalValue::ExternalLinkage, nullptr, name);
    if (hidden)
      symbol->setVisibility(llvm::GlobalValue::HiddenVisibility);
    return symbol;
  };
  std::vector<llvm::Constant *> rows;
  for (const VariantEntry &entry : entries) {
    auto *text = llvm::ConstantDataArray::getString(context, entry.level);
    auto *name = new llvm::GlobalVariable(
        *module, text->getType(), /*isConstant=*/true,
        llvm::GlobalValue::PrivateLinkage, text, "cq4p.variant.name");
    bool hidden = !entry.suffix.empty();
    llvm::Constant *model = llvm::ConstantPointerNull::get(ptr);
    if (entry.hasModel)
      model = declare(CQ4P_MODEL_SYMBOL + entry.suffix, hidden);
    std::vector<llvm::Constant *> fields(entryType->getNumElements());
    fields[Variant::name] = name;
    fields[Variant::features] =
        intField(entryType, Variant::features, entry.features);
    fields[Variant::kernels] =
        declare(CQ4P_KERNEL_TABLE_SYMBOL + entry.suffix, hidden);
    fields[Variant::model] = model;
    rows.push_back(llvm::ConstantStruct::get(entryType, fields));
  }
  auto *listType = llvm::ArrayType::get(entryType, rows.size());
  auto *list = new llvm::GlobalVariable(
      *module, listType, /*isConstant=*/true, llvm::GlobalValue::PrivateLinkage,
      llvm::ConstantArray::get(listType, rows), "cq4p.variant.list");
  std::vector<llvm::Constant *> fields(tableType->getNumElements());
  fields[Variants::version] =
      intField(tableType, Variants::version, CQ4P_KERNEL_VARIANTS_VERSION);
  fields[Variants::count] = intField(tableType, Variants::count, rows.size());
  fields[Variants::variants] = list;
  new llvm::GlobalVariable(*module, tableType, /*isConstant=*/true,
                           llvm::GlobalValue::ExternalLinkage,
                           llvm::ConstantStruct::get(tableType, fields),
                           CQ4P_KERNEL_VARIANTS_SYMBOL);
  return module;
}

//===- Variants.h - several x86-64 levels in one library --------*- C++ -*-===//
//
// A library of several x86-64 levels holds one object per level. The first
// level keeps kernel_abi.h's names (what an older runtime loads); every other
// level's symbols get the level as a suffix and are hidden, and the variant
// table `cq4p_kernel_variants` (an object of its own, data only) lists every
// level with its CQ4P_FEATURE_* bits, kernel table and model, for the runtime
// to run the widest the CPU has.
//
//===----------------------------------------------------------------------===//

#ifndef CQ4P_TARGET_LIBRARY_VARIANTS_H
#define CQ4P_TARGET_LIBRARY_VARIANTS_H

#include "llvm/ADT/StringRef.h"
#include "llvm/IR/LLVMContext.h"
#include "llvm/IR/Module.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace mlir::cq4p {

/// A variant's symbol suffix: "__" and its level with every character other
/// than a letter or digit as "_" (x86-64-v4+avx512vnni:
/// __x86_64_v4_avx512vnni).
std::string variantSuffix(llvm::StringRef level);

/// Gives every symbol `module` defines the suffix, and hidden visibility:
/// the variants' kernels share their names, and only the first variant's are
/// exported; the variant table reaches the others.
void renameVariantSymbols(llvm::Module &module, llvm::StringRef suffix);

/// One compiled variant, as the variant table records it.
struct VariantEntry {
  std::string level, suffix; ///< suffix "" for the first (kernel_abi.h names)
  uint64_t features;
  bool hasModel; ///< defines cq4p_model_steps
};

/// kernel_abi.h's `cq4p_kernel_variants`, over `entries` (narrowest first).
std::unique_ptr<llvm::Module>
buildVariantTable(llvm::LLVMContext &context,
                  const std::vector<VariantEntry> &entries);

} // namespace mlir::cq4p

#endif // CQ4P_TARGET_LIBRARY_VARIANTS_H

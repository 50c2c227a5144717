//===- KernelLowering.h - the kernel ops' lowering shared by targets -*- C++ -*-===//
//
// Every backend lowers the kernel-level ops with the same patterns; where a
// target spells a step with its own instructions (the codebook lookup and
// 4-way int8 dot of `cq4p.panel_dot`, the quantization's rounding and
// permutation, attention) the patterns ask its KernelTargetInfo.
// convert-cq4p-to-neon and convert-cq4p-to-vector are this lowering for
// their targets.
//
//===----------------------------------------------------------------------===//

#ifndef CQ4P_CONVERSION_KERNELLOWERING_KERNELLOWERING_H
#define CQ4P_CONVERSION_KERNELLOWERING_KERNELLOWERING_H

#include "cq4p/Conversion/KernelLowering/KernelTargetInfo.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/PatternMatch.h"

namespace mlir::cq4p {

#define GEN_PASS_DECL_CQ4PSELECTSTRATEGY
#include "cq4p/Conversion/Passes.h.inc"

/// The KernelTargetInfo whose strategies cq4p-select-strategy records for
/// `target` (SME2's, NEON's, or the host's).
const KernelTargetInfo &getKernelTargetInfo(Target target);

/// The attribute convert-cq4p-to-arm-sme puts on
/// cq4p.rotate_quantize_activations and cq4p.decode_embedding: the
/// streaming leaf that computes their matrix product, which the lowering
/// below then calls instead of emitting the vector code.
inline constexpr llvm::StringLiteral kRotationLeafAttrName = "cq4p.sme_rotation";

/// On a cq4p.rotate_quantize_activations with kRotationLeafAttrName: the
/// leaf takes fp16 values (convert-cq4p-to-arm-sme's fmlal-rotation), which
/// the lowering rounds from a = x * isr after scaling each row by a power of
/// two (its largest |a| to [2^14, 2^15)), and whose sums it scales back.
inline constexpr llvm::StringLiteral kRotationLeafF16AttrName = "cq4p.sme_rotation_f16";

/// cq4p.decode_embedding whose #cq4p.strategy has embedding_rows (SME2):
/// the leaf convert-cq4p-to-arm-sme builds to decode a chunk of at least
/// embedding_min_rows (at most embedding_rows) rows straight from the
/// panels and rotate them with outer products; the lowering calls it for
/// such chunks and keeps the kRotationLeafAttrName leaf for fewer rows.
inline constexpr llvm::StringLiteral kEmbeddingLeafAttrName = "cq4p.sme_embedding_mopa";

/// Patterns lowering cq4p kernel ops for `target` (which they keep a
/// reference to) to scf, vector, arith, math, memref and target intrinsics.
void populateCQ4PKernelLoweringPatterns(RewritePatternSet &patterns,
                                        const KernelTargetInfo &target);

/// Applies the patterns for `target` to `func` and fails, naming the op,
/// if a kernel op is left.
LogicalResult lowerCQ4PKernels(func::FuncOp func,
                               const KernelTargetInfo &target);

} // namespace mlir::cq4p

#endif // CQ4P_CONVERSION_KERNELLOWERING_KERNELLOWERING_H

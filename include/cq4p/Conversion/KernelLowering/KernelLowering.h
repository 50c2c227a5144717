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

/// The attribute convert-cq4p-to-arm-sme puts on
/// cq4p.rotate_quantize_activations and cq4p.decode_embedding: the
/// streaming leaf that computes their matrix product, which the lowering
/// below then calls instead of emitting the vector code.
inline constexpr llvm::StringLiteral kSmeRotationAttrName = "cq4p.sme_rotation";

/// On a cq4p.rotate_quantize_activations with kSmeRotationAttrName: the leaf
/// takes fp16 values (convert-cq4p-to-arm-sme's fmlal-rotation), which the
/// lowering rounds from a = x * isr after scaling each row by a power of two
/// (its largest |a| to [2^14, 2^15)), and whose sums it scales back.
inline constexpr llvm::StringLiteral kSmeRotationF16AttrName = "cq4p.sme_rotation_f16";

/// cq4p.decode_embedding on SME2: the streaming leaf that decodes a chunk of
/// at least kSmeEmbeddingMopaMinRows (at most kSmeEmbeddingMopaRows) rows
/// straight from the panels and rotates them with FP32 outer products; the
/// lowering calls it for such chunks and keeps the kSmeRotationAttrName leaf
/// (FMLAL by lane) for fewer rows, which it counts fewer instructions for.
inline constexpr llvm::StringLiteral kSmeEmbeddingMopaAttrName = "cq4p.sme_embedding_mopa";
/// Rows of the outer-product leaf's pass: four 16-row fp32 ZA tiles.
inline constexpr int64_t kSmeEmbeddingMopaRows = 64;
/// The fewest rows the outer-product leaf takes: its cost hardly depends on
/// the rows (the outer products cover all 64), the FMLAL leaf's grows with
/// them.
inline constexpr int64_t kSmeEmbeddingMopaMinRows = 32;

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

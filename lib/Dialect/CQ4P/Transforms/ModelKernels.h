//===- ModelKernels.h - the non-matmul kernels of a model -------*- C++ -*-===//
//
// Kernels over rows of fp32 activations (`[rows, width]`, a rows-split
// dispatch hands each thread a range of rows) and the attention over the KV
// cache (split by heads). Each is created once per distinct shape and
// parameters, named after them.
//
//===----------------------------------------------------------------------===//

#ifndef CQ4P_LIB_DIALECT_CQ4P_TRANSFORMS_MODELKERNELS_H
#define CQ4P_LIB_DIALECT_CQ4P_TRANSFORMS_MODELKERNELS_H

#include "KernelBuilder.h"

namespace mlir::cq4p {

/// (x, w, out, rows): RMSNorm of each chunk of `d` of every row.
FlatSymbolRefAttr createRmsNormKernel(KernelBuilder &kernels, int64_t width,
                                      Type weightElement, int64_t d,
                                      float epsilon, bool unitOffset);
/// (x, out, rows, position): rotary embedding, rotate-half pairing.
FlatSymbolRefAttr createRopeKernel(KernelBuilder &kernels, int64_t width,
                                   int64_t d, float theta, float scaling);
/// (gate, up, out, rows): act(gate) * up.
FlatSymbolRefAttr createGluKernel(KernelBuilder &kernels, int64_t width,
                                  StringRef activation);
/// (a, b, out, rows): a + b.
FlatSymbolRefAttr createAddKernel(KernelBuilder &kernels, int64_t width);
/// (x, out, rows): x * factor.
FlatSymbolRefAttr createScaleKernel(KernelBuilder &kernels, int64_t width,
                                    float factor);
/// (q, keys, values, out, rows, position, context, head_begin, head_end):
/// row r (position + r) of heads [head_begin, head_end) over the cached
/// keys and values of positions [max(0, p + 1 - window), p].
FlatSymbolRefAttr createCachedAttentionKernel(KernelBuilder &kernels,
                                              int64_t heads, int64_t kvHeads,
                                              int64_t d, int64_t window,
                                              float scale);

} // namespace mlir::cq4p

#endif // CQ4P_LIB_DIALECT_CQ4P_TRANSFORMS_MODELKERNELS_H

//===- ModelKernels.h - the non-matmul kernels of a model -------*- C++ -*-===//
//
// Kernels over rows of fp32 activations (`[rows, width]`, a rows-split
// dispatch hands each thread a range of rows) and the attention over the KV
// cache (split by heads). Each is created once per distinct shape and
// parameters, named after them.
//
//===----------------------------------------------------------------------===//

#ifndef CQ4P_CODEGEN_MODELKERNELS_H
#define CQ4P_CODEGEN_MODELKERNELS_H

#include "cq4p/Codegen/KernelBuilder.h"

namespace mlir::cq4p {

/// (x, w, out, rows): RMSNorm of each chunk of `d` of every row; without
/// a `weightElement` (null), (x, out, rows) and no weight multiplies.
FlatSymbolRefAttr createRmsNormKernel(KernelBuilder &kernels, int64_t width,
                                      Type weightElement, int64_t d,
                                      float epsilon, bool unitOffset);
/// (x, out, rows, position): rotary embedding, rotate-half pairing, the
/// pair (i, i + d/2) turning by position * freqs[i]; `out` of `outElement`
/// (f16: rounded, for an fp16 KV cache).
FlatSymbolRefAttr createRopeKernel(KernelBuilder &kernels, int64_t width,
                                   int64_t d, ArrayRef<float> freqs,
                                   Type outElement);
/// (x, out, rows): out[r, j] = x[r, offset + j] below x's width, else 0.
FlatSymbolRefAttr createColumnsKernel(KernelBuilder &kernels, int64_t inWidth,
                                      int64_t outWidth, int64_t offset);
/// (x, s, out, rows): x * s[0], `s` of `scalarElement`.
FlatSymbolRefAttr createScaleByKernel(KernelBuilder &kernels, int64_t width,
                                      Type scalarElement);
/// (x, out, rows): cap * tanh(x / cap).
FlatSymbolRefAttr createSoftcapKernel(KernelBuilder &kernels, int64_t width,
                                      float cap);
/// (x [rows, 3h], w [h * l], state [l - 1, h], out [rows, h], rows,
/// position, begin, end): LFM2's short convolution (cq4p.short_conv) of
/// the channels [16 begin, 16 end).
FlatSymbolRefAttr createShortConvKernel(KernelBuilder &kernels, int64_t h,
                                        int64_t l, Type weightElement);
/// A linear's matmul with its bias added in the epilogue, over a range of
/// super-blocks: (weight view, act, act_scales, bias, y, rows, sb_begin,
/// sb_end). GEMV (one row) or GEMM.
FlatSymbolRefAttr createBiasedMatmulKernel(KernelBuilder &kernels, WeightType w,
                                           Type biasElement, bool single);
/// A linear's matmul with a residual added in the epilogue, over a range of
/// super-blocks: (weight view, act, act_scales, residual, y, rows, sb_begin,
/// sb_end); y = residual + x W^T, y not aliasing the residual. GEMV (one
/// row) or GEMM.
FlatSymbolRefAttr createResidualMatmulKernel(KernelBuilder &kernels,
                                             WeightType w, bool single);
/// (x, out, rows): fp32 rows stored as `outElement` (rounded to nearest).
FlatSymbolRefAttr createConvertKernel(KernelBuilder &kernels, int64_t width,
                                      Type outElement);
/// (gate, up, out, rows): act(gate) * up.
FlatSymbolRefAttr createGluKernel(KernelBuilder &kernels, int64_t width,
                                  Activation activation);
/// (a, b, out, rows): a + b.
FlatSymbolRefAttr createAddKernel(KernelBuilder &kernels, int64_t width);
/// (x, out, rows): x * factor.
FlatSymbolRefAttr createScaleKernel(KernelBuilder &kernels, int64_t width,
                                    float factor);
/// (q, keys, values, out, rows, position, context, head_begin, head_end):
/// row r (position + r) of heads [head_begin, head_end) over the cached
/// keys and values (of `cacheElement`) of positions
/// [max(0, p + 1 - window), p]: one cq4p.attention at `position`.
FlatSymbolRefAttr createCachedAttentionKernel(KernelBuilder &kernels,
                                              int64_t heads, int64_t kvHeads,
                                              int64_t d, int64_t window,
                                              float scale, Type cacheElement);
/// cq4p.attention as vector code. One row (a decode step): per head of
/// [headBegin, headEnd), the visible keys in tiles of 16 lanes with the
/// softmax's rescale once per tile (a flash-attention decode). More rows (a
/// prompt): query units (rows times the heads of one KV head) in the lanes
/// of `lanes`-wide vectors against tiles of 16 keys, scores and weighted
/// values as small GEMMs with an online softmax per lane (`lanes` is the
/// target's fp32 vector width: it picks the registers, not the bits).
/// `position` may be null (0). The lowering of cq4p.attention on every
/// target without its own; `d` a multiple of 16.
void emitVectorAttention(OpBuilder &b, Location loc, Value q, Value keys,
                         Value values, Value out, Value position,
                         Value headBegin, Value headEnd, int64_t heads,
                         int64_t kvHeads, int64_t d, int64_t window,
                         float scale, int64_t lanes);

/// The dense MLP's gate and up matmuls and its gating, over a range of
/// super-blocks: (gate, up views; act, act_scales, g, u, out, rows,
/// sb_begin, sb_end). `g` and `u` are scratch of out's shape. GEMV (one
/// row) or GEMM.
FlatSymbolRefAttr createFusedMlpKernel(KernelBuilder &kernels, WeightType w,
                                       Activation activation, bool single);

} // namespace mlir::cq4p

#endif // CQ4P_CODEGEN_MODELKERNELS_H

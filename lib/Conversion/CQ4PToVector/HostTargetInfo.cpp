//===- HostTargetInfo.cpp - the kernel lowering's x86 answers -------------===//
//
// The host's KernelTargetInfo, one per x86 panel dot (X86Dot): `generic`
// takes every default (portable vector code); `ssse3` looks the codebook up
// with 128-bit PSHUFB and permutes the quantized bytes with PSHUFB per
// 16-byte chunk; `avx2`, `avxvnni` and `avx512vnni` take the register's
// fp32 width for the rescale and the rotations (8 or 16 lanes), their own
// panel dot loop (HostKernels.cpp) and quantization (HostQuantize.cpp),
// and PSHUFB on two chunks at a time.
//
//===----------------------------------------------------------------------===//

#include "HostKernels.h"
#include "KernelLowering/ActivationTransform.h"
#include "KernelLowering/LoweringHelpers.h"

#include "cq4p/Conversion/CQ4PToVector/CQ4PToVector.h"
#include "cq4p/Dialect/CQ4PIntr/IR/CQ4PIntr.h"

using namespace mlir;
using namespace mlir::cq4p;

namespace {

/// The output permutation by PSHUFB per 16-byte chunk t: perm - 16 t when
/// in [0, 16), else 0x80, which reads as zero; the chunks' lookups are
/// or-ed. With `twoChunks` (AVX2 and wider) and an even count of chunks,
/// two output chunks per 256-bit PSHUFB whose table holds the source chunk
/// in both lanes: the indices of chunks 2o and 2o + 1 side by side.
class PshufbPermuter : public TablePermuter {
public:
  PshufbPermuter(OpBuilder &b, Location loc, ArrayRef<Value> permBytes,
                 int64_t gs, bool twoChunks)
      : TablePermuter(b, loc, gs) {
    auto i8x16 = VectorType::get({kQuantizedChunk}, b.getI8Type());
    Value limit = splat(b, loc, i8x16, b.getI8IntegerAttr(kQuantizedChunk));
    Value none = splat(b, loc, i8x16, b.getI8IntegerAttr(-128));
    for (Value p : permBytes)
      for (int64_t t = 0; t * kQuantizedChunk < gs; ++t) {
        Value d = arith::SubIOp::create(
            b, loc, p,
            splat(b, loc, i8x16, b.getI8IntegerAttr(kQuantizedChunk * t)));
        Value inside = arith::CmpIOp::create(
            b, loc, arith::CmpIPredicate::ult, d, limit);
        indices.push_back(arith::SelectOp::create(b, loc, inside, d, none));
      }
    if (twoChunks && (gs / kQuantizedChunk) % 2 == 0) {
      int64_t chunks = gs / kQuantizedChunk;
      SmallVector<int64_t> sideBySide;
      for (int64_t i = 0; i < 2 * kQuantizedChunk; ++i)
        sideBySide.push_back(i);
      for (int64_t o = 0; o < chunks; o += 2)
        for (int64_t t = 0; t < chunks; ++t)
          wideIndices.push_back(vector::ShuffleOp::create(
              b, loc, indices[o * chunks + t], indices[(o + 1) * chunks + t],
              sideBySide));
    }
  }

  void store(ArrayRef<Value> natural, Value act, Value row,
             Value kBase) override {
    auto i8x16 = VectorType::get({kQuantizedChunk}, b.getI8Type());
    int64_t chunks = gs / kQuantizedChunk;
    if (!wideIndices.empty()) {
      auto i8x32 = VectorType::get({2 * kQuantizedChunk}, b.getI8Type());
      SmallVector<int64_t> twice;
      for (int64_t i = 0; i < 2 * kQuantizedChunk; ++i)
        twice.push_back(i % kQuantizedChunk);
      SmallVector<Value> tables;
      for (Value chunk : natural)
        tables.push_back(vector::ShuffleOp::create(b, loc, chunk, chunk, twice));
      for (int64_t o = 0; o < chunks; o += 2) {
        Value out;
        for (int64_t t = 0; t < chunks; ++t) {
          Value part = cq4p_intr::X86Avx2PshufBOp::create(
              b, loc, i8x32, tables[t], wideIndices[(o / 2) * chunks + t]);
          out = out ? Value(arith::OrIOp::create(b, loc, out, part)) : part;
        }
        storeChunks(out, act, row, kBase, o);
      }
      return;
    }
    for (int64_t o = 0; o < chunks; ++o) {
      Value out;
      for (int64_t t = 0; t < chunks; ++t) {
        Value part = cq4p_intr::X86Ssse3PshufB128Op::create(
            b, loc, i8x16, natural[t], indices[o * chunks + t]);
        out = out ? Value(arith::OrIOp::create(b, loc, out, part)) : part;
      }
      storeChunks(out, act, row, kBase, o);
    }
  }

private:
  SmallVector<Value> wideIndices; ///< two chunks' indices per vector
};

class HostKernelTargetInfo : public KernelTargetInfo {
public:
  explicit HostKernelTargetInfo(X86Dot dot) : dot(dot) {}

  int64_t floatLanes() const override {
    switch (dot) {
    case X86Dot::avx512vnni:
      return 16;
    case X86Dot::avx2:
    case X86Dot::avxvnni:
      return 8;
    case X86Dot::generic:
    case X86Dot::ssse3:
      return 4;
    }
    llvm_unreachable("unknown X86Dot");
  }

  RotationBlocking rotationBlocking() const override {
    switch (dot) {
    case X86Dot::avx512vnni:
      // 32 zmm: 16 sums, 2 rotation vectors. A 16-row tile (16 sums of one
      // vector) converts half as often but measured 10-15% slower at K =
      // 4096 (twice the broadcasts per product). A span of 8 rotation rows:
      // a decode step's single row reads the 8 MiB matrix (K = 2048) from
      // memory as 8 interleaved streams rather than 32, which the hardware
      // prefetchers follow; with the next span prefetched, its embedding row
      // took 0.55 ms rather than 0.96 and the lm_head's rotation 0.41 rather
      // than 0.82 (1 thread, AMD EPYC, interleaved runs of the 16-layer
      // hidden-2048 model of bench/model). The sums' reloads, four times as
      // many as at a span of 32, are under a sixth of a multi-row tile's
      // operations.
      return {16, 8, 16, 8, 8, false, true};
    case X86Dot::avx2: // 16 ymm: 8 sums, 2 rotation vectors
    case X86Dot::avxvnni:
      return {8, 4, 8, 4, 8, false, true};
    case X86Dot::generic: // 16 xmm
    case X86Dot::ssse3:
      return KernelTargetInfo::rotationBlocking();
    }
    llvm_unreachable("unknown X86Dot");
  }

  std::optional<LogicalResult>
  lowerPanelDot(PanelDotOp op, PatternRewriter &rewriter) const override {
    // A packed NEON tile takes the shared pair loop (the x86 loop reads
    // activations in their natural order).
    if (!isWideX86Dot(dot) || op.getPairedActivations())
      return std::nullopt;
    return lowerWideX86PanelDot(op, rewriter, dot);
  }

  Value lookup(OpBuilder &b, Location loc, Value table,
               Value index) const override {
    if (dot != X86Dot::ssse3)
      return KernelTargetInfo::lookup(b, loc, table, index);
    return cq4p_intr::X86Ssse3PshufB128Op::create(
        b, loc, VectorType::get({16}, b.getI8Type()), table, index);
  }

  void populateQuantizePatterns(RewritePatternSet &patterns) const override {
    if (!isWideX86Dot(dot)) {
      KernelTargetInfo::populateQuantizePatterns(patterns);
      return;
    }
    populateWideQuantizePatterns(patterns, *this, floatLanes(),
                                 dot == X86Dot::avx512vnni);
  }

  std::unique_ptr<GroupPermuter>
  createGroupPermuter(OpBuilder &b, Location loc, Value permutation,
                      ArrayRef<Value> permBytes, int64_t gs) const override {
    if (dot == X86Dot::generic)
      return KernelTargetInfo::createGroupPermuter(b, loc, permutation,
                                                   permBytes, gs);
    return std::make_unique<PshufbPermuter>(b, loc, permBytes, gs,
                                            /*twoChunks=*/dot != X86Dot::ssse3);
  }

private:
  X86Dot dot;
};

} // namespace

const KernelTargetInfo &mlir::cq4p::getHostKernelTargetInfo(X86Dot dot) {
  static const HostKernelTargetInfo generic(X86Dot::generic),
      ssse3(X86Dot::ssse3), avx2(X86Dot::avx2), avxvnni(X86Dot::avxvnni),
      avx512vnni(X86Dot::avx512vnni);
  switch (dot) {
  case X86Dot::generic:
    return generic;
  case X86Dot::ssse3:
    return ssse3;
  case X86Dot::avx2:
    return avx2;
  case X86Dot::avxvnni:
    return avxvnni;
  case X86Dot::avx512vnni:
    return avx512vnni;
  }
  llvm_unreachable("unknown X86Dot");
}

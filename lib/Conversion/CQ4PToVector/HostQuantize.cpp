//===- HostQuantize.cpp - cq4p.quantize_activations on 8 or 16 lanes -----===//
//
// x86 with AVX2 or wider lowers cq4p.quantize_activations with a pattern of
// its own, on the register's 8 or 16 fp32 lanes, instead of the shared
// 4-lane code (KernelLowering/ActivationTransform.cpp, which explains the
// contract both follow): the same bytes, fewer instructions.
//
//===----------------------------------------------------------------------===//

#include "HostKernels.h"
#include "KernelLowering/ActivationTransform.h"
#include "KernelLowering/LoweringHelpers.h"

#include "cq4p/Dialect/CQ4P/IR/CQ4P.h"
#include "cq4p/Dialect/CQ4PIntr/IR/CQ4PIntr.h"

#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/PatternMatch.h"

#include <cmath>
#include <limits>

using namespace mlir;
using namespace mlir::cq4p;

namespace {

/// x86 with AVX2 (8 lanes) or AVX-512 (16 lanes): the same contract with a
/// group in natural order, `lanes` consecutive elements per vector.
///
///   - Butterfly stages whose partner is in the same vector (h < lanes) are
///     a lane swap t = v[i ^ h] and one FMA, r = fma(v, s, t) with s = +1 in
///     the lower lanes and -1 in the upper ones: b + a below, a - b above,
///     each rounded once from an exact product, so the same bits as the
///     contract's a + b and a - b. The later stages pair whole vectors.
///   - w / scale without a vector division: a multiply by the correctly
///     rounded reciprocal and one FMA step give the correctly rounded
///     quotient (see the code); it rounds half to even and saturates as on
///     every target (on AVX-512 with VCVTPS2DQ under an explicit
///     round-to-nearest-even, not MXCSR's mode).
///   - The right signs are a byte negate under a per-call mask (x86 has no
///     byte multiply); the values are +-1 (checked at open), so this is the
///     contract's multiply.
///   - The output permutation of a group of up to 128 bytes on AVX-512 is two
///     word permutes over the whole group (VPERMW / VPERMI2W: the word that
///     holds each output byte, one permute for the even outputs and one for
///     the odd) and one in-lane byte pick (PSHUFB) of each, blended: AVX-512BW
///     only, about 7 instructions per 64 bytes. Larger groups, and AVX2, or
///     PSHUFB lookups of each source chunk (PshufbPermuter,
///     HostTargetInfo.cpp), two output chunks per 256-bit lookup.
struct WideQuantizeLowering : public OpRewritePattern<QuantizeActivationsOp> {
  WideQuantizeLowering(MLIRContext *ctx, const KernelTargetInfo &target,
                       int64_t lanes, bool avx512)
      : OpRewritePattern(ctx), target(target), lanes(lanes), avx512(avx512) {}

  LogicalResult matchAndRewrite(QuantizeActivationsOp op,
                                PatternRewriter &rewriter) const override {
    int64_t gs = op.getGroupSize();
    if (gs % kQuantizedChunk != 0 || gs % lanes != 0)
      return rewriter.notifyMatchFailure(op, "group size not a multiple of 16");
    Location loc = op.getLoc();
    OpBuilder &b = rewriter;
    Type f32 = b.getF32Type(), i8 = b.getI8Type(), i16 = b.getI16Type(),
         i32 = b.getI32Type();
    auto vec = [&](int64_t n, Type element) {
      return VectorType::get({n}, element);
    };
    auto f32v = vec(lanes, f32), i32v = vec(lanes, i32);
    int64_t vectors = gs / lanes;
    bool wordPermute = avx512 && gs <= 128;
    // Bytes per output block: what one permute writes.
    int64_t blockBytes = wordPermute ? std::min<int64_t>(gs, 64) : kQuantizedChunk;
    int64_t blocks = gs / blockBytes;
    // A 64-byte block narrowed by VPACKSSDW + VPACKSSWB (3 instructions for
    // 64 bytes, against 4 two-uop VPMOVSDB and 3 inserts) holds the byte of
    // natural position 16 s + 4 l + e (vector s, 128-bit lane l, element e)
    // at 16 l + 4 s + e: the two bit fields swap, so the per-call right
    // signs and permutation indices are moved into that order, not the
    // bytes of every row.
    bool packed = wordPermute && blockBytes == 64;

    // Per call: left signs as fp32, the in-vector stages' +-1 multipliers,
    // 1/sqrt(gs), the right signs' negate masks, the permutation's indices.
    SmallVector<Value> left;
    for (int64_t v = 0; v < vectors; ++v)
      left.push_back(loadFloats(b, loc, op.getLeftSigns(),
                                cIndex(b, loc, v * lanes)));
    SmallVector<Value> stageSigns;
    for (int64_t h = 1; h < lanes; h *= 2) {
      SmallVector<float> signs;
      for (int64_t i = 0; i < lanes; ++i)
        signs.push_back(i & h ? -1.0f : 1.0f);
      stageSigns.push_back(arith::ConstantOp::create(
          b, loc, f32v, DenseElementsAttr::get(f32v, ArrayRef<float>(signs))));
    }
    Value invSqrt = splat(b, loc, f32v,
                          b.getF32FloatAttr(float(1.0 / std::sqrt(double(gs)))));
    Value zeroBytes = splat(b, loc, vec(blockBytes, i8), b.getI8IntegerAttr(0));
    SmallVector<Value> negate;
    for (int64_t o = 0; o < blocks; ++o) {
      Value right = vector::LoadOp::create(b, loc, vec(blockBytes, i8),
                                           op.getRightSigns(),
                                           cIndex(b, loc, o * blockBytes));
      if (packed) {
        SmallVector<int64_t> natural;
        for (int64_t p = 0; p < blockBytes; ++p)
          natural.push_back(16 * ((p >> 2) & 3) + 4 * ((p >> 4) & 3) + (p & 3));
        right = vector::ShuffleOp::create(b, loc, right, right, natural);
      }
      negate.push_back(arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt,
                                             right, zeroBytes));
    }
    SmallVector<Value> evenWords, oddWords, picks, chunkPerm;
    if (wordPermute) {
      for (int64_t o = 0; o < blocks; ++o) {
        Value p = vector::LoadOp::create(b, loc, vec(blockBytes, i32),
                                         op.getPermutation(),
                                         cIndex(b, loc, o * blockBytes));
        if (packed) {
          // (n & ~63) | (n & 3) | ((n >> 4) & 3) << 2 | ((n >> 2) & 3) << 4
          auto constant = [&](int32_t value) {
            return splat(b, loc, vec(blockBytes, i32), b.getI32IntegerAttr(value));
          };
          auto field = [&](int32_t shift, int32_t to) {
            Value bits = arith::AndIOp::create(
                b, loc, arith::ShRUIOp::create(b, loc, p, constant(shift)),
                constant(3));
            return Value(arith::ShLIOp::create(b, loc, bits, constant(to)));
          };
          Value kept = arith::AndIOp::create(b, loc, p, constant(~60));
          p = arith::OrIOp::create(
              b, loc, kept,
              arith::OrIOp::create(b, loc, field(4, 2), field(2, 4)));
        }
        auto words = [&](int64_t parity) {
          SmallVector<int64_t> mask;
          for (int64_t j = parity; j < blockBytes; j += 2)
            mask.push_back(j);
          Value half = vector::ShuffleOp::create(b, loc, p, p, mask);
          Value word = arith::ShRUIOp::create(
              b, loc, half,
              splat(b, loc, vec(blockBytes / 2, i32), b.getI32IntegerAttr(1)));
          return Value(arith::TruncIOp::create(
              b, loc, vec(blockBytes / 2, i16), word));
        };
        evenWords.push_back(words(0));
        oddWords.push_back(words(1));
        // Byte j picks byte perm[j] & 1 of its word, which a word permute
        // left at the even position of j's 16-byte lane: PSHUFB index
        // (j mod 16 rounded down to even) + (perm[j] & 1).
        SmallVector<int8_t> base;
        for (int64_t j = 0; j < blockBytes; ++j)
          base.push_back(int8_t((j % kQuantizedChunk) & ~int64_t(1)));
        auto bytesType = vec(blockBytes, i8);
        Value low = arith::TruncIOp::create(
            b, loc, bytesType,
            arith::AndIOp::create(
                b, loc, p,
                splat(b, loc, vec(blockBytes, i32), b.getI32IntegerAttr(1))));
        picks.push_back(arith::AddIOp::create(
            b, loc, low,
            arith::ConstantOp::create(
                b, loc, bytesType,
                DenseElementsAttr::get(bytesType, ArrayRef<int8_t>(base)))));
      }
    } else {
      auto i8x16 = vec(kQuantizedChunk, i8), i32x16 = vec(kQuantizedChunk, i32);
      for (int64_t o = 0; o < gs / kQuantizedChunk; ++o)
        chunkPerm.push_back(arith::TruncIOp::create(
            b, loc, i8x16,
            vector::LoadOp::create(b, loc, i32x16, op.getPermutation(),
                                   cIndex(b, loc, o * kQuantizedChunk))));
    }
    std::unique_ptr<GroupPermuter> permuter;
    if (!wordPermute)
      permuter = target.createGroupPermuter(b, loc, op.getPermutation(),
                                            chunkPerm, gs);

    QuantizeLoops loops(b, loc, op, gs);
    Value g = loops.g, kBase = loops.kBase;
    SmallVector<Value> isrLeft;
    for (int64_t v = 0; v < vectors; ++v)
      isrLeft.push_back(arith::MulFOp::create(
          b, loc, loadFloats(b, loc, op.getInputScaleRecip(), loops.at(v * lanes)),
          left[v]));

    Value row = loops.beginRows();
    SmallVector<Value> w;
    for (int64_t v = 0; v < vectors; ++v) {
      Value x = loadFloats(b, loc, op.getX(), {row, loops.at(v * lanes)});
      if (Value up = op.getUp())
        x = gatedInput(b, loc, *op.getGating(), x,
                      loadFloats(b, loc, up, {row, loops.at(v * lanes)}));
      w.push_back(arith::MulFOp::create(b, loc, x, isrLeft[v]));
    }
    // The stages in the contract's order: h = 1, 2, ... inside vectors, then
    // between them.
    for (int64_t h = 1, stage = 0; h < std::min(lanes, gs); h *= 2, ++stage) {
      SmallVector<int64_t> swap;
      for (int64_t i = 0; i < lanes; ++i)
        swap.push_back(i ^ h);
      for (Value &v : w) {
        Value t = vector::ShuffleOp::create(b, loc, v, v, swap);
        v = math::FmaOp::create(b, loc, v, stageSigns[stage], t);
      }
    }
    butterflyStages(b, loc, w);
    // max|w| as an integer max of the magnitudes' bits: for floats without
    // a sign bit the order of the bits is the order of the values, and a
    // NaN is above every number, so a NaN still wins as with maximumf; one
    // instruction per vector where x86 needs six for maximumf's NaN rule.
    Value columnMax;
    Value magnitudeBits = splat(b, loc, i32v, b.getI32IntegerAttr(0x7fffffff));
    for (Value &v : w) {
      v = arith::MulFOp::create(b, loc, v, invSqrt);
      Value magnitude = arith::AndIOp::create(
          b, loc, vector::BitCastOp::create(b, loc, i32v, v), magnitudeBits);
      columnMax = columnMax ? Value(arith::MaxSIOp::create(b, loc, columnMax,
                                                           magnitude))
                            : Value(magnitude);
    }
    Value maxAbs = arith::BitcastOp::create(
        b, loc, f32,
        vector::ReductionOp::create(b, loc, vector::CombiningKind::MAXSI,
                                    columnMax));
    Value scale =
        storeGroupScale(b, loc, maxAbs, op.getActScales(), row, g);

    // |w / scale| <= 127 * (1 + 2^-23) for every finite w: rounding first
    // and saturating the integer gives the contract's clamp.
    //
    // The quotients RN(w / scale) without a vector division, which costs
    // several times a multiply on x86 and bounds this loop: with the
    // correctly rounded reciprocal y = RN(1 / scale), q = RN(w * y) is within
    // an ulp of w / scale, the residual w - scale * q is exact in one FMA,
    // and RN(q + residual * y) is the correctly rounded quotient (Markstein's
    // theorem; no underflow matters: a quotient small enough for that rounds
    // to 0 either way). An infinite scale (an infinite input) would make the
    // residual NaN where the division gives 0, and a NaN scale makes every
    // quotient NaN either way: such a group divides.
    auto toInts = [&](Value quotient) {
      if (avx512) {
        // Every lane (mask all ones) to nearest even, exceptions
        // suppressed (VCVTPS2DQ's rounding control {rn-sae}: 8).
        Value zeros = splat(b, loc, i32v, b.getI32IntegerAttr(0));
        Value allLanes =
            LLVM::ConstantOp::create(b, loc, b.getI16Type(), b.getI16IntegerAttr(-1));
        return Value(cq4p_intr::X86Avx512MaskCvtps2dq512Op::create(
            b, loc, i32v, quotient, zeros, allLanes, /*rounding=*/8));
      }
      return Value(arith::FPToSIOp::create(
          b, loc, i32v, math::RoundEvenOp::create(b, loc, quotient)));
    };
    Value scales = vector::BroadcastOp::create(b, loc, f32v, scale);
    Value finite = arith::CmpFOp::create(
        b, loc, arith::CmpFPredicate::OLT, scale,
        arith::ConstantOp::create(
            b, loc, b.getF32FloatAttr(std::numeric_limits<float>::infinity())));
    SmallVector<Type> intTypes(w.size(), i32v);
    auto quotients = scf::IfOp::create(b, loc, intTypes, finite, /*withElse=*/true);
    {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(quotients.thenBlock());
      Value reciprocals = vector::BroadcastOp::create(
          b, loc, f32v,
          arith::DivFOp::create(
              b, loc, arith::ConstantOp::create(b, loc, b.getF32FloatAttr(1.0f)),
              scale));
      Value negativeScales = arith::NegFOp::create(b, loc, scales);
      SmallVector<Value> refined;
      for (Value v : w) {
        Value q = arith::MulFOp::create(b, loc, v, reciprocals);
        Value residual = math::FmaOp::create(b, loc, negativeScales, q, v);
        refined.push_back(
            toInts(math::FmaOp::create(b, loc, residual, reciprocals, q)));
      }
      scf::YieldOp::create(b, loc, refined);
      b.setInsertionPointToStart(quotients.elseBlock());
      SmallVector<Value> divided;
      for (Value v : w)
        divided.push_back(toInts(arith::DivFOp::create(b, loc, v, scales)));
      scf::YieldOp::create(b, loc, divided);
    }
    SmallVector<Value> ints(quotients.getResults().begin(),
                            quotients.getResults().end());
    int64_t perBlock = blockBytes / lanes;
    Value lowest = splat(b, loc, vec(blockBytes, i32), b.getI32IntegerAttr(-128));
    Value highest = splat(b, loc, vec(blockBytes, i32), b.getI32IntegerAttr(127));
    SmallVector<Value> natural;
    for (int64_t o = 0; o < blocks; ++o) {
      ArrayRef<Value> parts = ArrayRef<Value>(ints).slice(o * perBlock, perBlock);
      Value bytes;
      if (packed) {
        auto words = vec(32, i16);
        Value low =
            cq4p_intr::X86Avx512Packssdw512Op::create(b, loc, words, parts[0], parts[1]);
        Value high =
            cq4p_intr::X86Avx512Packssdw512Op::create(b, loc, words, parts[2], parts[3]);
        bytes = cq4p_intr::X86Avx512Packsswb512Op::create(b, loc, vec(64, i8), low, high);
      } else {
        Value block = concatVectors(b, loc, parts);
        block = arith::MinSIOp::create(
            b, loc, arith::MaxSIOp::create(b, loc, block, lowest), highest);
        bytes = arith::TruncIOp::create(b, loc, vec(blockBytes, i8), block);
      }
      natural.push_back(arith::SelectOp::create(
          b, loc, negate[o], arith::SubIOp::create(b, loc, zeroBytes, bytes),
          bytes));
    }
    if (permuter) {
      permuter->store(natural, op.getAct(), row, kBase);
    } else {
      storeWordPermuted(b, loc, natural, evenWords, oddWords, picks, op.getAct(),
                        row, kBase);
    }
    rewriter.eraseOp(op);
    return success();
  }

  /// `memref`'s `lanes` elements at `indices`, as fp32.
  Value loadFloats(OpBuilder &b, Location loc, Value memref,
                   ValueRange indices) const {
    Type element = cast<MemRefType>(memref.getType()).getElementType();
    Value v = vector::LoadOp::create(b, loc, VectorType::get({lanes}, element),
                                     memref, indices);
    auto f32v = VectorType::get({lanes}, b.getF32Type());
    if (element.isF16())
      return arith::ExtFOp::create(b, loc, f32v, v);
    if (element.isInteger(8))
      return arith::SIToFPOp::create(b, loc, f32v, v);
    return v;
  }

  /// The butterfly stages between whole vectors, in increasing distance.
  static void butterflyStages(OpBuilder &b, Location loc,
                              MutableArrayRef<Value> w) {
    for (size_t distance = 1; distance < w.size(); distance *= 2)
      butterflies(b, loc, w, distance);
  }

  /// act[k0 + j] = natural[perm[j]] by word permutes over the whole group
  /// (one or two blocks of up to 64 bytes) and a byte pick.
  void storeWordPermuted(OpBuilder &b, Location loc, ArrayRef<Value> natural,
                         ArrayRef<Value> evenWords, ArrayRef<Value> oddWords,
                         ArrayRef<Value> picks, Value act, Value row,
                         Value kBase) const {
    int64_t bytes = cast<VectorType>(natural.front().getType()).getNumElements();
    auto wordsType = VectorType::get({bytes / 2}, b.getI16Type());
    auto bytesType = VectorType::get({bytes}, b.getI8Type());
    SmallVector<Value> tables;
    for (Value block : natural)
      tables.push_back(vector::BitCastOp::create(b, loc, wordsType, block));
    // Word permutation (VPERMW, or VPERMI2W across two tables) and per
    // 128-bit lane byte lookup (PSHUFB) at the register width.
    auto permute = [&](Value index) {
      Value words;
      if (tables.size() == 2)
        words = cq4p_intr::X86Avx512Vpermi2varHi512Op::create(
            b, loc, wordsType, tables[0], index, tables[1]);
      else if (bytes == 64)
        words = cq4p_intr::X86Avx512PermvarHi512Op::create(b, loc, wordsType,
                                                           tables[0], index);
      else if (bytes == 32)
        words = cq4p_intr::X86Avx512PermvarHi256Op::create(b, loc, wordsType,
                                                           tables[0], index);
      else
        words = cq4p_intr::X86Avx512PermvarHi128Op::create(b, loc, wordsType,
                                                           tables[0], index);
      return Value(vector::BitCastOp::create(b, loc, bytesType, words));
    };
    auto pshufb = [&](Value table, Value index) -> Value {
      if (bytes == 64)
        return cq4p_intr::X86Avx512PshufB512Op::create(b, loc, bytesType, table, index);
      if (bytes == 32)
        return cq4p_intr::X86Avx2PshufBOp::create(b, loc, bytesType, table, index);
      return cq4p_intr::X86Ssse3PshufB128Op::create(b, loc, bytesType, table, index);
    };
    SmallVector<bool> odd;
    for (int64_t j = 0; j < bytes; ++j)
      odd.push_back(j % 2);
    auto maskType = VectorType::get({bytes}, b.getI1Type());
    Value oddMask = arith::ConstantOp::create(
        b, loc, maskType, DenseElementsAttr::get(maskType, ArrayRef<bool>(odd)));
    for (size_t o = 0; o < natural.size(); ++o) {
      Value even = pshufb(permute(evenWords[o]), picks[o]);
      Value oddBytes = pshufb(permute(oddWords[o]), picks[o]);
      Value out = arith::SelectOp::create(b, loc, oddMask, oddBytes, even);
      vector::StoreOp::create(
          b, loc, out, act,
          ValueRange{row, arith::AddIOp::create(b, loc, kBase,
                                                cIndex(b, loc, o * bytes))});
    }
  }

  const KernelTargetInfo &target;
  int64_t lanes;
  bool avx512;
};

} // namespace

void mlir::cq4p::populateWideQuantizePatterns(RewritePatternSet &patterns,
                                               const KernelTargetInfo &target,
                                               int64_t lanes, bool avx512) {
  patterns.add<WideQuantizeLowering>(patterns.getContext(), target, lanes,
                                     avx512);
}

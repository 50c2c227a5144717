//===- NeonTargetInfo.cpp - the kernel lowering's AArch64 NEON answers ----===//
//
// NEON's KernelTargetInfo: 4-lane fp32 vectors in 32 q registers; the
// panel dot's codebook lookup as TBL and its 4-way dot as SDOT, and a
// one-row panel dot of its own that loads with LD2 and four-register LD1
// (emitNeonGemvLoop); the quantization's rounding as FCVTNS and SQXTN and
// its output permutation as TBL/TBX over four 16-byte chunks at a time;
// attention as 4-lane code (NeonAttention.cpp). SME2 takes the same answers
// for every op its streaming leaves leave to NEON.
//
//===----------------------------------------------------------------------===//

#include "NeonAttention.h"
#include "KernelLowering/ActivationTransform.h"
#include "KernelLowering/LoweringHelpers.h"
#include "KernelLowering/PairZip.h"

#include "cq4p/Conversion/CQ4PToNeon/CQ4PToNeon.h"
#include "cq4p/Dialect/CQ4PIntr/IR/CQ4PIntr.h"
#include "cq4p/format.h"

#include "mlir/Dialect/ArmNeon/ArmNeonDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"

#include <type_traits>

using namespace mlir;
using namespace mlir::cq4p;

namespace {

/// The address of the i8 element memref[indices], as an LLVM pointer.
Value bytePointer(OpBuilder &b, Location loc, Value memref, ValueRange indices) {
  auto metadata = memref::ExtractStridedMetadataOp::create(b, loc, memref);
  Value linear = metadata.getOffset();
  for (auto [index, stride] : llvm::zip_equal(indices, metadata.getStrides()))
    linear = arith::AddIOp::create(b, loc, linear,
                                   arith::MulIOp::create(b, loc, index, stride));
  Value base = memref::ExtractAlignedPointerAsIndexOp::create(b, loc, memref);
  Value address = arith::IndexCastUIOp::create(
      b, loc, b.getI64Type(), arith::AddIOp::create(b, loc, base, linear));
  return LLVM::IntToPtrOp::create(b, loc, LLVM::LLVMPointerType::get(b.getContext()),
                                  address);
}

/// `value` itself, which LLVM can no longer see through (cq4p_intr.opaque:
/// no instruction). See emitNeonGemvLoop for why the GEMV's address chain
/// needs that.
Value opaqueValue(OpBuilder &b, Location loc, Value value) {
  return cq4p_intr::OpaqueOp::create(b, loc, value.getType(), value);
}

/// The vectors of an AArch64 NEON structure load at `pointer`, LD1x4 (64
/// bytes into four registers) or LD2 (32 bytes de-interleaved into even and
/// odd bytes).
template <typename LoadOp>
SmallVector<Value> neonStructLoad(OpBuilder &b, Location loc, Value pointer) {
  constexpr int64_t count = std::is_same_v<LoadOp, cq4p_intr::NeonLd1x4Op> ? 4 : 2;
  auto i8x16 = VectorType::get({16}, b.getI8Type());
  auto structType = LLVM::LLVMStructType::getLiteral(
      b.getContext(), SmallVector<Type>(count, i8x16));
  Value loaded = LoadOp::create(b, loc, structType, pointer);
  SmallVector<Value> vectors;
  for (int64_t i = 0; i < count; ++i)
    vectors.push_back(LLVM::ExtractValueOp::create(b, loc, loaded, i));
  return vectors;
}

/// The GEMV's pair loop (one row, all 64 channels in 16
/// accumulators), with the loads of the hand-written kernels: per 32 K
/// values one LD2 brings the activations already split into even and odd
/// bytes, and each 64 bytes of panel one four-register LD1 that advances
/// its pointer (post-index): 17 loads and no address arithmetic per 2048
/// weights, where 16-byte loads take 33 LDPs and adds. The four registers
/// of kg-block t and of kg-block t+1 (128 bytes further on) are taken
/// together, so two pointers walk the panel, each stepping 64 then 192
/// bytes, and 8 weight registers, 16 accumulators, the activations and
/// the unpack's temporaries fit the 32 vector registers.
///
/// A four-register LD1 has no immediate offset, so the pointers must stay
/// chains of post-indexed steps through LLVM's optimizers: with constant
/// steps instruction selection folds them into offsets from one base
/// (then each load needs an add), and loop strength reduction rebuilds
/// any pointer recurrence it can analyze the same way. So the steps are
/// opaque registers and the loop-carried pointers pass through
/// cq4p_intr.opaque (opaqueValue): the selector then turns each add into
/// its load's post-index.
void emitNeonGemvLoop(OpBuilder &b, Location loc, PanelDotOp op,
                      DotEmitter &emit, Value table, Value lowMask,
                      Value four, Value zeroAcc, Value groupBase,
                      int64_t groupSize) {
  constexpr int64_t kAccs = CQ4P_PANEL_CHANNELS / 4;
  constexpr int64_t kKgBytes = CQ4P_KG_BLOCK_BYTES;
  static_assert(CQ4P_PANEL_CHANNELS == 64 && kKgBytes == 128,
                "the loop's loads assume 128-byte kg-blocks of 64 channels");
  auto i64 = b.getI64Type();
  auto i8 = b.getI8Type();
  auto ptrType = LLVM::LLVMPointerType::get(b.getContext());
  Value c0 = cIndex(b, loc, 0);
  auto stepOf = [&](int64_t bytes) {
    return opaqueValue(
        b, loc, LLVM::ConstantOp::create(b, loc, i64, b.getI64IntegerAttr(bytes)));
  };
  // Within a pair of kg-blocks, to the second half of the block; from
  // there to the next pair.
  Value halfStep = stepOf(kKgBytes / 2), pairStep = stepOf(3 * kKgBytes / 2);
  Value panelA =
      bytePointer(b, loc, op.getPanels(), ValueRange{op.getSuperBlock(), op.getGroup(), c0, c0});
  Value panelB = LLVM::GEPOp::create(
      b, loc, ptrType, i8, panelA,
      ValueRange{LLVM::ConstantOp::create(b, loc, i64, b.getI64IntegerAttr(kKgBytes))});
  Value actPointer =
      bytePointer(b, loc, op.getAct(), ValueRange{op.getRow(), groupBase});
  SmallVector<Value> inits(kAccs, zeroAcc);
  inits.append({panelA, panelB, actPointer});
  auto kLoop = forKSteps(b, loc, groupSize, inits,
                         [&](OpBuilder &b, Value, SmallVector<Value> carried) {
    SmallVector<Value> accs(carried.begin(), carried.begin() + kAccs);
    Value pointers[2] = {carried[kAccs], carried[kAccs + 1]};
    Value act = carried[kAccs + 2];
    SmallVector<Value> split = neonStructLoad<cq4p_intr::NeonLd2Op>(b, loc, act);
    auto i32x4 = VectorType::get({4}, b.getI32Type());
    Value evens = bitcast(b, loc, split[0], i32x4);
    Value odds = bitcast(b, loc, split[1], i32x4);
    for (int64_t p = 0; p < 4; ++p) {
      auto lane = [&](Value v) {
        return bitcast(b, loc, shuffle(b, loc, v, v, {p, p, p, p}),
                       VectorType::get({16}, b.getI8Type()));
      };
      Value evenLane = lane(evens), oddLane = lane(odds);
      for (int64_t quarter = 0; quarter < 2; ++quarter) {
        // Slices 4 quarter .. 4 quarter + 3 of kg-blocks 2p and 2p + 1.
        SmallVector<Value> slices[2];
        for (int64_t t = 0; t < 2; ++t) {
          slices[t] = neonStructLoad<cq4p_intr::NeonLd1x4Op>(b, loc, pointers[t]);
          pointers[t] = LLVM::GEPOp::create(b, loc, ptrType, i8, pointers[t],
                                            ValueRange{quarter == 0 ? halfStep : pairStep});
        }
        for (int64_t s = 0; s < 4; ++s) {
          int64_t slice = 4 * quarter + s;
          emit.unpackPair(table, lowMask, four, slices[0][s], slices[1][s],
                          [&](int64_t half, Value wLow, Value wHigh) {
            Value &acc = accs[2 * slice + half];
            acc = emit.dot(acc, wLow, evenLane);
            acc = emit.dot(acc, wHigh, oddLane);
          });
        }
      }
    }
    SmallVector<Value> results = accs;
    results.push_back(opaqueValue(b, loc, pointers[0]));
    results.push_back(opaqueValue(b, loc, pointers[1]));
    results.push_back(opaqueValue(
        b, loc,
        LLVM::GEPOp::create(b, loc, ptrType, i8, act,
                            ValueRange{LLVM::ConstantOp::create(
                                b, loc, i64, b.getI64IntegerAttr(32))})));
    return results;
  });
  for (int64_t q = 0; q < kAccs; ++q)
    vector::StoreOp::create(b, loc, kLoop.getResult(q), op.getPartials(),
                            ValueRange{c0, cIndex(b, loc, 4 * q)});
}

/// The output permutation by TBL/TBX over up to 64 bytes: table t answers
/// perm - 64 t when it is in [0, 64) and leaves the lane alone otherwise
/// (the wrapped byte is >= 64).
class NeonTablePermuter : public TablePermuter {
public:
  NeonTablePermuter(OpBuilder &b, Location loc, ArrayRef<Value> permBytes,
                    int64_t gs)
      : TablePermuter(b, loc, gs) {
    auto i8x16 = VectorType::get({kQuantizedChunk}, b.getI8Type());
    for (Value p : permBytes)
      for (int64_t t = 0; t * 64 < gs; ++t)
        indices.push_back(arith::SubIOp::create(
            b, loc, p, splat(b, loc, i8x16, b.getI8IntegerAttr(64 * t))));
  }

  void store(ArrayRef<Value> natural, Value act, Value row,
             Value kBase) override {
    auto i8x16 = VectorType::get({kQuantizedChunk}, b.getI8Type());
    int64_t chunks = gs / kQuantizedChunk;
    int64_t tables = std::max<int64_t>(1, gs / 64);
    for (int64_t o = 0; o < chunks; ++o) {
      Value out;
      for (int64_t t = 0; t < tables; ++t) {
        Value idx = indices[o * tables + t];
        if (gs == 32) {
          out = cq4p_intr::NeonTbl2Op::create(b, loc, i8x16, natural[0],
                                              natural[1], idx);
          continue;
        }
        ArrayRef<Value> table = natural.slice(4 * t, 4);
        out = out ? Value(cq4p_intr::NeonTbx4Op::create(b, loc, i8x16, out,
                                                        table[0], table[1],
                                                        table[2], table[3], idx))
                  : Value(cq4p_intr::NeonTbl4Op::create(b, loc, i8x16, table[0],
                                                        table[1], table[2],
                                                        table[3], idx));
      }
      storeChunks(out, act, row, kBase, o);
    }
  }
};

class NeonKernelTargetInfo : public KernelTargetInfo {
public:
  StrategyAttr selectStrategy(Operation *op) const override {
    // A GEMM's row tiles packed once per call for the pair loop (each 8 K
    // values' even bytes, then the odd ones): one 16-byte load per row
    // serves two pairs of kg-blocks. One row has no tiles to pack.
    auto matmul = dyn_cast<PanelMatmulOp>(op);
    if (!matmul || cast<MemRefType>(matmul.getAct().getType()).getDimSize(0) == 1)
      return {};
    return StrategyAttr::get(op->getContext(), /*tileRows=*/0, /*minTileRows=*/0,
                             /*embeddingRows=*/0, /*embeddingMinRows=*/0,
                             /*superBlockPartials=*/false, /*pairedTiles=*/true);
  }

  RotationBlocking rotationBlocking() const override {
    // 32 q registers: 16 sums, up to 8 converted rotation vectors and the
    // rows' values. One row sums 32 outputs: per rotation row 4 LDR of 8
    // fp16 (LLVM addresses the span's rows from one register, beyond LDP's
    // offsets), 8 FCVTL/FCVTL2 and 8 FMLA by element; with the sums'
    // reloads once per span of 32 rotation rows, 0.625 instructions per
    // multiply-add (bench/rotation-results.md).
    return {4, 4, 16, 8, 32, true};
  }

  bool emitOneRowPanelDot(OpBuilder &b, Location loc, PanelDotOp op,
                          DotEmitter &emit,
                          const PairZipValues &values) const override {
    // The structure loads walk the panel and the activation row as
    // contiguous bytes: identity layouts only (any other takes the shared
    // loop, which indexes the memrefs).
    if (!cast<MemRefType>(op.getPanels().getType()).getLayout().isIdentity() ||
        !cast<MemRefType>(op.getAct().getType()).getLayout().isIdentity())
      return false;
    emitNeonGemvLoop(b, loc, op, emit, values.table, values.lowMask,
                     values.four, values.zeroAcc, values.groupBase,
                     values.groupSize);
    return true;
  }

  Value lookup(OpBuilder &b, Location loc, Value table,
               Value index) const override {
    return cq4p_intr::NeonTbl1Op::create(
        b, loc, VectorType::get({16}, b.getI8Type()), table, index);
  }

  Value dot(OpBuilder &b, Location loc, Value acc, Value lhs,
            Value rhs) const override {
    return arm_neon::SdotOp::create(
        b, loc, VectorType::get({4}, b.getI32Type()), acc, lhs, rhs);
  }

  Value roundToBytes(OpBuilder &b, Location loc,
                     ArrayRef<Value> q) const override {
    // FCVTNS rounds half to even, SQXTN saturates: one instruction per
    // piece and three narrowing instructions per 16 bytes.
    auto vec = [&](int64_t n, Type element) { return VectorType::get({n}, element); };
    auto concat = [&](Value lhs, Value rhs) {
      return concatVectors(b, loc, {lhs, rhs});
    };
    auto narrow = [&](Type type, Value operand) -> Value {
      return cq4p_intr::NeonSqxtnOp::create(b, loc, type, operand);
    };
    Type i8 = b.getI8Type(), i16 = b.getI16Type(), i32 = b.getI32Type();
    SmallVector<Value> halves;
    for (Value piece : q)
      halves.push_back(narrow(
          vec(4, i16), cq4p_intr::NeonFcvtnsOp::create(b, loc, vec(4, i32), piece)));
    Value lo = narrow(vec(8, i8), concat(halves[0], halves[1]));
    Value hi = narrow(vec(8, i8), concat(halves[2], halves[3]));
    return concat(lo, hi);
  }

  std::unique_ptr<GroupPermuter>
  createGroupPermuter(OpBuilder &b, Location loc, Value permutation,
                      ArrayRef<Value> permBytes, int64_t gs) const override {
    return std::make_unique<NeonTablePermuter>(b, loc, permBytes, gs);
  }

  bool emitAttention(OpBuilder &b, AttentionOp op) const override {
    if (!hasNeonAttention(op))
      return false;
    emitNeonAttention(b, op);
    return true;
  }
};

} // namespace

const KernelTargetInfo &mlir::cq4p::getNeonKernelTargetInfo() {
  static const NeonKernelTargetInfo info;
  return info;
}

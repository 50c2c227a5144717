//===- CQ4PToArmSME.cpp - convert-cq4p-to-arm-sme -------------------------===//
//
// SME2 computes a super-block's int32 partials in a streaming leaf:
//
//   cq4p.panel_partials %panels, %cb, %act, %partials, %sb, %row
//
// becomes `func.call @<kernel>_sme_row_partials(...)` (`_sme_rows<R>_partials`
// for R > 1 unpacked rows, `_sme_tile_partials` for a packed tile), a
// function marked `cq4p.sme_leaf` (cq4p-export-kernels gives it
// locally-streaming, new-ZA and new-ZT0 attributes once it is an llvm.func)
// whose body for R unpacked rows is, at a 512-bit streaming vector length:
//
//   ZT0 <- the int8 codebook (entry i's low byte)       ldr zt0
//   for each chunk of 16 / R groups:
//     zero ZA
//     for g in chunk, slices s_r = (g % (16 / R)) R + r:
//       for each 4 kg-blocks: a_r = ld1rq(act[row + r, g*gs + 16q ..])
//         for t in 0..3 (kg-block 4q+t):
//           {z0,z1} = luti4.x2(panels[sb, g, kg, 0:64])   channels 0-31
//           {z2,z3} = luti4.x2(panels[sb, g, kg, 64:128]) channels 32-63
//           za.s[s_r, vgx4] += {z0..z3} . a_r[t], r < R   sdot (lane t)
//     for g in chunk: partials[g, r, 16i:16i+16] <- za[s_r + 16i], i < 4
//
// Each multi-vector SDOT updates the ZA vectors s, s+16, s+32, s+48, which
// hold the 16-channel blocks of the super-block in order, so `str za`
// writes the partials linearly. The weights are loaded and expanded once
// for all R rows: per kg-block 2 LUTI4 and R SDOT.
//
// When the partials op is followed by the loop that rescales each of its
// groups in order (cq4p-tile-super-blocks emits that and records it on the
// op: `rescale = #cq4p.partials_rescale<group_loop>`), the leaf
// (`<kernel>_sme_row_matmul`, `_sme_rows<R>_matmul`, `_sme_tile_matmul` for
// 16-row tiles) does the rescale itself, straight out of ZA, and the
// partials never reach memory: per group, the 64 partials of a row (one
// multi-vector read of a row's ZA slice, four MOVA of a tile row for a
// tile), one
// SCVTF x4, FMUL by the activation scale, FMUL by the norms (loaded once
// per group), FADD into the fp32 accumulators (four-vector load and
// store). That is cq4p.rescale's order of fp32 operations exactly, so the
// results equal the NEON rescale's bit for bit.
//
// The GEMM leaf's accumulators are a [16][64] view with a dynamic row
// stride: y itself for a whole tile. cq4p.pack_activation_tile becomes a
// streaming leaf of its own (`<kernel>_sme_pack_tile`, once per tile): the
// packed tile is the transpose of the rows' 32-bit words, loaded as
// horizontal slices of ZA tile 0 and stored from its vertical slices.
//
// The orthogonal rotations' K x K fp16 products (the lm_head's transform,
// cq4p.rotate_quantize_activations, and the embedding row decode,
// cq4p.decode_embedding) run in a streaming leaf per kernel,
// `<kernel>_sme_rotation`, that the shared lowering calls where it would
// emit its vector loops (the op carries the leaf as `cq4p.sme_rotation`):
// ZA holds the sums of 1,024 outputs (eight rows of 128 ... one row of
// 1,024), each 128 outputs of a rotation row one multi-vector LD1H, the
// even outputs in one ZA vector and the odd in the next (interleaved back
// when read out). The lm_head's fp32 values: FCVT and FCVTLT widen the
// fp16 vectors, shared by the pass's rows, and two multi-vector FMLA by
// lane add them per row. The embedding's fp16 codebook levels: one
// multi-vector FMLAL by lane per row (exact fp16 products). Each sum is a
// chain of fused multiply-adds in index order, as in the vector code, so
// NEON and SME2 give the same bits.
//
// The embedding's prompt rows (a chunk of at least 32 of 64 rows) have a
// leaf of their own, `<kernel>_sme_embedding` (cq4p.sme_embedding_mopa on
// the op), which decodes them from the panels itself: FP32 outer products
// into the four 32-bit tiles, 64 rows x 16 outputs, for which each c's 64
// values must be one vector over rows. The rows' 4-bit indices are
// transposed through ZA as a byte tile (horizontal slices in, vertical
// out), then per c one four-vector LUTI4 from ZT0 (the 16 levels as fp32)
// yields the 64 rows' levels and four FMOPA add their products with
// rotation_t's 16 widened values: 1,024 exact products per 4 FMOPA against
// 128 per FMLAL, the same chain of adds (see buildEmbeddingMopaLeafBody).
//
// With the pass's fmlal-rotation option (the default), the lm_head's leaf
// takes fp16 values as the embedding's does: the shared lowering rounds
// each row's a = x * isr to fp16 after an exact power-of-two scaling and
// scales the sums back, and one FMLAL per 128 outputs and row replaces the
// FCVT, FCVTLT and two FMLA of the fp32 path (whose widened vectors four
// rows share, which a one-row decode step cannot use). Those sums are not
// NEON's: docs/MODEL.md gives what stays bit-identical and the error.
//
// ZA is zeroed, accumulated into by outer products, loaded by LD1W and read
// by `str za` and single-vector MOVA through the ArmSME dialect's typed
// operations (`arm_sme.intr.zero`, `.smopa.wide`, `.mopa`, `.ld1w.horiz`,
// `.st1w.horiz`, `.str`, `.read.horiz`, `.read.vert`, `.write.horiz`),
// translated to the same LLVM intrinsics. ZT0 (LDR, LUTI4), the
// multi-vector ZA operations (SDOT, MOVA), SVE2.1/SME2 loads and stores
// with predicates-as-counters, LD1RQ, FCVT/FCVTLT, the multi-vector FMLAL
// and the multi-vector SCVTF have no
// operation in the ArmSME or ArmSVE dialects: each is a typed cq4p_intr
// operation (CQ4PIntr.td) in one LeafBuilder helper.
//
//===----------------------------------------------------------------------===//

#include "Addresses.h"
#include "DecodeAttention.h"
#include "PrefillAttention.h"
#include "StreamingQuantize.h"
#include "Sme2Strategy.h"

#include "cq4p/Codegen/EmitBuilder.h"
#include "cq4p/Conversion/Passes.h"
#include "cq4p/Dialect/CQ4P/IR/CQ4P.h"
#include "cq4p/Dialect/CQ4PIntr/IR/CQ4PIntr.h"
#include "cq4p/format.h"

#include "mlir/Dialect/ArmSME/IR/ArmSME.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/SymbolTable.h"

#include <algorithm>

namespace mlir::cq4p {
#define GEN_PASS_DEF_CONVERTCQ4PTOARMSME
#include "cq4p/Conversion/Passes.h.inc"
} // namespace mlir::cq4p

using namespace mlir;
using namespace mlir::cq4p;

namespace {

constexpr int64_t kStreamingBytes = 64;  // SVL 512: one Z register
constexpr int64_t kZaSlices = 16;        // ZA vector groups of 4 at SVL 512
constexpr int64_t kMaxLeafRows = 8;      // unpacked rows: slice offsets 0-7

/// Builds a leaf's operations: ArmSME dialect operations where it has them,
/// a cq4p_intr operation in one helper each where neither it nor the ArmSVE
/// dialect does (as of MLIR 22).
class LeafBuilder : public EmitBuilder {
public:
  LeafBuilder(OpBuilder &b, Location loc)
      : EmitBuilder(b, loc, VectorType::get({4}, b.getF32Type(), {true})) {
    ptrType = LLVM::LLVMPointerType::get(b.getContext());
    nxv16i8 = VectorType::get({16}, b.getI8Type(), {true});
  }

  /// The address of a memref's first element.
  Value base(Value memref) { return sme::alignedBase(b, loc, memref); }
  /// base + byteOffset (an index).
  Value offset(Value basePtr, Value byteOffset) {
    return sme::byteOffset(b, loc, basePtr, byteOffset);
  }

  /// base + `vectors` streaming vectors: a scalable offset, which LLVM can
  /// fold into the `[x, #n, mul vl]` addressing of SVE loads.
  Value vectorOffset(Value base, int64_t vectors) {
    return LLVM::GEPOp::create(b, loc, ptrType, nxv16i8, base,
                               ArrayRef<LLVM::GEPArg>{int32_t(vectors)});
  }

  VectorType nxv4f32() { return VectorType::get({4}, b.getF32Type(), {true}); }
  VectorType nxv4i32() { return VectorType::get({4}, b.getI32Type(), {true}); }
  VectorType nxv8f16() { return VectorType::get({8}, b.getF16Type(), {true}); }

  /// The inactive lanes' values of predicated operations whose predicate
  /// is all true.
  Value undefinedFloats() {
    if (!undefinedF32)
      undefinedF32 = LLVM::PoisonOp::create(b, loc, nxv4f32());
    return undefinedF32;
  }

  /// An all-true predicate of `lanes` x vscale lanes (PTRUE).
  Value allTrue(int64_t lanes) {
    auto type = VectorType::get({lanes}, b.getI1Type(), {true});
    return arith::ConstantOp::create(b, loc, DenseElementsAttr::get(type, true));
  }

  //===--------------------------------------------------------------------===//
  // ArmSME dialect operations.
  //===--------------------------------------------------------------------===//

  /// ZA <- 0: the mask names all eight 64-bit tiles, which cover ZA.
  void zeroZa() { arm_sme::aarch64_sme_zero::create(b, loc, uint32_t(0xff)); }

  /// `str za[vectorIndex, #offset], [address, #offset, mul vl]`: ZA array
  /// vector vectorIndex + offset to address + offset streaming vectors.
  void storeZaVector(Value vectorIndex, Value address, int64_t offset) {
    arm_sme::aarch64_sme_str::create(b, loc, vectorIndex, address, i32(offset));
  }

  /// Horizontal slice `slice` of the 32-bit tile za<tile>.s <- the 16
  /// words at `address`, zeros in the lanes `predicate` leaves out (LD1W).
  void loadTileRow(int64_t tile, int64_t slice, Value predicate, Value address) {
    arm_sme::aarch64_sme_ld1w_horiz::create(b, loc, predicate, address, uint32_t(tile),
                                            i32(slice));
  }

  /// za<tile>.s += lhs (x) rhs, 4-way outer products of int8 (SMOPA).
  void signedOuterProduct4Way(int64_t tile, Value predicate, Value lhs, Value rhs) {
    arm_sme::aarch64_sme_smopa_wide::create(b, loc, uint32_t(tile), predicate,
                                            predicate, lhs, rhs);
  }

  /// za<tile>.s += lhs (x) rhs, fp32 outer product (FMOPA).
  void floatOuterProduct(int64_t tile, Value predicate, Value lhs, Value rhs) {
    arm_sme::aarch64_sme_mopa::create(b, loc, uint32_t(tile), predicate, predicate,
                                      lhs, rhs);
  }

  /// Horizontal slice `slice` (a register) of the byte tile za0.b <-
  /// `bytes` (MOVA).
  void writeByteTileRow(Value slice, Value bytes) {
    arm_sme::aarch64_sme_write_horiz::create(b, loc, uint32_t(0), slice, allTrue(16),
                                             bytes);
  }

  /// Vertical slice `slice` (a register) of the byte tile za0.b: byte
  /// `slice` of each of its 64 rows (MOVA).
  Value readByteTileColumn(Value slice) {
    if (!undefinedBytes)
      undefinedBytes = LLVM::PoisonOp::create(b, loc, nxv16i8);
    return arm_sme::aarch64_sme_read_vert::create(b, loc, nxv16i8, undefinedBytes,
                                                  allTrue(16), uint32_t(0), slice);
  }

  /// Horizontal slice `slice` (a register) of the 32-bit tile za<tile>.s
  /// to the 16 words at `address` (ST1W).
  void storeTileRow(int64_t tile, Value slice, Value address) {
    arm_sme::aarch64_sme_st1w_horiz::create(b, loc, allTrue(4), address, uint32_t(tile),
                                            slice);
  }

  /// Horizontal slice `slice` of the 32-bit tile za<tile>.s (MOVA).
  Value readTileRow(int64_t tile, int64_t slice, Value predicate) {
    if (!undefinedWords)
      undefinedWords = LLVM::PoisonOp::create(b, loc, nxv4i32());
    return arm_sme::aarch64_sme_read_horiz::create(
        b, loc, nxv4i32(), undefinedWords, predicate, uint32_t(tile), i32(slice));
  }

  //===--------------------------------------------------------------------===//
  // What the ArmSME and ArmSVE dialects lack: cq4p_intr operations, one
  // helper each.
  //===--------------------------------------------------------------------===//

  /// ZT0 <- the 64 bytes at `table` (LDR ZT0; the dialects have no ZT0).
  void loadZt0(Value table) {
    cq4p_intr::SmeLdrZtOp::create(b, loc, /*zt=*/0, table);
  }

  /// `packed`'s 128 nibbles looked up in ZT0, nibble j to byte j of the
  /// pair (LUTI4 to two vectors; the dialects have no ZT0 lookups).
  std::pair<Value, Value> lookupPairInZt0(Value packed) {
    return unpackPair(cq4p_intr::SmeLuti4LaneZtX2Op::create(
        b, loc, pairType(nxv16i8), /*zt=*/0, packed, /*segment=*/0));
  }

  /// The 64 nibbles of half `segment` of `packed` looked up as the fp32
  /// entries of ZT0, nibble j to element j % 16 of vector j / 16 (LUTI4 to
  /// four vectors).
  SmallVector<Value> lookupQuadF32InZt0(Value packed, int64_t segment) {
    return unpack(cq4p_intr::SmeLuti4LaneZtX4Op::create(
        b, loc, quadType(nxv4f32()), /*zt=*/0, packed, uint32_t(segment)));
  }

  /// ZA array vectors slice + 16i, i < 4, += 4-way dot products of
  /// vectors[i] with the 4 bytes `lane` of each 128-bit segment of
  /// `activations` (multi-vector SDOT; the ArmSME dialect has no
  /// multi-vector ZA operations).
  void dotZaVectors4(Value slice, ArrayRef<Value> vectors, Value activations,
                     int64_t lane) {
    cq4p_intr::SmeSdotLaneZa32Vg1x4Op::create(b, loc, slice, vectors[0], vectors[1],
                                              vectors[2], vectors[3], activations,
                                              uint32_t(lane));
  }

  /// ZA array vectors slice + 16i, i < 4, += vectors[i] times the fp32
  /// element `lane` of each 128-bit segment of `values`, fused (multi-vector
  /// FMLA; the ArmSME dialect has no multi-vector ZA operations).
  void fmlaZaVectors4(Value slice, ArrayRef<Value> vectors, Value values,
                      int64_t lane) {
    cq4p_intr::SmeFmlaLaneVg1x4Op::create(b, loc, slice, vectors[0], vectors[1],
                                          vectors[2], vectors[3], values,
                                          uint32_t(lane));
  }

  /// The fp16 values of streaming half-vector `index` from `base` (16 at a
  /// 512-bit vector length), each widened to fp32: an extending LD1H into
  /// 32-bit lanes and an FCVT.
  Value loadHalvesAsF32(Value base, int64_t index) {
    auto halves = VectorType::get({4}, b.getF16Type(), {true});
    Value address = LLVM::GEPOp::create(b, loc, ptrType, halves, base,
                                        ArrayRef<LLVM::GEPArg>{int32_t(index)});
    Value loaded = LLVM::LoadOp::create(b, loc, halves, address, /*alignment=*/2);
    return LLVM::FPExtOp::create(b, loc, nxv4f32(), loaded);
  }

  /// ZA array vectors slice + 16i and slice + 16i + 1, i < 4, += the even
  /// and the odd fp16 elements of vectors[i] times the fp16 element `lane`
  /// of each 128-bit segment of `values`, exact products added with one
  /// rounding (multi-vector FMLAL; the ArmSME dialect has no multi-vector
  /// ZA operations).
  void fmlalZaPairs4(Value slice, ArrayRef<Value> vectors, Value values,
                     int64_t lane) {
    cq4p_intr::SmeFmlalLaneVg2x4Op::create(b, loc, slice, vectors[0], vectors[1],
                                           vectors[2], vectors[3], values,
                                           uint32_t(lane));
  }

  /// The even (FCVT) or odd (FCVTLT) fp16 elements of `halves` widened to
  /// fp32 (the ArmSVE dialect has neither).
  Value widenEvenHalves(Value halves) {
    return cq4p_intr::SveFcvtF32F16Op::create(b, loc, nxv4f32(), undefinedFloats(),
                                              allTrue(4), halves);
  }
  Value widenOddHalves(Value halves) {
    return cq4p_intr::SveFcvtltF32F16Op::create(b, loc, nxv4f32(), undefinedFloats(),
                                                allTrue(4), halves);
  }

  /// The 8 fp16 values at `address` in every 128-bit segment (LD1RQH).
  Value loadReplicatedHalves(Value address) {
    return LLVM::BitcastOp::create(b, loc, nxv8f16(),
                                   loadReplicatedQuadword(allTrue(16), address));
  }

  /// The four consecutive fp16 streaming vectors (256 bytes) at `address`
  /// (multi-vector LD1H).
  SmallVector<Value> loadQuadF16(Value address) {
    Value counter = allHalves();
    return unpack(
        cq4p_intr::SveLd1PnX4Op::create(b, loc, quadType(nxv8f16()), counter, address));
  }

  /// even[i] and odd[i] (int32 words holding fp32) to outputs 2i and 2i + 1
  /// at `address` (two vectors of fp32, ZIP1 and ZIP2 or ST2W).
  void storeInterleavedF32(Value even, Value odd, Value address) {
    auto asFloats = [&](Value words) -> Value {
      return LLVM::BitcastOp::create(b, loc, nxv4f32(), words);
    };
    Value both = vector::InterleaveOp::create(b, loc, asFloats(even), asFloats(odd));
    LLVM::StoreOp::create(b, loc, both, address, /*alignment=*/4);
  }

  /// The 4 fp32 values at `address` in every 128-bit segment (LD1RQ).
  Value loadReplicatedFloats(Value address) {
    return LLVM::BitcastOp::create(b, loc, nxv4f32(),
                                   loadReplicatedQuadword(allTrue(16), address));
  }

  /// ZA array vectors slice + 16i, i < 4, as int32 vectors (multi-vector
  /// MOVA; the ArmSME dialect has no multi-vector ZA operations).
  SmallVector<Value> readZaVectors4(Value slice) {
    return unpack(
        cq4p_intr::SmeReadVg1x4Op::create(b, loc, quadType(nxv4i32()), slice));
  }

  /// The 16 bytes at `address` in every 128-bit segment (LD1RQB; the ArmSVE
  /// dialect has no loads).
  Value loadReplicatedQuadword(Value predicate, Value address) {
    return cq4p_intr::SveLd1rqOp::create(b, loc, nxv16i8, predicate, address);
  }

  /// The two consecutive streaming vectors (128 bytes) at `address`, with
  /// one SME2 multi-vector load (LD1B with a predicate-as-counter, which
  /// the ArmSVE dialect lacks, as it does every load and store below).
  std::pair<Value, Value> loadPair(Value address) {
    Value counter = allBytes();
    return unpackPair(
        cq4p_intr::SveLd1PnX2Op::create(b, loc, pairType(nxv16i8), counter, address));
  }

  /// The four consecutive streaming vectors (256 bytes) at `address`.
  SmallVector<Value> loadQuad(Value address) {
    Value counter = allBytes();
    return unpack(
        cq4p_intr::SveLd1PnX4Op::create(b, loc, quadType(nxv16i8), counter, address));
  }

  /// The four consecutive fp32 streaming vectors (256 bytes) at `address`.
  SmallVector<Value> loadQuadF32(Value address) {
    Value counter = allWords();
    return unpack(
        cq4p_intr::SveLd1PnX4Op::create(b, loc, quadType(nxv4f32()), counter, address));
  }
  void storeQuadF32(ArrayRef<Value> vectors, Value address) {
    Value counter = allWords();
    cq4p_intr::SveSt1PnX4Op::create(b, loc, vectors[0], vectors[1], vectors[2],
                                    vectors[3], counter, address);
  }
  void storeQuadWords(ArrayRef<Value> vectors, Value address) {
    Value counter = allWords();
    cq4p_intr::SveSt1PnX4Op::create(b, loc, vectors[0], vectors[1], vectors[2],
                                    vectors[3], counter, address);
  }

  /// Vertical slices slice..slice+3 of the 32-bit tile za<tile>.s: word
  /// `slice + i` of each of its 16 rows (multi-vector MOVA; the ArmSME
  /// dialect has no multi-vector ZA operations).
  SmallVector<Value> readTileColumns4(int64_t tile, int64_t slice) {
    Value sliceIndex = i32(slice);
    return unpack(cq4p_intr::SmeReadVerVg4Op::create(b, loc, quadType(nxv4i32()),
                                                     uint32_t(tile), sliceIndex));
  }

  /// Horizontal slices slice..slice+3 of the 32-bit tile za<tile>.s: four
  /// of its rows as fp32 vectors (multi-vector MOVA).
  SmallVector<Value> readTileRows4(int64_t tile, int64_t slice) {
    return unpack(cq4p_intr::SmeReadHorVg4Op::create(b, loc, quadType(nxv4f32()),
                                                     uint32_t(tile), i32(slice)));
  }

  /// Four int32 vectors converted to fp32 (multi-vector SCVTF, which the
  /// ArmSVE dialect lacks).
  SmallVector<Value> convertQuadToF32(ArrayRef<Value> ints) {
    return unpack(cq4p_intr::SveScvtfX4Op::create(b, loc, quadType(nxv4f32()), ints[0],
                                                  ints[1], ints[2], ints[3]));
  }

  Type ptrType;
  VectorType nxv16i8;

  /// All-true predicates-as-counters for bytes and for 32-bit elements
  /// (PTRUE PNx; the ArmSVE dialect has no predicate-as-counter type),
  /// made at their first use: a leaf whose first use is inside a region
  /// and a later one outside calls these first, where both can see them.
  Value allBytes() {
    if (!allBytesCounter)
      allBytesCounter = cq4p_intr::SvePtrueC8Op::create(b, loc, svcountType());
    return allBytesCounter;
  }
  Value allHalves() {
    if (!allHalvesCounter)
      allHalvesCounter = cq4p_intr::SvePtrueC16Op::create(b, loc, svcountType());
    return allHalvesCounter;
  }
  Value allWords() {
    if (!allWordsCounter)
      allWordsCounter = cq4p_intr::SvePtrueC32Op::create(b, loc, svcountType());
    return allWordsCounter;
  }

private:
  Type svcountType() {
    return LLVM::LLVMTargetExtType::get(b.getContext(), "aarch64.svcount", {}, {});
  }

  /// The literal structs of multi-vector results.
  Type pairType(Type vector) {
    return LLVM::LLVMStructType::getLiteral(b.getContext(), {vector, vector});
  }
  Type quadType(Type vector) {
    return LLVM::LLVMStructType::getLiteral(b.getContext(),
                                            {vector, vector, vector, vector});
  }
  std::pair<Value, Value> unpackPair(Value pair) {
    return {LLVM::ExtractValueOp::create(b, loc, pair, 0),
            LLVM::ExtractValueOp::create(b, loc, pair, 1)};
  }
  SmallVector<Value> unpack(Value quad) {
    SmallVector<Value> vectors;
    for (int64_t i = 0; i < 4; ++i)
      vectors.push_back(LLVM::ExtractValueOp::create(b, loc, quad, i));
    return vectors;
  }

  // Made once per leaf, at their first use.
  Value allBytesCounter;
  Value allHalvesCounter;
  Value allWordsCounter;
  Value undefinedWords; ///< the inactive lanes of a MOVA (all are active)
  Value undefinedBytes;
  Value undefinedF32;
};

/// The operands of the cq4p.rescale loop fused into a leaf: the partials
/// are rescaled straight out of ZA instead of being stored.
struct FusedRescale {
  Value scales;   ///< act_scales ([rows][ng] from `row`)
  Value norms;    ///< norm_panels ([sb][ng][64])
  Value accum;    ///< fp32 accumulators ([R][64])
};

/// accum[0..64) += float(ints) * scale * norms, the contract's order of
/// fp32 operations (cq4p.rescale: a multiply by the activation scale, one
/// by the norm, then the add; no fused multiply-add, so the bits equal
/// every other backend's): one multi-vector SCVTF, one four-vector load
/// and store of the accumulators.
void rescaleQuad(LeafBuilder &leaf, ArrayRef<Value> ints, Value scale,
                 ArrayRef<Value> norms, Value accumAddress) {
  OpBuilder &b = leaf.b;
  Location loc = leaf.loc;
  SmallVector<Value> floats = leaf.convertQuadToF32(ints);
  SmallVector<Value> accums = leaf.loadQuadF32(accumAddress);
  for (int64_t i = 0; i < 4; ++i) {
    Value term = arith::MulFOp::create(
        b, loc, arith::MulFOp::create(b, loc, floats[i], scale), norms[i]);
    accums[i] = arith::AddFOp::create(b, loc, accums[i], term);
  }
  leaf.storeQuadF32(accums, accumAddress);
}

/// act_scales[row + r, g], in every lane.
Value loadScale(LeafBuilder &leaf, Value scalesBase, int64_t scaleColumns,
                Value row, int64_t r, Value g) {
  OpBuilder &b = leaf.b;
  Location loc = leaf.loc;
  Value element = arith::AddIOp::create(
      b, loc,
      arith::MulIOp::create(b, loc,
                            arith::AddIOp::create(b, loc, row, leaf.index(r)),
                            leaf.index(scaleColumns)),
      g);
  Value scale = LLVM::LoadOp::create(
      b, loc, b.getF32Type(),
      leaf.offset(scalesBase, arith::MulIOp::create(b, loc, element, leaf.index(4))));
  return vector::BroadcastOp::create(b, loc, leaf.nxv4f32(), scale);
}

/// The 64 norms of group g of super-block sb (four vectors).
SmallVector<Value> loadNorms(LeafBuilder &leaf, Value normsBase, int64_t ng,
                             Value sb, Value g) {
  OpBuilder &b = leaf.b;
  Location loc = leaf.loc;
  Value element = arith::AddIOp::create(
      b, loc, arith::MulIOp::create(b, loc, sb, leaf.index(ng)), g);
  return leaf.loadQuadF32(leaf.offset(
      normsBase,
      arith::MulIOp::create(b, loc, element, leaf.index(CQ4P_PANEL_CHANNELS * 4))));
}

/// ZT0 <- the int8 codebook: entry i (32 bits) holds cb_i8[i] in its low
/// byte, where LUTI4 on bytes reads it.
void loadCodebookIntoZt0(LeafBuilder &leaf, Value cb) {
  OpBuilder &b = leaf.b;
  Location loc = leaf.loc;
  Value table = memref::AllocaOp::create(
      b, loc, MemRefType::get({CQ4P_CODEBOOK_LEVELS}, b.getI32Type()));
  // At SVL 512 one vector of 32-bit lanes holds the 16 entries: one
  // widening load (LD1B to words) and one store.
  static_assert(CQ4P_CODEBOOK_LEVELS * 4 == kStreamingBytes,
                "the codebook fills one streaming vector of words");
  Value levels = LLVM::LoadOp::create(
      b, loc, VectorType::get({4}, b.getI8Type(), {true}), leaf.base(cb));
  Value entries = arith::ExtUIOp::create(b, loc, leaf.nxv4i32(), levels);
  Value tableBase = leaf.base(table);
  LLVM::StoreOp::create(b, loc, entries, tableBase);
  leaf.loadZt0(tableBase);
}

/// The four [16 channels][4 K] vectors of a kg-block whose 128 bytes are
/// the streaming vectors `low` and `high`: two LUTI4 (x2) of 64 bytes each,
/// nibble j to byte j.
SmallVector<Value> expandKgBlock(LeafBuilder &leaf, Value low, Value high) {
  SmallVector<Value> vectors;
  for (Value packed : {low, high}) {
    auto [first, second] = leaf.lookupPairInZt0(packed);
    vectors.append({first, second});
  }
  return vectors;
}

/// The same for the kg-block at `address`, loaded with one two-vector load.
SmallVector<Value> expandKgBlock(LeafBuilder &leaf, Value address) {
  auto [low, high] = leaf.loadPair(address);
  return expandKgBlock(leaf, low, high);
}

/// A partials leaf's operands: the partials buffer, or with a fused rescale
/// its operands instead.
struct LeafArgs {
  Value panels, cb, act, sb, row, groupBegin;
  Value partials;
  std::optional<FusedRescale> fused;
};

/// The GEMM leaf: per group, 4-way outer products of the packed
/// activation tile ([16 rows][4 K] per kg-block, one load) with the four
/// expanded weight vectors, one 32-bit ZA tile per 16 channels; ZA array
/// vector v is then row v/4, channels 16*(v%4).., so the group's partials
/// [16][64] are stored linearly with `str za`.
void buildOuterProductLeafBody(OpBuilder &b, Location loc, PanelPartialsOp op,
                               const LeafArgs &args) {
  Value panels = args.panels, cb = args.cb, packed = args.act;
  Value sb = args.sb, groupBegin = args.groupBegin;
  auto panelsType = cast<MemRefType>(op.getPanels().getType());
  int64_t ng = panelsType.getDimSize(1), kgPerGroup = panelsType.getDimSize(2);
  int64_t groups = cast<MemRefType>(op.getPartials().getType()).getDimSize(0);
  LeafBuilder leaf(b, loc);
  Value c0 = leaf.index(0), c1 = leaf.index(1);
  loadCodebookIntoZt0(leaf, cb);
  Value allLanes = leaf.allTrue(16);
  Value panelsBase = leaf.base(panels), packedBase = leaf.base(packed);
  int64_t groupBytes = kgPerGroup * CQ4P_KG_BLOCK_BYTES;
  Value sbBase = leaf.offset(
      panelsBase, arith::MulIOp::create(b, loc, sb, leaf.index(ng * groupBytes)));

  auto groupLoop = scf::ForOp::create(b, loc, c0, leaf.index(groups), c1);
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(groupLoop.getBody());
  Value j = groupLoop.getInductionVar();
  Value g = arith::AddIOp::create(b, loc, groupBegin, j);
  leaf.zeroZa();
  Value groupPanels =
      leaf.offset(sbBase, arith::MulIOp::create(b, loc, g, leaf.index(groupBytes)));
  // The packed tile has 16 rows x 4 K = one 64-byte vector per kg-block.
  Value groupPacked = leaf.offset(
      packedBase,
      arith::MulIOp::create(b, loc, g, leaf.index(kgPerGroup * kStreamingBytes)));
  {
    // Four kg-blocks per step: one four-vector load brings their activation
    // vectors, two more their 512 panel bytes.
    auto kgLoop =
        scf::ForOp::create(b, loc, c0, leaf.index(kgPerGroup), leaf.index(4));
    OpBuilder::InsertionGuard kgGuard(b);
    b.setInsertionPointToStart(kgLoop.getBody());
    Value kg = kgLoop.getInductionVar();
    SmallVector<Value> activations = leaf.loadQuad(leaf.offset(
        groupPacked, arith::MulIOp::create(b, loc, kg, leaf.index(kStreamingBytes))));
    Value stepPanels = leaf.offset(
        groupPanels, arith::MulIOp::create(b, loc, kg, leaf.index(CQ4P_KG_BLOCK_BYTES)));
    for (int64_t half = 0; half < 2; ++half) {
      SmallVector<Value> packed =
          leaf.loadQuad(leaf.vectorOffset(stepPanels, 4 * half));
      for (int64_t step = 0; step < 2; ++step) {
        SmallVector<Value> weights =
            expandKgBlock(leaf, packed[2 * step], packed[2 * step + 1]);
        for (int64_t tile = 0; tile < 4; ++tile)
          leaf.signedOuterProduct4Way(tile, allLanes, activations[2 * half + step],
                                      weights[tile]);
      }
    }
  }
  if (args.fused) {
    // Row r of the tile is horizontal slice r of the four 32-bit tiles
    // (channels 16t.., tile t): four MOVA, then accum[r][0..64) as one
    // four-vector load and store; the group's norms serve every row.
    const FusedRescale &fused = *args.fused;
    // The accumulators are a [16][64] view, of y itself for a whole tile:
    // its row stride and first element from the descriptor.
    auto accumLayout =
        memref::ExtractStridedMetadataOp::create(b, loc, fused.accum);
    Value accumBase = leaf.offset(
        leaf.base(fused.accum),
        arith::MulIOp::create(b, loc, accumLayout.getOffset(), leaf.index(4)));
    Value accumRowBytes =
        arith::MulIOp::create(b, loc, accumLayout.getStrides()[0], leaf.index(4));
    Value scalesBase = leaf.base(fused.scales);
    int64_t scaleColumns = cast<MemRefType>(fused.scales.getType()).getDimSize(1);
    SmallVector<Value> norms = loadNorms(leaf, leaf.base(fused.norms), ng, sb, g);
    Value lanes = leaf.allTrue(4);
    for (int64_t r = 0; r < kSmeTileRows; ++r) {
      SmallVector<Value> ints;
      for (int64_t tile = 0; tile < 4; ++tile)
        ints.push_back(leaf.readTileRow(tile, r, lanes));
      rescaleQuad(leaf, ints, loadScale(leaf, scalesBase, scaleColumns, args.row, r, g),
                  norms,
                  leaf.offset(accumBase, arith::MulIOp::create(b, loc, accumRowBytes,
                                                               leaf.index(r))));
    }
    return;
  }
  Value groupPartials = leaf.offset(
      leaf.base(args.partials),
      arith::MulIOp::create(b, loc, j,
                            leaf.index(kSmeTileRows * CQ4P_PANEL_CHANNELS * 4)));
  // `str za[wv, #i], [x, #i, mul vl]`: one slice register and base address
  // per 16 vectors, the offset folded into both.
  for (int64_t block = 0; block < 4; ++block) {
    Value base = leaf.vectorOffset(groupPartials, 16 * block);
    for (int64_t i = 0; i < 16; ++i)
      leaf.storeZaVector(leaf.i32(16 * block), base, i);
  }
}

/// The leaf of R unpacked activation rows (the GEMV, R = 1, and the rows
/// of a GEMM past its 16-row tiles): each expanded weight vector feeds one
/// multi-vector SDOT per row. Row r of group j accumulates in ZA slice
/// (j - first) R + r. A fill of ZA holds 16 groups of one row, or 8 / R
/// groups of R > 1 rows: every slice of a fill is then one register plus
/// an immediate offset (0-7), even where LLVM unrolls the group loop into
/// constant slices. With constant slices past 7, each needing its own
/// register of the four slice registers (w8-w11), LLVM 22 gave some
/// SDOTs the wrong slice (6 rows: wrong y, seen under QEMU).
void buildDotLeafBody(OpBuilder &b, Location loc, PanelPartialsOp op,
                      const LeafArgs &args) {
  Value panels = args.panels, cb = args.cb, act = args.act;
  Value sb = args.sb, row = args.row, groupBegin = args.groupBegin;
  auto panelsType = cast<MemRefType>(op.getPanels().getType());
  int64_t ng = panelsType.getDimSize(1), kgPerGroup = panelsType.getDimSize(2);
  int64_t gs = kgPerGroup * CQ4P_KG_BLOCK_K;
  int64_t k = ng * gs;
  auto partialsType = cast<MemRefType>(op.getPartials().getType());
  int64_t groups = partialsType.getDimSize(0), rows = partialsType.getDimSize(1);
  int64_t groupsPerFill = rows == 1 ? kZaSlices : std::max<int64_t>(1, 8 / rows);
  LeafBuilder leaf(b, loc);
  Value c0 = leaf.index(0), c1 = leaf.index(1);
  loadCodebookIntoZt0(leaf, cb);

  Value panelsBase = leaf.base(panels), actBase = leaf.base(act);
  Value allLanes = leaf.allTrue(16);
  // act[row + r, 0] and panels[sb, 0, 0, 0], in bytes.
  Value actRow = leaf.offset(
      actBase, arith::MulIOp::create(b, loc, row, leaf.index(k)));
  Value sbBase = leaf.offset(
      panelsBase,
      arith::MulIOp::create(b, loc, sb,
                            leaf.index(ng * kgPerGroup * CQ4P_KG_BLOCK_BYTES)));
  // The ZA slices of group j's rows: (j - first) R + r, r < R.
  auto rowSlices = [&](Value j, Value chunkFirst) {
    Value first = arith::SubIOp::create(b, loc, j, chunkFirst);
    if (rows > 1)
      first = arith::MulIOp::create(b, loc, first, leaf.index(rows));
    SmallVector<Value> slices{leaf.toI32(first)};
    for (int64_t r = 1; r < rows; ++r)
      slices.push_back(arith::AddIOp::create(b, loc, slices[0], leaf.i32(r)));
    return slices;
  };

  // Groups j in [0, groups), a fill at a time; group group_begin + j of the
  // tensor.
  int64_t chunks = (groups + groupsPerFill - 1) / groupsPerFill;
  auto chunkLoop = scf::ForOp::create(b, loc, c0, leaf.index(chunks), c1);
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(chunkLoop.getBody());
  Value chunkFirst = arith::MulIOp::create(b, loc, chunkLoop.getInductionVar(),
                                           leaf.index(groupsPerFill));
  Value chunkEnd = arith::MinSIOp::create(
      b, loc, arith::AddIOp::create(b, loc, chunkFirst, leaf.index(groupsPerFill)),
      leaf.index(groups));
  leaf.zeroZa();

  auto groupLoop = scf::ForOp::create(b, loc, chunkFirst, chunkEnd, c1);
  {
    OpBuilder::InsertionGuard groupGuard(b);
    b.setInsertionPointToStart(groupLoop.getBody());
    Value j = groupLoop.getInductionVar();
    SmallVector<Value> slices = rowSlices(j, chunkFirst);
    Value g = arith::AddIOp::create(b, loc, groupBegin, j);
    Value groupPanels = leaf.offset(
        sbBase, arith::MulIOp::create(
                    b, loc, g, leaf.index(kgPerGroup * CQ4P_KG_BLOCK_BYTES)));
    Value groupAct =
        leaf.offset(actRow, arith::MulIOp::create(b, loc, g, leaf.index(gs)));
    auto stepLoop =
        scf::ForOp::create(b, loc, c0, leaf.index(kgPerGroup / 4), c1);
    OpBuilder::InsertionGuard stepGuard(b);
    b.setInsertionPointToStart(stepLoop.getBody());
    Value q = stepLoop.getInductionVar();
    // Each row's 16 activations of kg-blocks 4q..4q+3, in every 128-bit
    // segment.
    Value stepAct =
        leaf.offset(groupAct, arith::MulIOp::create(b, loc, q, leaf.index(16)));
    SmallVector<Value> activations;
    for (int64_t r = 0; r < rows; ++r)
      activations.push_back(leaf.loadReplicatedQuadword(
          allLanes, r == 0 ? stepAct : leaf.offset(stepAct, leaf.index(r * k))));
    Value stepPanels = leaf.offset(
        groupPanels,
        arith::MulIOp::create(b, loc, q, leaf.index(4 * CQ4P_KG_BLOCK_BYTES)));
    for (int64_t t = 0; t < 4; ++t) {
      // Kg-block t is 2t streaming vectors further (128 bytes at SVL 512),
      // expanded once for every row.
      SmallVector<Value> vectors =
          expandKgBlock(leaf, leaf.vectorOffset(stepPanels, 2 * t));
      for (int64_t r = 0; r < rows; ++r)
        leaf.dotZaVectors4(slices[r], vectors, activations[r], t);
    }
  }

  // The chunk's partials, out of ZA: vector s + 16i holds channels
  // 16i..16i+15 of the group and row in slice s.
  auto storeLoop = scf::ForOp::create(b, loc, chunkFirst, chunkEnd, c1);
  OpBuilder::InsertionGuard storeGuard(b);
  b.setInsertionPointToStart(storeLoop.getBody());
  Value j = storeLoop.getInductionVar();
  SmallVector<Value> slices = rowSlices(j, chunkFirst);
  if (args.fused) {
    // One multi-vector read of ZA gives a row's 64 partials of the group in
    // channel order, rescaled into the row's accumulators; the group's
    // norms serve every row.
    const FusedRescale &fused = *args.fused;
    Value g = arith::AddIOp::create(b, loc, groupBegin, j);
    Value scalesBase = leaf.base(fused.scales);
    int64_t scaleColumns = cast<MemRefType>(fused.scales.getType()).getDimSize(1);
    SmallVector<Value> norms = loadNorms(leaf, leaf.base(fused.norms), ng, sb, g);
    Value accumBase = leaf.base(fused.accum);
    for (int64_t r = 0; r < rows; ++r)
      rescaleQuad(leaf, leaf.readZaVectors4(slices[r]),
                  loadScale(leaf, scalesBase, scaleColumns, row, r, g), norms,
                  r == 0 ? accumBase
                         : leaf.offset(accumBase,
                                       leaf.index(r * CQ4P_PANEL_CHANNELS * 4)));
    return;
  }
  Value partialsBase = leaf.base(args.partials);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < 4; ++i) {
      Value vectorIndex =
          arith::AddIOp::create(b, loc, slices[r], leaf.i32(i * kZaSlices));
      // partials[j, r, 16i].
      Value byteOffset = arith::AddIOp::create(
          b, loc,
          arith::MulIOp::create(b, loc, j,
                                leaf.index(rows * CQ4P_PANEL_CHANNELS * 4)),
          leaf.index((r * CQ4P_PANEL_CHANNELS + 16 * i) * 4));
      leaf.storeZaVector(vectorIndex, leaf.offset(partialsBase, byteOffset), 0);
    }
  }
}

//===----------------------------------------------------------------------===//
// Prefill attention with fp32 outer products: cq4p.attention with fp32 keys
// and values, a head dim of whole 64-wide chunks, and more than one query
// row (one row, a decode step's, runs the streaming decode leaf of
// DecodeAttention.cpp, or the shared vector code where that does not apply).
//
// Per call (query rows at position p .. p + rows - 1, keys [0, p + rows)):
//   per KV head of the call's query heads, once:
//     Kt[t][d][c] = k[16t + c, kv*D + d], the key tiles a query sees
//                                  streaming leaf: LD1W rows into ZA0.S,
//                                  MOVA x4 columns out, ST1W x4
//   per query head: Qt[t][d][r] = c q[16t + r, h*D + d]   the same leaf,
//                                  c = scale log2(e)
//   per query tile t (rows at p0 = p + 16t), one streaming leaf
//   (`<kernel>_sme_prefill_tile`, PrefillAttention.cpp for the softmax):
//     St[j][r] = sum_d Kt[j/16][d][j%16] Qt[t][d][r], per key tile D
//       FMOPAs into ZA0.S (its rows are keys, its lanes the tile's query
//       rows), stored row by row
//     the softmax down St's columns (16 lanes = 16 query rows): the causal
//       and window masks (on the few keys that need them), the max, 2^(s -
//       m) and the sum are lane-wise streaming SVE ops, no reductions; St
//       becomes P^T in place
//     outTile[r][d] = sum_j P^T[j][r] v[j, kv*D + d]: per 64 dims, per key,
//       one LD1W x4 of its values and 4 FMOPAs (four keys' rows of P^T
//       one LD1W x4)
//     out[16t + r, h*D + d] = outTile[r][d] / sum[r]
// Each row of P^T is the values' outer-product operand as it is, and each
// key row of the cache is read once per query tile by each leaf.
//===----------------------------------------------------------------------===//

/// dst[t][d][c] = factor * src[16t + c, colBase + d] for t in [firstTile,
/// endTile), zeros for the rows of src at or past `validRows`: per 16
/// columns, the 16 rows loaded as horizontal slices of ZA0.S (rows past the
/// end through an empty predicate, which reads nothing) and stored from its
/// vertical slices, four at a time (each times `factor` when it is not 1:
/// the queries' scale log2(e)).
void buildTransposeLeafBody(OpBuilder &b, Location loc, int64_t dim, float factor,
                            ValueRange args) {
  Value src = args[0], dst = args[1], colBase = args[2], firstTile = args[3],
        endTile = args[4], validRows = args[5];
  LeafBuilder leaf(b, loc);
  int64_t width = cast<MemRefType>(src.getType()).getDimSize(1);
  Value c0 = leaf.index(0), c16 = leaf.index(kSmeTileRows);
  Value srcBase = leaf.base(src), dstBase = leaf.base(dst);
  leaf.allWords(); // the stores' counter, outside the loop
  Value factorVector = vector::BroadcastOp::create(
      b, loc, leaf.nxv4f32(), arith::ConstantOp::create(b, loc, b.getF32FloatAttr(factor)));
  auto tileLoop = scf::ForOp::create(b, loc, firstTile, endTile, leaf.index(1));
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(tileLoop.getBody());
  Value t = tileLoop.getInductionVar();
  Value firstRow = arith::MulIOp::create(b, loc, t, c16);
  Value present = arith::MinSIOp::create(
      b, loc,
      arith::MaxSIOp::create(b, loc, arith::SubIOp::create(b, loc, validRows, firstRow), c0),
      c16);
  SmallVector<Value> masks;
  for (int64_t r = 0; r < kSmeTileRows; ++r) {
    Value exists =
        arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt, leaf.index(r), present);
    masks.push_back(vector::CreateMaskOp::create(
        b, loc, VectorType::get({4}, b.getI1Type(), {true}),
        ValueRange{arith::SelectOp::create(b, loc, exists, c16, c0)}));
  }
  // Element (firstRow, colBase) of src, and tile t of dst.
  Value rowStart = leaf.offset(
      srcBase,
      arith::MulIOp::create(
          b, loc,
          arith::AddIOp::create(b, loc, arith::MulIOp::create(b, loc, firstRow, leaf.index(width)),
                                colBase),
          leaf.index(4)));
  Value tileStart = leaf.offset(
      dstBase, arith::MulIOp::create(b, loc, t, leaf.index(dim * kStreamingBytes)));
  for (int64_t block = 0; block < dim / 16; ++block) {
    for (int64_t r = 0; r < kSmeTileRows; ++r)
      leaf.loadTileRow(0, r, masks[r],
                       leaf.offset(rowStart, leaf.index((r * width + 16 * block) * 4)));
    for (int64_t q = 0; q < 4; ++q) {
      SmallVector<Value> columns = leaf.readTileColumns4(0, 4 * q);
      if (factor != 1.0f)
        for (Value &column : columns)
          column = LLVM::BitcastOp::create(
              b, loc, leaf.nxv4i32(),
              arith::MulFOp::create(b, loc,
                                    LLVM::BitcastOp::create(b, loc, leaf.nxv4f32(), column),
                                    factorVector));
      leaf.storeQuadWords(columns, leaf.vectorOffset(tileStart, 16 * block + 4 * q));
    }
  }
}

/// st[16t + c][r] = sum_d kt[t][d][c] * qt[qTile][d][r] for the key tiles
/// t in [firstTile, endTile): D FMOPAs per tile, Kt and Qt read four
/// vectors per load, the tile's rows out of ZA four per MOVA and ST1W.
/// Returns the largest score per row r over the tiles [fusedBegin,
/// fusedEnd) (a sub-range; -inf where it is empty), folded from the rows as
/// they leave ZA: the tiles before, inside and after it are three loops.
Value buildScoresLeafBody(OpBuilder &b, Location loc, int64_t dim, ValueRange args,
                          Value fusedBegin, Value fusedEnd) {
  Value qt = args[0], qTile = args[1], kt = args[2], st = args[3],
        firstTile = args[4], endTile = args[5];
  LeafBuilder leaf(b, loc);
  Value lanes = leaf.allTrue(4);
  Value qtBase = leaf.offset(
      leaf.base(qt), arith::MulIOp::create(b, loc, qTile, leaf.index(dim * kStreamingBytes)));
  Value ktBase = leaf.base(kt), stBase = leaf.base(st);
  leaf.allWords(); // the loads' counter, outside the loop
  Value minusInf = vector::BroadcastOp::create(
      b, loc, leaf.nxv4f32(),
      arith::ConstantOp::create(
          b, loc, b.getF32FloatAttr(-std::numeric_limits<float>::infinity())));
  // The tiles [begin, end); with `fold`, the loop carries and returns the
  // rows' largest.
  auto tiles = [&](Value begin, Value end, bool fold) -> Value {
    auto tileLoop = scf::ForOp::create(b, loc, begin, end, leaf.index(1),
                                       fold ? ValueRange{minusInf} : ValueRange{});
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(tileLoop.getBody());
    Value t = tileLoop.getInductionVar();
    Value m = fold ? tileLoop.getRegionIterArgs()[0] : Value();
    Value keyTile = leaf.offset(
        ktBase, arith::MulIOp::create(b, loc, t, leaf.index(dim * kStreamingBytes)));
    leaf.zeroZa();
    // Each Kt load's address is the last one's plus four vectors, through
    // cq4p_intr.opaque, so that LLVM keeps one add per load rather than
    // rebuilding each constant scalable offset (the loads take no immediate
    // offset from it).
    Value keyAddress = keyTile;
    for (int64_t d = 0; d < dim; d += 4) {
      if (d > 0)
        keyAddress = cq4p_intr::OpaqueOp::create(b, loc, keyAddress.getType(),
                                                 leaf.vectorOffset(keyAddress, 4));
      SmallVector<Value> queries = leaf.loadQuadF32(leaf.vectorOffset(qtBase, d));
      SmallVector<Value> keys = leaf.loadQuadF32(keyAddress);
      for (int64_t i = 0; i < 4; ++i)
        leaf.floatOuterProduct(0, lanes, keys[i], queries[i]);
    }
    // Row c of ZA0.S: key 16t + c.
    Value scoreTile = leaf.offset(
        stBase, arith::MulIOp::create(b, loc, t, leaf.index(kSmeTileRows * kStreamingBytes)));
    for (int64_t c = 0; c < kSmeTileRows; c += 4) {
      SmallVector<Value> rows = leaf.readTileRows4(0, c);
      leaf.storeQuadF32(rows, leaf.vectorOffset(scoreTile, c));
      if (fold)
        for (Value row : rows)
          m = arith::MaximumFOp::create(b, loc, m, row);
    }
    if (!fold)
      return Value();
    scf::YieldOp::create(b, loc, m);
    return tileLoop.getResult(0);
  };
  tiles(firstTile, fusedBegin, false);
  Value max = tiles(fusedBegin, fusedEnd, true);
  tiles(fusedEnd, endTile, false);
  return max;
}

/// outTile[r][d] = sum_{j in [keyBegin, keyEnd)} pt[j][r] * v[j, kvBase + d].
/// Per 64 dimensions, per key in order: four FMOPA of P^T's row j (the
/// tile's 16 queries) by the key's 64 values (one LD1W x4). Four keys at a
/// time take their four rows of P^T in one LD1W x4 and share one loop step
/// (25 instructions where one key at a time takes 10 each); the keys left
/// over go one at a time. The same outer products in the same order.
void buildValuesLeafBody(OpBuilder &b, Location loc, int64_t dim,
                         ValueRange args) {
  Value pt = args[0], v = args[1], kvBase = args[2], keyBegin = args[3],
        keyEnd = args[4], outTile = args[5];
  LeafBuilder leaf(b, loc);
  Value c0 = leaf.index(0), c1 = leaf.index(1), four = leaf.index(4);
  auto nxv4f32 = VectorType::get({4}, b.getF32Type(), {true});
  Value lanes = leaf.allTrue(4);
  int64_t width = cast<MemRefType>(v.getType()).getDimSize(1);
  Value ptBase = leaf.base(pt), vBase = leaf.base(v), outBase = leaf.base(outTile);
  leaf.allWords(); // the loads' counter, outside the loops
  // Keys [keyBegin, quadEnd) four at a time, then [quadEnd, keyEnd).
  Value quadEnd = arith::SubIOp::create(
      b, loc, keyEnd,
      arith::RemUIOp::create(b, loc, arith::SubIOp::create(b, loc, keyEnd, keyBegin), four));
  auto chunkLoop = scf::ForOp::create(b, loc, c0, leaf.index(dim / 64), c1);
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(chunkLoop.getBody());
  Value chunkFirst =
      arith::MulIOp::create(b, loc, chunkLoop.getInductionVar(), leaf.index(64));
  auto scoresRow = [&](Value j) {
    return leaf.offset(ptBase, arith::MulIOp::create(b, loc, j, leaf.index(kSmeTileRows * 4)));
  };
  // Key j's 64 values from chunkFirst, times P^T's row `zn`.
  auto accumulate = [&](Value j, Value zn) {
    Value rowFirst = arith::AddIOp::create(
        b, loc,
        arith::AddIOp::create(b, loc, arith::MulIOp::create(b, loc, j, leaf.index(width)),
                              kvBase),
        chunkFirst);
    SmallVector<Value> values = leaf.loadQuadF32(
        leaf.offset(vBase, arith::MulIOp::create(b, loc, rowFirst, four)));
    for (int64_t t = 0; t < 4; ++t)
      leaf.floatOuterProduct(t, lanes, zn, values[t]);
  };
  leaf.zeroZa();
  {
    auto quadLoop = scf::ForOp::create(b, loc, keyBegin, quadEnd, four);
    OpBuilder::InsertionGuard keyGuard(b);
    b.setInsertionPointToStart(quadLoop.getBody());
    Value j = quadLoop.getInductionVar();
    SmallVector<Value> rows = leaf.loadQuadF32(scoresRow(j));
    for (int64_t u = 0; u < 4; ++u)
      accumulate(arith::AddIOp::create(b, loc, j, leaf.index(u)), rows[u]);
  }
  {
    auto keyLoop = scf::ForOp::create(b, loc, quadEnd, keyEnd, c1);
    OpBuilder::InsertionGuard keyGuard(b);
    b.setInsertionPointToStart(keyLoop.getBody());
    Value j = keyLoop.getInductionVar();
    accumulate(j, LLVM::LoadOp::create(b, loc, nxv4f32, scoresRow(j)));
  }
  // ZA array vector 4r + t: row r, dimensions chunk + 16t ..
  for (int64_t r = 0; r < kSmeTileRows; ++r)
    for (int64_t t = 0; t < 4; ++t) {
      Value element = arith::AddIOp::create(b, loc, leaf.index(r * dim + 16 * t),
                                            chunkFirst);
      leaf.storeZaVector(leaf.i32(4 * r + t),
                         leaf.offset(outBase, arith::MulIOp::create(b, loc, element, four)),
                         0);
    }
}

/// cq4p.pack_activation_tile as a streaming leaf: the packed tile
/// [kg][16 rows][4 K] is the transpose of the rows' 32-bit words, so per 64
/// K it loads the 16 rows as horizontal slices of ZA tile 0 (LD1W, rows
/// past the end of `act` as zeros through their predicate) and stores its
/// vertical slices, four at a time (MOVA x4, ST1W x4): word j of every row
/// is kg-block j's 64-byte operand. The scales' rows are contiguous in both
/// buffers: one predicated load and one store per 16.
void buildPackTileLeafBody(OpBuilder &b, Location loc, ValueRange args) {
  Value act = args[0], scales = args[1], packed = args[2],
        packedScales = args[3], row = args[4];
  LeafBuilder leaf(b, loc);
  int64_t k = cast<MemRefType>(act.getType()).getDimSize(1);
  int64_t ng = cast<MemRefType>(scales.getType()).getDimSize(1);
  int64_t words = k / CQ4P_KG_BLOCK_K;
  Value c0 = leaf.index(0), c16 = leaf.index(kSmeTileRows);
  Value rows = memref::DimOp::create(b, loc, act, 0);
  Value valid = arith::MinSIOp::create(
      b, loc, arith::MaxSIOp::create(b, loc, arith::SubIOp::create(b, loc, rows, row), c0),
      c16);
  auto mask = [&](Value lanes) {
    return vector::CreateMaskOp::create(
        b, loc, VectorType::get({4}, b.getI1Type(), {true}), ValueRange{lanes});
  };
  // Row r's lanes: the first `lanes` words if the row exists, else none.
  auto rowMasks = [&](int64_t lanes) {
    SmallVector<Value> masks;
    for (int64_t r = 0; r < kSmeTileRows; ++r) {
      Value exists = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt,
                                           leaf.index(r), valid);
      masks.push_back(mask(arith::SelectOp::create(b, loc, exists, leaf.index(lanes), c0)));
    }
    return masks;
  };
  Value actRows = leaf.offset(leaf.base(act),
                              arith::MulIOp::create(b, loc, row, leaf.index(k)));
  Value packedBase = leaf.base(packed);
  leaf.allWords(); // the stores' counter, for the loop and the tail
  // Words [16c, 16c + lanes) of every row to kg-blocks 16c.. (lanes / 4
  // quads of kg-blocks).
  auto chunk = [&](Value c, int64_t lanes, ArrayRef<Value> masks) {
    Value first = arith::MulIOp::create(b, loc, c, leaf.index(kStreamingBytes));
    Value source = leaf.offset(actRows, first);
    for (int64_t r = 0; r < kSmeTileRows; ++r)
      leaf.loadTileRow(0, r, masks[r], leaf.offset(source, leaf.index(r * k)));
    Value target = leaf.offset(
        packedBase, arith::MulIOp::create(b, loc, c, leaf.index(16 * kStreamingBytes)));
    for (int64_t q = 0; q < lanes / 4; ++q)
      leaf.storeQuadWords(leaf.readTileColumns4(0, 4 * q),
                          leaf.vectorOffset(target, 4 * q));
  };
  int64_t fullChunks = words / 16, tail = words % 16;
  {
    SmallVector<Value> masks = rowMasks(16);
    auto loop = scf::ForOp::create(b, loc, c0, leaf.index(fullChunks), leaf.index(1));
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(loop.getBody());
    chunk(loop.getInductionVar(), 16, masks);
  }
  if (tail)
    chunk(leaf.index(fullChunks), tail, rowMasks(tail));

  // packed_scales[r][g] = act_scales[row + r][g] for the rows that exist,
  // zeros past them.
  Value scaleSource = leaf.offset(
      leaf.base(scales), arith::MulIOp::create(b, loc, row, leaf.index(ng * 4)));
  Value scaleTarget = leaf.base(packedScales);
  Value present = arith::MulIOp::create(b, loc, valid, leaf.index(ng));
  Value zeros = arith::ConstantOp::create(
      b, loc, DenseElementsAttr::get(leaf.nxv4f32(), b.getF32FloatAttr(0.0f)));
  for (int64_t i = 0; i < ng; ++i) {
    Value left = arith::MinSIOp::create(
        b, loc,
        arith::MaxSIOp::create(b, loc,
                               arith::SubIOp::create(b, loc, present, leaf.index(16 * i)),
                               c0),
        c16);
    Value values = LLVM::MaskedLoadOp::create(
        b, loc, leaf.nxv4f32(), leaf.offset(scaleSource, leaf.index(64 * i)), mask(left),
        zeros, 4u);
    LLVM::StoreOp::create(b, loc, values, leaf.offset(scaleTarget, leaf.index(64 * i)));
  }
}

/// The orthogonal rotations' matrix product (cq4p.rotate_quantize_activations
/// and cq4p.decode_embedding on SME2): sums[sumsFirst + r][j] = sum_{c < k}
/// matrix[c][j] * values[r][c] for r < count and j in [jBegin, jEnd) (whole
/// blocks of 128), each sum a chain of fused multiply-adds in index order
/// from 0.0: the bits of the shared vector lowering's. Arguments: matrix
/// (k x k fp16), values ([?][k], fp32, or fp16 with `halfValues`), sums
/// ([?][k] fp32), sumsFirst, count, jBegin, jEnd.
///
/// A block's 128 fp16 values of a rotation row are one multi-vector LD1H
/// (four vectors of 32). Its even outputs go to one ZA vector per quarter,
/// its odd ones to the next, so a block of a row takes the ZA vector pairs
/// (slot, slot + 1) + 16q, q < 4, for an even slot < 16: eight blocks of
/// sums at once. fp32 values (the lm_head's a = x * isr): FCVT and FCVTLT
/// widen the even and odd fp16 values (exact), shared by the pass's rows,
/// and each row adds them times its value c with two multi-vector FMLA by
/// lane (the row's values four at a time, LD1RQW). fp16 values (the
/// embedding's codebook levels): one multi-vector FMLAL by lane per row
/// adds the exact fp16 x fp16 products with one rounding each, the same
/// bits as fp32 fused multiply-adds of the widened values (the row's
/// values eight at a time, LD1RQH). The read-out interleaves each pair back
/// into output order. Passes take 8 rows of one block, then 4 of 2, 2 of
/// 4, single rows of 8, and halves of that down to one block.
void buildRotationLeafBody(OpBuilder &b, Location loc, int64_t k, bool halfValues,
                           ValueRange args) {
  Value matrix = args[0], values = args[1], sums = args[2], sumsFirst = args[3],
        count = args[4], jBegin = args[5], jEnd = args[6];
  LeafBuilder leaf(b, loc);
  constexpr int64_t kBlock = 128; // outputs per multi-vector LD1H
  constexpr int64_t kSlots = kZaSlices / 2;
  int64_t valueBytes = halfValues ? 2 : 4;
  int64_t valuesPerLoad = 16 / valueBytes; // LD1RQ: one 128-bit segment
  Value c0 = leaf.index(0);
  Value matrixBase = leaf.base(matrix), valuesBase = leaf.base(values),
        sumsBase = leaf.base(sums);
  leaf.allHalves(); // the loads' counter, outside the loops
  leaf.undefinedFloats();
  Value cBlock = leaf.index(kBlock);
  Value blocks = arith::DivUIOp::create(
      b, loc, arith::SubIOp::create(b, loc, jEnd, jBegin), cBlock);

  // One pass: rows [r0, r0 + rows) and `size` blocks from output j0.
  auto pass = [&](OpBuilder &b, Value r0, int64_t rows, Value j0, int64_t size) {
    auto slotOf = [&](int64_t r, int64_t block) { return 2 * (r * size + block); };
    leaf.zeroZa();
    SmallVector<Value> rowValues;
    for (int64_t r = 0; r < rows; ++r)
      rowValues.push_back(leaf.offset(
          valuesBase,
          arith::MulIOp::create(
              b, loc, arith::AddIOp::create(b, loc, r0, leaf.index(r)),
              leaf.index(k * valueBytes))));
    Value columnBase = leaf.offset(
        matrixBase, arith::MulIOp::create(b, loc, j0, leaf.index(2)));
    auto loop = scf::ForOp::create(b, loc, c0, leaf.index(k), leaf.index(valuesPerLoad));
    {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(loop.getBody());
      Value c = loop.getInductionVar();
      SmallVector<Value> replicated;
      for (int64_t r = 0; r < rows; ++r) {
        Value address =
            leaf.offset(rowValues[r], arith::MulIOp::create(b, loc, c, leaf.index(valueBytes)));
        replicated.push_back(halfValues ? leaf.loadReplicatedHalves(address)
                                        : leaf.loadReplicatedFloats(address));
      }
      Value rowsBase = leaf.offset(
          columnBase, arith::MulIOp::create(b, loc, c, leaf.index(k * 2)));
      for (int64_t u = 0; u < valuesPerLoad; ++u) {
        Value matrixRow = leaf.offset(rowsBase, leaf.index(u * k * 2));
        for (int64_t block = 0; block < size; ++block) {
          SmallVector<Value> halves =
              leaf.loadQuadF16(leaf.offset(matrixRow, leaf.index(block * kBlock * 2)));
          if (halfValues) {
            for (int64_t r = 0; r < rows; ++r)
              leaf.fmlalZaPairs4(leaf.i32(slotOf(r, block)), halves, replicated[r], u);
            continue;
          }
          SmallVector<Value> even, odd;
          for (Value h : halves) {
            even.push_back(leaf.widenEvenHalves(h));
            odd.push_back(leaf.widenOddHalves(h));
          }
          for (int64_t r = 0; r < rows; ++r) {
            leaf.fmlaZaVectors4(leaf.i32(slotOf(r, block)), even, replicated[r], u);
            leaf.fmlaZaVectors4(leaf.i32(slotOf(r, block) + 1), odd, replicated[r], u);
          }
        }
      }
    }
    for (int64_t r = 0; r < rows; ++r) {
      Value row = arith::AddIOp::create(
          b, loc, sumsFirst, arith::AddIOp::create(b, loc, r0, leaf.index(r)));
      Value target = leaf.offset(
          sumsBase,
          arith::MulIOp::create(
              b, loc,
              arith::AddIOp::create(b, loc,
                                    arith::MulIOp::create(b, loc, row, leaf.index(k)),
                                    j0),
              leaf.index(4)));
      for (int64_t block = 0; block < size; ++block) {
        SmallVector<Value> even = leaf.readZaVectors4(leaf.i32(slotOf(r, block)));
        SmallVector<Value> odd = leaf.readZaVectors4(leaf.i32(slotOf(r, block) + 1));
        for (int64_t q = 0; q < 4; ++q)
          leaf.storeInterleavedF32(
              even[q], odd[q],
              leaf.offset(target, leaf.index((block * kBlock + 32 * q) * 4)));
      }
    }
  };

  // Every pass of `rows` rows from r0: passes of the most blocks, then at
  // most one of each half size.
  auto passes = [&](OpBuilder &b, Value r0, int64_t rows) {
    Value done = c0;
    for (int64_t size = kSlots / rows; size >= 1; size /= 2) {
      Value cSize = leaf.index(size);
      Value left = arith::SubIOp::create(b, loc, blocks, done);
      Value end = arith::SubIOp::create(b, loc, left,
                                        arith::RemUIOp::create(b, loc, left, cSize));
      end = arith::AddIOp::create(b, loc, done, end);
      auto loop = scf::ForOp::create(b, loc, done, end, cSize);
      {
        OpBuilder::InsertionGuard guard(b);
        b.setInsertionPointToStart(loop.getBody());
        Value j0 = arith::AddIOp::create(
            b, loc, jBegin, arith::MulIOp::create(b, loc, loop.getInductionVar(), cBlock));
        pass(b, r0, rows, j0, size);
      }
      done = end;
    }
  };

  // Row groups of 8, then at most one of 4, 2 and 1 rows each.
  Value begin = c0;
  for (int64_t rows = kSlots; rows >= 1; rows /= 2) {
    Value cRows = leaf.index(rows);
    Value left = arith::SubIOp::create(b, loc, count, begin);
    Value end = arith::AddIOp::create(
        b, loc, begin,
        arith::SubIOp::create(b, loc, left, arith::RemUIOp::create(b, loc, left, cRows)));
    auto groups = scf::ForOp::create(b, loc, begin, end, cRows);
    {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(groups.getBody());
      passes(b, groups.getInductionVar(), rows);
    }
    begin = end;
  }
}

/// cq4p.decode_embedding's prompt rows on SME2: a chunk of `count` <= 64
/// rows, out[first + r][j] = sum_{c < k} matrix[c][j] * cb[idx(ids[first +
/// r], c)] in c order from 0.0 (the sums only: the caller scales them).
/// Arguments: matrix (rotation_t, k x k fp16), panels, codebook (16 fp16),
/// ids, nibbles ([k][32] bytes of scratch), out, first, count.
///
/// The outer products need, for each c, the 64 rows' values as vectors
/// over rows, so the rows' 4-bit indices are transposed first, through ZA
/// as one 64 x 64 byte tile per 64 values of c: each row's 32 index bytes
/// (two per kg-block, 128 bytes apart in its panel; copied by halfwords)
/// widened to one byte per index and written as a horizontal slice, the
/// tile's vertical slices (index c of the 64 rows) packed back to two
/// indices a byte, 32 bytes per c. Then, with ZT0 holding the 16 levels as
/// fp32, for every 16 outputs from j0: per c, one LUTI4 turns the 64 rows'
/// indices into their levels (four fp32 vectors, exact), an extending LD1H
/// and FCVT widen rotation_t[c][j0, j0 + 16) (exact), and four FMOPA add
/// the outer products to ZA tiles 0-3 (rows 16q .. 16q + 15). Each product
/// of two fp16 values is exact in fp32 and each FMOPA adds it with one
/// rounding: every sum is the same chain of adds in c order as the FMLAL
/// leaf's and the vector code's, the same bits. The tiles' rows that hold
/// ids are stored to `out` (ST1W); the others are never read.
void buildEmbeddingMopaLeafBody(OpBuilder &b, Location loc, int64_t k,
                                ValueRange args) {
  Value matrix = args[0], panels = args[1], codebook = args[2], ids = args[3],
        nibbles = args[4], out = args[5], first = args[6], count = args[7];
  LeafBuilder leaf(b, loc);
  Value c0 = leaf.index(0), c1 = leaf.index(1);
  auto i16 = b.getI16Type();
  auto nxv8i8 = VectorType::get({8}, b.getI8Type(), {true});
  auto nxv8i16 = VectorType::get({8}, i16, {true});
  auto splat16 = [&](int64_t v) -> Value {
    return arith::ConstantOp::create(
        b, loc, DenseElementsAttr::get(nxv8i16, b.getIntegerAttr(i16, v)));
  };
  Value lowNibble = splat16(0x0F), four = splat16(4), eight = splat16(8);
  Value halves = memref::AllocaOp::create(b, loc, MemRefType::get({32}, b.getI8Type()));
  Value levels = memref::AllocaOp::create(b, loc, MemRefType::get({16}, b.getF32Type()));
  Value halvesBase = leaf.base(halves), panelsBase = leaf.base(panels),
        nibblesBase = leaf.base(nibbles), matrixBase = leaf.base(matrix),
        outBase = leaf.base(out);
  int64_t superBlockBytes = k / CQ4P_KG_BLOCK_K * 128; // one channel's kg-blocks
  int64_t values = 64;                                 // of c per byte tile

  // Phase 1: nibbles[c][i / 2] holds row i's index of c (low nibble for
  // even i); rows past `count` hold stale indices, which only feed ZA rows
  // that are not stored.
  leaf.zeroZa();
  auto tiles = scf::ForOp::create(b, loc, c0, leaf.index(k / values), c1);
  {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(tiles.getBody());
    Value tile = tiles.getInductionVar();
    auto rows = scf::ForOp::create(b, loc, c0, count, c1);
    {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(rows.getBody());
      Value r = rows.getInductionVar();
      Value id = memref::LoadOp::create(
          b, loc, ids, ValueRange{arith::AddIOp::create(b, loc, first, r)});
      Value row = arith::IndexCastOp::create(b, loc, b.getIndexType(), id);
      Value superBlock = arith::DivUIOp::create(b, loc, row, leaf.index(CQ4P_PANEL_CHANNELS));
      Value channel = arith::RemUIOp::create(b, loc, row, leaf.index(CQ4P_PANEL_CHANNELS));
      // kg-blocks 16 tile .. 16 tile + 15 of the row: 2 bytes each, 128
      // bytes apart.
      Value byteOffset = arith::AddIOp::create(
          b, loc,
          arith::AddIOp::create(
              b, loc, arith::MulIOp::create(b, loc, superBlock, leaf.index(superBlockBytes)),
              arith::MulIOp::create(b, loc, tile, leaf.index(values / 4 * 128))),
          arith::MulIOp::create(b, loc, channel, leaf.index(2)));
      Value source = leaf.offset(panelsBase, byteOffset);
      for (int64_t t = 0; t < values / 4; ++t) {
        Value pair = LLVM::LoadOp::create(b, loc, i16, leaf.offset(source, leaf.index(128 * t)),
                                          /*alignment=*/1);
        LLVM::StoreOp::create(b, loc, pair, leaf.offset(halvesBase, leaf.index(2 * t)),
                              /*alignment=*/1);
      }
      // One index a byte, low nibble first: halfword h of the widened
      // bytes becomes (h & 15) | (h >> 4) << 8.
      Value packed = LLVM::ZExtOp::create(
          b, loc, nxv8i16, LLVM::LoadOp::create(b, loc, nxv8i8, halvesBase, /*alignment=*/1));
      Value spread = arith::OrIOp::create(
          b, loc, arith::AndIOp::create(b, loc, packed, lowNibble),
          arith::ShLIOp::create(b, loc, arith::ShRUIOp::create(b, loc, packed, four),
                                eight));
      leaf.writeByteTileRow(leaf.toI32(r),
                            LLVM::BitcastOp::create(b, loc, leaf.nxv16i8, spread));
    }
    // Column c of the tile: the 64 rows' indices of c; halfword h | h >> 4
    // holds two of them in its low byte, which the truncating store keeps.
    auto columns = scf::ForOp::create(b, loc, c0, leaf.index(values), c1);
    {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(columns.getBody());
      Value column = columns.getInductionVar();
      Value bytes = leaf.readByteTileColumn(leaf.toI32(column));
      Value pairs = LLVM::BitcastOp::create(b, loc, nxv8i16, bytes);
      Value both = arith::OrIOp::create(b, loc, pairs,
                                        arith::ShRUIOp::create(b, loc, pairs, four));
      Value c = arith::AddIOp::create(
          b, loc, arith::MulIOp::create(b, loc, tile, leaf.index(values)), column);
      LLVM::StoreOp::create(
          b, loc, LLVM::TruncOp::create(b, loc, nxv8i8, both),
          leaf.offset(nibblesBase, arith::MulIOp::create(b, loc, c, leaf.index(32))),
          /*alignment=*/1);
    }
  }

  // Phase 2: ZT0 <- the levels as fp32, then the outer products per 16
  // outputs.
  LLVM::StoreOp::create(b, loc, leaf.loadHalvesAsF32(leaf.base(codebook), 0),
                        leaf.base(levels), /*alignment=*/4);
  leaf.loadZt0(leaf.base(levels));
  Value predicate = leaf.allTrue(4);
  auto blocks = scf::ForOp::create(b, loc, c0, leaf.index(k / 16), c1);
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(blocks.getBody());
  Value j0 = arith::MulIOp::create(b, loc, blocks.getInductionVar(), leaf.index(16));
  leaf.zeroZa();
  Value columnBase =
      leaf.offset(matrixBase, arith::MulIOp::create(b, loc, j0, leaf.index(2)));
  // Two values of c per 64-byte load of their indices, eight per iteration.
  constexpr int64_t kUnroll = 8;
  auto loop = scf::ForOp::create(b, loc, c0, leaf.index(k), leaf.index(kUnroll));
  {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(loop.getBody());
    Value c = loop.getInductionVar();
    Value indexBase =
        leaf.offset(nibblesBase, arith::MulIOp::create(b, loc, c, leaf.index(32)));
    Value rowsBase =
        leaf.offset(columnBase, arith::MulIOp::create(b, loc, c, leaf.index(2 * k)));
    Value indices;
    for (int64_t u = 0; u < kUnroll; ++u) {
      if (u % 2 == 0)
        indices = LLVM::LoadOp::create(b, loc, leaf.nxv16i8,
                                       leaf.vectorOffset(indexBase, u / 2),
                                       /*alignment=*/1);
      SmallVector<Value> rowValues = leaf.lookupQuadF32InZt0(indices, u % 2);
      Value outputs =
          leaf.loadHalvesAsF32(leaf.offset(rowsBase, leaf.index(u * 2 * k)), 0);
      for (int64_t q = 0; q < 4; ++q)
        leaf.floatOuterProduct(q, predicate, rowValues[q], outputs);
    }
  }
  // The rows that hold ids: tile q's slices below count - 16q.
  for (int64_t q = 0; q < 4; ++q) {
    Value present = arith::MinSIOp::create(
        b, loc,
        arith::MaxSIOp::create(b, loc,
                               arith::SubIOp::create(b, loc, count, leaf.index(16 * q)),
                               c0),
        leaf.index(16));
    auto stores = scf::ForOp::create(b, loc, c0, present, c1);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(stores.getBody());
    Value i = stores.getInductionVar();
    Value row = arith::AddIOp::create(
        b, loc, first, arith::AddIOp::create(b, loc, leaf.index(16 * q), i));
    Value element = arith::AddIOp::create(
        b, loc, arith::MulIOp::create(b, loc, row, leaf.index(k)), j0);
    leaf.storeTileRow(q, leaf.toI32(i),
                      leaf.offset(outBase, arith::MulIOp::create(b, loc, element,
                                                                 leaf.index(4))));
  }
}

/// A private streaming leaf `name` with `types`, built by `body` once.
func::FuncOp getOrCreateLeaf(ModuleOp module, SymbolTable &symbols,
                             StringRef name, TypeRange types, Location loc,
                             function_ref<void(OpBuilder &, ValueRange)> body) {
  if (auto existing = symbols.lookup<func::FuncOp>(name))
    return existing;
  OpBuilder b = OpBuilder::atBlockEnd(module.getBody());
  auto leaf = func::FuncOp::create(b, loc, name, b.getFunctionType(types, {}));
  leaf.setPrivate();
  leaf->setAttr("cq4p.sme_leaf", b.getUnitAttr());
  Block *entry = leaf.addEntryBlock();
  OpBuilder inner = OpBuilder::atBlockBegin(entry);
  body(inner, entry->getArguments());
  func::ReturnOp::create(inner, loc);
  symbols.insert(leaf);
  return leaf;
}

void lowerAttention(ModuleOp module, SymbolTable &symbols, AttentionOp op) {
  Location loc = op.getLoc();
  OpBuilder b(op);
  int64_t dim = op.getHeadDim(), window = op.getWindow();
  int64_t group = op.getNumHeads() / op.getNumKvHeads();
  auto f32 = b.getF32Type();
  auto idx = [&](int64_t v) -> Value { return arith::ConstantIndexOp::create(b, loc, v); };
  Value c0 = idx(0), c1 = idx(1), c16 = idx(kSmeTileRows), cDim = idx(dim);
  Value rows = memref::DimOp::create(b, loc, op.getQ(), 0);
  // One query row (a decode step) runs the streaming decode leaf
  // (DecodeAttention.cpp: the group's heads together, no buffer that grows
  // with the context) where it applies, else the shared vector code.
  auto single = scf::IfOp::create(
      b, loc, arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult, rows, idx(2)),
      /*withElseRegion=*/true);
  {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(single.thenBlock());
    if (hasStreamingDecodeAttention(op)) {
      auto one = scf::IfOp::create(
          b, loc, arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, rows, c1),
          /*withElseRegion=*/false);
      b.setInsertionPointToStart(one.thenBlock());
      emitStreamingDecodeAttention(b, module, symbols, op);
    } else {
      b.clone(*op.getOperation());
    }
  }
  OpBuilder::InsertionGuard elseGuard(b);
  b.setInsertionPointToStart(single.elseBlock());
  Value position = op.getPosition() ? op.getPosition() : c0;
  Value keyCount = arith::AddIOp::create(b, loc, position, rows);
  Value keyTiles = arith::CeilDivUIOp::create(b, loc, keyCount, c16);
  Value queryTiles = arith::CeilDivUIOp::create(b, loc, rows, c16);
  auto windowStart = [&](Value p) -> Value {
    // max(0, p + 1 - window), without going below zero in unsigned math.
    Value next = arith::AddIOp::create(b, loc, p, c1);
    return arith::SubIOp::create(
        b, loc, arith::MaxUIOp::create(b, loc, next, idx(window)), idx(window));
  };
  // The first key tile any of the call's queries sees.
  Value firstKeyTile =
      window > 0 ? arith::DivUIOp::create(b, loc, windowStart(position), c16) : c0;
  int64_t dyn = ShapedType::kDynamic;
  auto tilesType = MemRefType::get({dyn, dim, kSmeTileRows}, f32);
  Value kt = memref::AllocOp::create(b, loc, tilesType, ValueRange{keyTiles});
  Value qt = memref::AllocOp::create(b, loc, tilesType, ValueRange{queryTiles});
  Value st = memref::AllocOp::create(
      b, loc, MemRefType::get({dyn, kSmeTileRows}, f32),
      ValueRange{arith::MulIOp::create(b, loc, keyTiles, c16)});

  std::string prefix = (op->getParentOfType<func::FuncOp>().getSymName()).str();
  // The queries times scale log2(e): the scores come out in base 2, so
  // that the softmax's exponent is s - m (exp2Lanes).
  float scale = op.getScale().convertToFloat();
  auto transposeLeaf = [&](Value src, StringRef name, float factor) {
    return getOrCreateLeaf(
        module, symbols, (prefix + name).str(),
        TypeRange{src.getType(), tilesType, b.getIndexType(), b.getIndexType(),
                  b.getIndexType(), b.getIndexType()},
        loc, [&](OpBuilder &leafBuilder, ValueRange args) {
          buildTransposeLeafBody(leafBuilder, loc, dim, factor, args);
        });
  };
  func::FuncOp keysLeaf = transposeLeaf(op.getK(), "_sme_transpose_keys", 1.0f);
  func::FuncOp queriesLeaf =
      transposeLeaf(op.getQ(), "_sme_transpose_queries",
                    float(double(scale) * sme::kLog2E));
  // Per query tile, one leaf: Q K^T by outer products into St, the softmax
  // down St's columns and P V by outer products, then each output row
  // divided by its sum (PrefillAttention.cpp), all in streaming mode.
  Type indexType = b.getIndexType();
  func::FuncOp tileLeaf = getOrCreateLeaf(
      module, symbols, prefix + "_sme_prefill_tile",
      TypeRange{tilesType, indexType, tilesType, st.getType(), op.getV().getType(),
                indexType, indexType, indexType, indexType, indexType, indexType,
                op.getOut().getType()},
      loc, [&](OpBuilder &lb, ValueRange args) {
        Value qt = args[0], t = args[1], kt = args[2], scores = args[3], v = args[4],
              kvBase = args[5], qBase = args[6], keyBegin = args[7], keyEnd = args[8],
              p0 = args[9], rows = args[10], out = args[11];
        auto index = [&](int64_t x) -> Value {
          return arith::ConstantIndexOp::create(lb, loc, x);
        };
        Value c16 = index(kSmeTileRows);
        Value inverses = sme::alignedBase(
            lb, loc,
            memref::AllocaOp::create(lb, loc,
                                     MemRefType::get({kSmeTileRows}, lb.getF32Type()),
                                     ValueRange{}, lb.getI64IntegerAttr(64)));
        auto outType = MemRefType::get({kSmeTileRows, dim}, lb.getF32Type());
        Value outTile = memref::AllocaOp::create(lb, loc, outType, ValueRange{},
                                                 lb.getI64IntegerAttr(64));
        PrefillKeys keys = prefillKeys(lb, loc, window, keyBegin, keyEnd, p0);
        Value fusedMax = buildScoresLeafBody(
            lb, loc, dim,
            ValueRange{qt, t, kt, scores, arith::DivUIOp::create(lb, loc, keyBegin, c16),
                       arith::CeilDivUIOp::create(lb, loc, keyEnd, c16)},
            arith::DivUIOp::create(lb, loc, keys.fusedBegin, c16),
            arith::DivUIOp::create(lb, loc, keys.fusedEnd, c16));
        emitPrefillSoftmax(lb, loc, window, scores, keyBegin, keyEnd, p0, keys, fusedMax,
                           inverses);
        buildValuesLeafBody(lb, loc, dim,
                            ValueRange{scores, v, kvBase, keyBegin, keyEnd, outTile});
        Value i0 = arith::MulIOp::create(lb, loc, t, c16);
        Value present = arith::MinUIOp::create(lb, loc, c16,
                                               arith::SubIOp::create(lb, loc, rows, i0));
        emitPrefillNormalize(lb, loc, dim, sme::alignedBase(lb, loc, outTile), inverses,
                             out, i0, qBase, present);
      });

  auto loop = [&](Value begin, Value end, auto body) {
    auto forOp = scf::ForOp::create(b, loc, begin, end, c1);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(forOp.getBody());
    body(forOp.getInductionVar());
  };

  loop(op.getHeadBegin(), op.getHeadEnd(), [&](Value h) {
    Value kvHead = arith::DivUIOp::create(b, loc, h, idx(group));
    Value kvBase = arith::MulIOp::create(b, loc, kvHead, cDim);
    Value qBase = arith::MulIOp::create(b, loc, h, cDim);
    // The keys once per KV head: at the call's first head and at the first
    // head of each group.
    Value newKv = arith::OrIOp::create(
        b, loc, arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, h, op.getHeadBegin()),
        arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq,
                              arith::RemUIOp::create(b, loc, h, idx(group)), c0));
    {
      auto ifOp = scf::IfOp::create(b, loc, newKv, /*withElseRegion=*/false);
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(ifOp.thenBlock());
      func::CallOp::create(b, loc, keysLeaf,
                           ValueRange{op.getK(), kt, kvBase, firstKeyTile, keyTiles, keyCount});
    }
    func::CallOp::create(b, loc, queriesLeaf,
                         ValueRange{op.getQ(), qt, qBase, c0, queryTiles, rows});
    loop(c0, queryTiles, [&](Value t) {
      Value p0 = arith::AddIOp::create(b, loc, position, arith::MulIOp::create(b, loc, t, c16));
      // Keys [keyBegin, keyEnd): from the window's start for the tile's
      // first row (down to a whole tile) to its last row's, or the cache's
      // end.
      Value keyEnd = arith::MinUIOp::create(b, loc, keyCount,
                                            arith::AddIOp::create(b, loc, p0, c16));
      Value keyBegin =
          window > 0 ? arith::MulIOp::create(
                           b, loc, arith::DivUIOp::create(b, loc, windowStart(p0), c16), c16)
                     : c0;
      func::CallOp::create(b, loc, tileLeaf,
                           ValueRange{qt, t, kt, st, op.getV(), kvBase, qBase, keyBegin,
                                      keyEnd, p0, rows, op.getOut()});
    });
  });
  memref::DeallocOp::create(b, loc, kt);
  memref::DeallocOp::create(b, loc, qt);
  memref::DeallocOp::create(b, loc, st);
  op.erase();
}

/// The loop that rescales each of `op`'s groups in order, which
/// cq4p-tile-super-blocks records on the op (`rescale = group_loop`) when it
/// emits it right after the op:
///
///   cq4p.panel_partials ..., %partials, %sb, %row, %g0
///       {rescale = #cq4p.partials_rescale<group_loop>}
///   scf.for %j = 0 to G step 1 {
///     %g = %g0 + %j
///     cq4p.rescale subview(%partials[%j]), %scales, %norms, %accum, %sb, %g, %row
///   }
///
/// The leaf then rescales straight out of ZA (the partials are not
/// stored). Null when the partials are stored; failure when the recorded
/// loop is not there.
FailureOr<scf::ForOp> recordedRescaleLoop(PanelPartialsOp op) {
  if (op.getRescale() != PartialsRescale::group_loop)
    return scf::ForOp();
  // Constants (the loop's bounds) may come between.
  Operation *next = op->getNextNode();
  while (next && isa<arith::ConstantOp>(next))
    next = next->getNextNode();
  auto loop = dyn_cast_or_null<scf::ForOp>(next);
  if (!loop || !llvm::hasSingleElement(loop.getBody()->getOps<RescaleOp>()))
    return op.emitOpError()
           << "expected the loop rescaling its groups right after it "
              "(rescale = group_loop)";
  return loop;
}

/// A model's small per-row kernels (RMSNorm, residual add, rotary
/// embedding) are 16-lane fixed-length vector code (ModelKernels.cpp). On
/// SME2 their bodies move into a streaming leaf, `<kernel>_sme_body`, which
/// cq4p-export-kernels gives the 512-bit vector length (vscale_range 4):
/// each 16-lane operation is then one SVE instruction instead of four NEON
/// ones. The same operations in the same order on the same lanes, so the
/// bits are NEON's; the kernel keeps its signature and calls the leaf once.
void streamSmallKernels(ModuleOp module, SymbolTable &symbols) {
  // The rotary embedding too: its sine and cosine are vector code
  // (sinCosLanes), no libm call that would leave streaming mode per lane.
  static constexpr KernelKind kStreamed[] = {KernelKind::rms_norm, KernelKind::add,
                                             KernelKind::rope};
  SmallVector<func::FuncOp> kernels;
  module.walk([&](func::FuncOp func) {
    auto kernel = func->getAttrOfType<KernelAttr>("cq4p.kernel");
    if (kernel && llvm::is_contained(kStreamed, kernel.getKind()) &&
        !func.isExternal() && func.getNumResults() == 0)
      kernels.push_back(func);
  });
  for (func::FuncOp kernel : kernels) {
    Location loc = kernel.getLoc();
    OpBuilder b = OpBuilder::atBlockEnd(module.getBody());
    auto leaf = func::FuncOp::create(b, loc, (kernel.getSymName() + "_sme_body").str(),
                                     kernel.getFunctionType());
    leaf.setPrivate();
    leaf->setAttr("cq4p.sme_leaf", b.getUnitAttr());
    leaf->setAttr("cq4p.sme_fixed_lanes", b.getUnitAttr());
    leaf.getBody().takeBody(kernel.getBody());
    Block *entry = kernel.addEntryBlock();
    OpBuilder call = OpBuilder::atBlockBegin(entry);
    func::CallOp::create(call, loc, leaf, entry->getArguments());
    func::ReturnOp::create(call, loc);
    symbols.insert(leaf);
  }
}

class ConvertCQ4PToArmSME
    : public mlir::cq4p::impl::ConvertCQ4PToArmSMEBase<ConvertCQ4PToArmSME> {
public:
  using ConvertCQ4PToArmSMEBase::ConvertCQ4PToArmSMEBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    SymbolTable symbols(module);
    // The orthogonal rotations' products in a streaming leaf per kernel,
    // which the shared lowering calls (cq4p.sme_rotation on the op).
    SmallVector<Operation *> rotations;
    module.walk([&](Operation *op) {
      if (isa<RotateQuantizeActivationsOp, DecodeEmbeddingOp>(op))
        rotations.push_back(op);
    });
    for (Operation *op : rotations) {
      Value matrix = isa<DecodeEmbeddingOp>(op)
                         ? cast<DecodeEmbeddingOp>(op).getRotationT()
                         : cast<RotateQuantizeActivationsOp>(op).getRotation();
      auto matrixType = cast<MemRefType>(matrix.getType());
      int64_t k = matrixType.getDimSize(1);
      if (k % 128 != 0) {
        op->emitError() << "SME2 rotations need K a multiple of 128, got " << k;
        return signalPassFailure();
      }
      if (auto quantize = dyn_cast<RotateQuantizeActivationsOp>(op);
          quantize && quantize.getGroupSize() % 128 != 0) {
        op->emitError() << "SME2 rotations need groups of a multiple of 128 outputs, got "
                        << quantize.getGroupSize();
        return signalPassFailure();
      }
      OpBuilder b(op);
      // The embedding's values are its codebook levels, fp16 (exact FMLAL);
      // with fmlal-rotation the lm_head's are its activations rounded to
      // fp16 by the shared lowering, which reads the choice from the leaf's
      // signature.
      bool halfValues = isa<DecodeEmbeddingOp>(op) || fmlalRotation;
      auto valuesType = MemRefType::get({ShapedType::kDynamic, k},
                                        halfValues ? Type(b.getF16Type())
                                                   : Type(b.getF32Type()));
      auto rowsType = MemRefType::get({ShapedType::kDynamic, k}, b.getF32Type());
      Type index = b.getIndexType();
      std::string name =
          op->getParentOfType<func::FuncOp>().getSymName().str() + "_sme_rotation";
      SmallVector<Type> types{matrixType, valuesType, rowsType, index, index, index, index};
      func::FuncOp leaf = getOrCreateLeaf(
          module, symbols, name, types, op->getLoc(),
          [&](OpBuilder &b, ValueRange args) {
            buildRotationLeafBody(b, op->getLoc(), k, halfValues, args);
          });
      op->setAttr(kRotationLeafAttrName, FlatSymbolRefAttr::get(leaf));
      if (halfValues && isa<RotateQuantizeActivationsOp>(op))
        op->setAttr(kRotationLeafF16AttrName, UnitAttr::get(op->getContext()));
      // Prompt rows of the embedding, where its strategy (cq4p-select-
      // strategy) asks for it: FP32 outer products (64 values of c per byte
      // tile of the transpose).
      StrategyAttr strategy = getStrategy(op);
      if (auto embedding = dyn_cast<DecodeEmbeddingOp>(op);
          embedding && strategy && strategy.getEmbeddingRows() > 0) {
        if (strategy.getEmbeddingRows() != kSmeEmbeddingMopaRows || k % 64 != 0) {
          op->emitError() << "SME2's embedding leaf takes chunks of "
                          << kSmeEmbeddingMopaRows << " rows and K a multiple of 64, got "
                          << strategy.getEmbeddingRows() << " rows and K " << k;
          return signalPassFailure();
        }
        SmallVector<Type> mopaTypes{
            matrixType, embedding.getPanels().getType(), embedding.getCodebook().getType(),
            embedding.getIds().getType(), MemRefType::get({k, 32}, b.getI8Type()),
            embedding.getOut().getType(), index, index};
        func::FuncOp mopa = getOrCreateLeaf(
            module, symbols,
            op->getParentOfType<func::FuncOp>().getSymName().str() + "_sme_embedding",
            mopaTypes, op->getLoc(), [&](OpBuilder &b, ValueRange args) {
              buildEmbeddingMopaLeafBody(b, op->getLoc(), k, args);
            });
        op->setAttr(kEmbeddingLeafAttrName, FlatSymbolRefAttr::get(mopa));
      }
    }
    streamSmallKernels(module, symbols);
    // The Hadamard activation transform in a streaming leaf, one call per
    // kernel call (StreamingQuantize.cpp); other group sizes keep the NEON
    // lowering.
    SmallVector<QuantizeActivationsOp> quantizes;
    module.walk([&](QuantizeActivationsOp op) {
      if (hasStreamingQuantize(op))
        quantizes.push_back(op);
    });
    for (QuantizeActivationsOp op : quantizes)
      lowerToStreamingQuantize(module, symbols, op);
    // Attention with outer products where the head dim fills whole 64-wide
    // chunks of the four fp32 tiles and the keys and values are fp32; the
    // shared lowering otherwise.
    SmallVector<AttentionOp> attentions;
    module.walk([&](AttentionOp op) {
      auto isF32 = [](Value v) {
        return cast<MemRefType>(v.getType()).getElementType().isF32();
      };
      if (op.getHeadDim() % 64 == 0 && isF32(op.getK()) && isF32(op.getV()))
        attentions.push_back(op);
    });
    for (AttentionOp op : attentions)
      lowerAttention(module, symbols, op);
    // Activation tiles packed in a streaming leaf of their own, once per
    // tile.
    SmallVector<PackActivationTileOp> packs;
    module.walk([&](PackActivationTileOp op) { packs.push_back(op); });
    for (PackActivationTileOp op : packs) {
      if (cast<MemRefType>(op.getPacked().getType()).getDimSize(2) != kSmeTileRows) {
        op.emitError() << "SME2 packs tiles of " << kSmeTileRows << " rows, got "
                       << cast<MemRefType>(op.getPacked().getType()).getDimSize(2);
        return signalPassFailure();
      }
      std::string prefix = op->getParentOfType<func::FuncOp>().getSymName().str();
      func::FuncOp leaf = getOrCreateLeaf(
          module, symbols, prefix + "_sme_pack_tile", op->getOperandTypes(), op.getLoc(),
          [&](OpBuilder &b, ValueRange args) {
            buildPackTileLeafBody(b, op.getLoc(), args);
          });
      OpBuilder b(op);
      func::CallOp::create(b, op.getLoc(), leaf, op->getOperands());
      op.erase();
    }
    SmallVector<PanelPartialsOp> ops;
    module.walk([&](PanelPartialsOp op) { ops.push_back(op); });
    for (PanelPartialsOp op : ops) {
      auto parent = op->getParentOfType<func::FuncOp>();
      auto panelsType = cast<MemRefType>(op.getPanels().getType());
      int64_t kg = panelsType.getDimSize(2);
      bool packed = cast<MemRefType>(op.getAct().getType()).getRank() == 4;
      if (packed && cast<MemRefType>(op.getAct().getType()).getDimSize(2) !=
                        kSmeTileRows) {
        op.emitError() << "SME2 outer products need tiles of " << kSmeTileRows
                       << " rows";
        return signalPassFailure();
      }
      int64_t rows = cast<MemRefType>(op.getPartials().getType()).getDimSize(1);
      if (!packed && rows > kMaxLeafRows) {
        op.emitError() << "SME2 partials of unpacked rows need at most " << kMaxLeafRows
                       << " rows (a ZA slice register plus offsets 0-7), got " << rows;
        return signalPassFailure();
      }
      if ((kg * CQ4P_KG_BLOCK_K) % 16 != 0) {
        op.emitError() << "SME2 partials need groups of a multiple of 16 K, got "
                       << kg * CQ4P_KG_BLOCK_K;
        return signalPassFailure();
      }
      // One leaf per kernel and kind (16-row tiles, single rows or R rows):
      // with the rescale loop that follows the partials fused into it when
      // there is one.
      FailureOr<scf::ForOp> recorded = recordedRescaleLoop(op);
      if (failed(recorded))
        return signalPassFailure();
      scf::ForOp rescaleLoop = *recorded;
      std::string kind = packed      ? "_sme_tile"
                         : rows == 1 ? "_sme_row"
                                     : "_sme_rows" + std::to_string(rows);
      std::string name =
          (parent.getSymName() + kind + (rescaleLoop ? "_matmul" : "_partials")).str();
      SmallVector<Value> operands{op.getPanels(), op.getCbI8(), op.getAct()};
      if (rescaleLoop) {
        auto rescale = *rescaleLoop.getBody()->getOps<RescaleOp>().begin();
        operands.append({rescale.getActScales(), rescale.getNormPanels(),
                         rescale.getAccum()});
      } else {
        operands.push_back(op.getPartials());
      }
      operands.append({op.getSuperBlock(), op.getRow(), op.getGroupBegin()});
      auto leafFunc = symbols.lookup<func::FuncOp>(name);
      if (!leafFunc) {
        OpBuilder b = OpBuilder::atBlockEnd(module.getBody());
        leafFunc = func::FuncOp::create(
            b, op.getLoc(), name,
            b.getFunctionType(ValueRange(operands).getTypes(), {}));
        leafFunc.setPrivate();
        leafFunc->setAttr("cq4p.sme_leaf", b.getUnitAttr());
        Block *entry = leafFunc.addEntryBlock();
        ValueRange a = entry->getArguments();
        LeafArgs args{a[0], a[1], a[2], a[a.size() - 3], a[a.size() - 2], a.back(),
                      Value(), std::nullopt};
        if (rescaleLoop)
          args.fused = FusedRescale{a[3], a[4], a[5]};
        else
          args.partials = a[3];
        OpBuilder body = OpBuilder::atBlockBegin(entry);
        if (packed)
          buildOuterProductLeafBody(body, op.getLoc(), op, args);
        else
          buildDotLeafBody(body, op.getLoc(), op, args);
        func::ReturnOp::create(body, op.getLoc());
        symbols.insert(leafFunc);
      }
      OpBuilder b(op);
      func::CallOp::create(b, op.getLoc(), leafFunc, operands);
      Value partials = op.getPartials();
      if (rescaleLoop)
        rescaleLoop.erase();
      op.erase();
      // The partials buffer of a fused leaf is no longer written or read.
      if (auto alloca = partials.getDefiningOp<memref::AllocaOp>();
          alloca && alloca->use_empty())
        alloca.erase();
    }
  }
};

} // namespace

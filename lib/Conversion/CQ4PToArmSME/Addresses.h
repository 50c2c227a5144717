//===- Addresses.h - raw addresses and vectors in the SME2 leaves -*- C++ -*-===//
//
// The streaming leaves address their operands as LLVM pointers plus byte
// offsets (the SME loads and stores take a pointer); the matmul leaves'
// builder (CQ4PToArmSME.cpp) and the others make them here. The emitters of
// the activation transform's leaf and of the attention leaves derive from
// StreamingBuilder, which holds what they share.
//
//===----------------------------------------------------------------------===//

#ifndef CQ4P_LIB_CONVERSION_CQ4PTOARMSME_ADDRESSES_H
#define CQ4P_LIB_CONVERSION_CQ4PTOARMSME_ADDRESSES_H

#include "cq4p/Codegen/EmitBuilder.h"
#include "cq4p/Dialect/CQ4PIntr/IR/CQ4PIntr.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/IR/Builders.h"

namespace mlir::cq4p::sme {

/// log2(e): the attention leaves multiply their queries by scale log2(e)
/// so that the scores come out in base 2 (StreamingBuilder::exp2Lanes).
constexpr double kLog2E = 1.4426950408889634;

/// The address of `memref`'s first element (its aligned pointer), as an
/// LLVM pointer.
inline Value alignedBase(OpBuilder &b, Location loc, Value memref) {
  Value address = memref::ExtractAlignedPointerAsIndexOp::create(b, loc, memref);
  Value address64 = arith::IndexCastOp::create(b, loc, b.getI64Type(), address);
  return LLVM::IntToPtrOp::create(
      b, loc, LLVM::LLVMPointerType::get(b.getContext()), address64);
}

/// `address` + `bytes` (an index), as a byte GEP.
inline Value byteOffset(OpBuilder &b, Location loc, Value address, Value bytes) {
  Value bytes64 = arith::IndexCastOp::create(b, loc, b.getI64Type(), bytes);
  return LLVM::GEPOp::create(b, loc, LLVM::LLVMPointerType::get(b.getContext()),
                             b.getI8Type(), address,
                             ArrayRef<LLVM::GEPArg>{bytes64});
}

/// EmitBuilder over a streaming leaf's 16-lane fp32 vectors (`floats`,
/// vector<[4]xf32> at vscale 4) and their 32-bit integer twin (`words`),
/// with raw addresses, unaligned-by-element loads and stores, and the
/// multi-vector loads' all-true predicate-as-counter (made once by
/// makeCounter, where every later use can see it).
class StreamingBuilder : public EmitBuilder {
public:
  StreamingBuilder(OpBuilder &b, Location loc)
      : EmitBuilder(b, loc, VectorType::get({4}, b.getF32Type(), {true})),
        words(VectorType::get({4}, b.getI32Type(), {true})) {}

  /// The address of a memref's first element.
  Value base(Value memref) { return alignedBase(b, loc, memref); }
  /// address + bytes (an index).
  Value at(Value address, Value bytes) { return byteOffset(b, loc, address, bytes); }
  /// The 16 floats at address, and back.
  Value load(Value address) { return LLVM::LoadOp::create(b, loc, floats, address, 4); }
  void store(Value value, Value address) { LLVM::StoreOp::create(b, loc, value, address, 4); }

  /// Makes the all-true predicate-as-counter of the multi-vector loads.
  void makeCounter() {
    allWords = cq4p_intr::SvePtrueC32Op::create(
        b, loc, LLVM::LLVMTargetExtType::get(b.getContext(), "aarch64.svcount", {}, {}));
  }
  Value counter() {
    assert(allWords && "makeCounter() first");
    return allWords;
  }

  /// Four vectors of `vector` as one value (a multi-vector operation's
  /// result), and back.
  Type quad(Type vector) {
    return LLVM::LLVMStructType::getLiteral(b.getContext(), {vector, vector, vector, vector});
  }
  SmallVector<Value> unpack(Value quadValue) {
    SmallVector<Value> vectors;
    for (int64_t i = 0; i < 4; ++i)
      vectors.push_back(LLVM::ExtractValueOp::create(b, loc, quadValue, i));
    return vectors;
  }
  /// Four consecutive fp32 vectors at `address` (multi-vector LD1W), and
  /// back (ST1W).
  SmallVector<Value> loadQuad(Value address) {
    return unpack(
        cq4p_intr::SveLd1PnX4Op::create(b, loc, quad(floats), counter(), address));
  }
  void storeQuad(ArrayRef<Value> v, Value address) {
    cq4p_intr::SveSt1PnX4Op::create(b, loc, v[0], v[1], v[2], v[3], counter(), address);
  }

  /// 2^x lane by lane for a softmax's x <= 0 (a small positive x, the
  /// rounding of a scaled maximum, is fine too): k = x rounded to an
  /// integer (adding and subtracting 1.5 * 2^23, three-operand FADD and
  /// FSUB where FRINTN would need a MOVPRFX), r = x - k exact with |r| <=
  /// 1/2 for |x| < 2^22, 2^r by exp2Fraction (NEON attention's polynomial;
  /// Horner: one MOVPRFX and five FMLA/FMAD; 1.8e-7 relative in fp32), then FSCALE by FCVTZS(k). No clamp: FCVTZS
  /// saturates, so for x below -2^22 (where k is still an integer and r
  /// small) the result is zero, and an underflow is a denormal or zero as
  /// FSCALE's rounding gives it. 10 instructions where expNonPositive (base
  /// e, Cody and Waite, its clamp and the exponent-field add every target
  /// has) takes 12, and the argument's scaling by log2(e) rides on the
  /// softmax's own FMA. Streaming leaves only: FSCALE is SVE's, and a
  /// softmax's weights need not equal NEON's bits (their polynomials and
  /// roundings already differ; FORMAT.md section 5).
  Value exp2Lanes(Value x) {
    auto ones = arith::ConstantOp::create(
        b, loc, DenseElementsAttr::get(VectorType::get({4}, b.getI1Type(), {true}), true));
    const float magic = 12582912.0f; // 1.5 * 2^23
    Value k = subF(addF(x, splatF32(magic)), splatF32(magic));
    Value p = exp2Fraction(subF(x, k));
    Value exponents = cq4p_intr::SveFcvtzsOp::create(
        b, loc, words, LLVM::PoisonOp::create(b, loc, words), ones, k);
    return cq4p_intr::SveFscaleOp::create(b, loc, floats, ones, p, exponents);
  }

  VectorType words;

private:
  Value allWords;
};

} // namespace mlir::cq4p::sme

#endif // CQ4P_LIB_CONVERSION_CQ4PTOARMSME_ADDRESSES_H

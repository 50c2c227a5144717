//===- Addresses.h - raw addresses in the SME2 leaves ----------*- C++ -*-===//
//
// The streaming leaves address their operands as LLVM pointers plus byte
// offsets (the SME loads and stores take a pointer); the matmul leaves'
// builder (CQ4PToArmSME.cpp) and the decode attention's (DecodeAttention.cpp)
// both make them here.
//
//===----------------------------------------------------------------------===//

#ifndef CQ4P_LIB_CONVERSION_CQ4PTOARMSME_ADDRESSES_H
#define CQ4P_LIB_CONVERSION_CQ4PTOARMSME_ADDRESSES_H

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/IR/Builders.h"

namespace mlir::cq4p::sme {

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

} // namespace mlir::cq4p::sme

#endif // CQ4P_LIB_CONVERSION_CQ4PTOARMSME_ADDRESSES_H

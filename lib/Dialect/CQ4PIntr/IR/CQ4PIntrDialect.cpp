//===- CQ4PIntrDialect.cpp - the cq4p_intr dialect ------------------------===//
//
// The dialect's registration and the type predicates its ODS constraints
// call; the operations are all declared in CQ4PIntr.td.
//
//===----------------------------------------------------------------------===//

#include "cq4p/Dialect/CQ4PIntr/IR/CQ4PIntr.h"

#include "llvm/ADT/STLExtras.h"

using namespace mlir;
using namespace mlir::cq4p_intr;

#include "cq4p/Dialect/CQ4PIntr/IR/CQ4PIntrDialect.cpp.inc"

void CQ4PIntrDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "cq4p/Dialect/CQ4PIntr/IR/CQ4PIntr.cpp.inc"
      >();
}

bool mlir::cq4p_intr::isSvCount(Type type) {
  auto target = dyn_cast<LLVM::LLVMTargetExtType>(type);
  return target && target.getExtTypeName() == "aarch64.svcount" &&
         target.getTypeParams().empty() && target.getIntParams().empty();
}

bool mlir::cq4p_intr::isUniformStruct(Type type, unsigned count) {
  auto structType = dyn_cast<LLVM::LLVMStructType>(type);
  if (!structType || structType.isIdentified() || structType.isPacked())
    return false;
  ArrayRef<Type> body = structType.getBody();
  return body.size() == count && llvm::all_equal(body);
}

#define GET_OP_CLASSES
#include "cq4p/Dialect/CQ4PIntr/IR/CQ4PIntr.cpp.inc"

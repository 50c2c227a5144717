//===- CQ4PDialect.cpp - the cq4p dialect ---------------------------------===//

#include "cq4p/Dialect/CQ4P/IR/CQ4P.h"

#include "mlir/IR/DialectImplementation.h"

using namespace mlir;
using namespace mlir::cq4p;

#include "cq4p/Dialect/CQ4P/IR/CQ4PDialect.cpp.inc"
#include "cq4p/Dialect/CQ4P/IR/CQ4PEnums.cpp.inc"

void CQ4PDialect::initialize() {
  registerTypes();
  addOperations<
#define GET_OP_LIST
#include "cq4p/Dialect/CQ4P/IR/CQ4POps.cpp.inc"
      >();
}

//===- CQ4P.h - the cq4p dialect, its types and ops -------------*- C++ -*-===//

#ifndef CQ4P_DIALECT_CQ4P_IR_CQ4P_H
#define CQ4P_DIALECT_CQ4P_IR_CQ4P_H

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "cq4p/Dialect/CQ4P/IR/CQ4PDialect.h.inc"
#include "cq4p/Dialect/CQ4P/IR/CQ4PEnums.h.inc"

namespace mlir::cq4p {
/// Parses an enum written as a bare keyword (`hadamard`, `panels`).
template <typename EnumT>
FailureOr<EnumT> parseEnumKeyword(AsmParser &parser, StringRef what,
                                  StringRef choices) {
  SMLoc loc = parser.getCurrentLocation();
  StringRef keyword;
  if (parser.parseOptionalKeyword(&keyword))
    return parser.emitError(loc) << "expected a " << what << " (" << choices
                                 << ")";
  if (std::optional<EnumT> value = symbolizeEnum<EnumT>(keyword))
    return *value;
  return parser.emitError(loc) << "expected a " << what << " (" << choices
                               << "), got '" << keyword << "'";
}
} // namespace mlir::cq4p

#define GET_ATTRDEF_CLASSES
#include "cq4p/Dialect/CQ4P/IR/CQ4PAttrs.h.inc"

#define GET_TYPEDEF_CLASSES
#include "cq4p/Dialect/CQ4P/IR/CQ4PTypes.h.inc"

#define GET_OP_CLASSES
#include "cq4p/Dialect/CQ4P/IR/CQ4POps.h.inc"

#endif // CQ4P_DIALECT_CQ4P_IR_CQ4P_H

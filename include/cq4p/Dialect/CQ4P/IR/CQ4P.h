//===- CQ4P.h - the cq4p dialect, its types and ops -------------*- C++ -*-===//

#ifndef CQ4P_DIALECT_CQ4P_IR_CQ4P_H
#define CQ4P_DIALECT_CQ4P_IR_CQ4P_H

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinAttributes.h"
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

/// A parameter of a kernel function (`#cq4p.kernel`'s `params`): its ABI
/// name, its type, and the integer parameter that gives its dynamic
/// dimension (null: the op's row count).
struct KernelParameter {
  StringAttr name;
  Type type;
  StringAttr sizedBy;

  bool operator==(const KernelParameter &other) const {
    return name == other.name && type == other.type &&
           sizedBy == other.sizedBy;
  }
};

inline llvm::hash_code hash_value(const KernelParameter &param) {
  return llvm::hash_combine(param.name, param.type, param.sizedBy);
}

/// A bound tensor of a model (`#cq4p.model_plan`'s `bindings`), as the
/// library's descriptor records it: a CQ4 weight's N, K, group size and
/// rotation, a dense tensor's element count (`n`).
struct PlanBinding {
  StringAttr tensor;
  BindingKind kind;
  int64_t n = 0, k = 0, groupSize = 0;
  bool orthogonal = false;

  bool operator==(const PlanBinding &other) const {
    return tensor == other.tensor && kind == other.kind && n == other.n &&
           k == other.k && groupSize == other.groupSize &&
           orthogonal == other.orthogonal;
  }
};

inline llvm::hash_code hash_value(const PlanBinding &binding) {
  return llvm::hash_combine(binding.tensor, binding.kind, binding.n, binding.k,
                            binding.groupSize, binding.orthogonal);
}
} // namespace mlir::cq4p

#define GET_ATTRDEF_CLASSES
#include "cq4p/Dialect/CQ4P/IR/CQ4PAttrs.h.inc"

#define GET_TYPEDEF_CLASSES
#include "cq4p/Dialect/CQ4P/IR/CQ4PTypes.h.inc"

#define GET_OP_CLASSES
#include "cq4p/Dialect/CQ4P/IR/CQ4POps.h.inc"

namespace mlir::cq4p {
/// The discardable attribute holding a kernel op's #cq4p.strategy
/// (cq4p-select-strategy records it; tiling and the conversions read it).
inline constexpr llvm::StringLiteral kStrategyAttrName = "cq4p.strategy";

/// `op`'s recorded strategy, or null where none was recorded.
inline StrategyAttr getStrategy(Operation *op) {
  return op->getAttrOfType<StrategyAttr>(kStrategyAttrName);
}
} // namespace mlir::cq4p

#endif // CQ4P_DIALECT_CQ4P_IR_CQ4P_H

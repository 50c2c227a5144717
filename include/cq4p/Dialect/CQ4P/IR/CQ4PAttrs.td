//===- CQ4PAttrs.td - cq4p enums ---------------------------*- tablegen -*-===//

#ifndef CQ4P_DIALECT_CQ4P_IR_CQ4PATTRS_TD
#define CQ4P_DIALECT_CQ4P_IR_CQ4PATTRS_TD

include "mlir/IR/EnumAttr.td"
include "cq4p/Dialect/CQ4P/IR/CQ4PDialect.td"

def CQ4P_Rotation : I32EnumAttr<"Rotation", "rotation family of a CQ4 weight", [
    I32EnumAttrCase<"hadamard", 0>,
    I32EnumAttrCase<"orthogonal", 1>,
  ]> {
  let cppNamespace = "::mlir::cq4p";
  let genSpecializedAttr = 0;
}

def CQ4P_Layout : I32EnumAttr<"Layout", "data layout of a CQ4 weight file", [
    I32EnumAttrCase<"panels", 0>,
    I32EnumAttrCase<"interleaved4row", 1>,
  ]> {
  let cppNamespace = "::mlir::cq4p";
  let genSpecializedAttr = 0;
}

#endif // CQ4P_DIALECT_CQ4P_IR_CQ4PATTRS_TD

//===- CQ4PToArmSME.h - convert-cq4p-to-arm-sme -----------------*- C++ -*-===//

#ifndef CQ4P_CONVERSION_CQ4PTOARMSME_CQ4PTOARMSME_H
#define CQ4P_CONVERSION_CQ4PTOARMSME_CQ4PTOARMSME_H

#include "mlir/Pass/Pass.h"

namespace mlir::cq4p {

#define GEN_PASS_DECL_CONVERTCQ4PTOARMSME
#include "cq4p/Conversion/Passes.h.inc"

} // namespace mlir::cq4p

#endif // CQ4P_CONVERSION_CQ4PTOARMSME_CQ4PTOARMSME_H

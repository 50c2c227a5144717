//===- CQ4PDialect.td - the cq4p dialect -------------------*- tablegen -*-===//
//
// The dialect of CQ4 packed-panel matmuls: 4-bit rotated-codebook weights
// stored as 64-channel panels (docs/FORMAT.md section 3), and the ops that consume them.
//
//===----------------------------------------------------------------------===//

#ifndef CQ4P_DIALECT_CQ4P_IR_CQ4PDIALECT_TD
#define CQ4P_DIALECT_CQ4P_IR_CQ4PDIALECT_TD

include "mlir/IR/OpBase.td"

def CQ4P_Dialect : Dialect {
  let name = "cq4p";
  let cppNamespace = "::mlir::cq4p";
  let summary = "CQ4 packed-panel weights and the matmuls over them";
  let description = [{
    CQ4 weights are 4-bit indices into a 16-level codebook, in a rotated basis
    (per-group Hadamard for linear layers, a dense orthogonal rotation for the
    token embedding and lm_head), with one norm per (row, group). On disk
    they are stored as 64-channel panels whose bytes are at once the NEON SDOT
    micro-tile and the SME2 LUTI4 streaming layout; the kernels cq4p
    generates read those bytes straight from the mapped file.

    Graph-level ops (`cq4p.linear`) work on tensors and carry the weight as
    a value of type `!cq4p.weight`, whose parameters fix everything a
    kernel needs to know about the file: N, K, the group size, the rotation
    family and the data layout.
  }];
  let useDefaultTypePrinterParser = 1;
  let useDefaultAttributePrinterParser = 1;
  // The discardable `cq4p.*` attributes the passes exchange (`cq4p.model`,
  // `cq4p.model_plan`, `cq4p.kernel`, `cq4p.kernels`, `cq4p.sme_leaf`, and
  // on arguments `cq4p.tensor` and `cq4p.transform`) are verified where
  // they appear.
  let hasOperationAttrVerify = 1;
  let hasRegionArgAttrVerify = 1;
  let extraClassDeclaration = [{
    void registerTypes();
    void registerAttributes();
  }];
}

class CQ4P_Op<string mnemonic, list<Trait> traits = []>
    : Op<CQ4P_Dialect, mnemonic, traits>;

#endif // CQ4P_DIALECT_CQ4P_IR_CQ4PDIALECT_TD

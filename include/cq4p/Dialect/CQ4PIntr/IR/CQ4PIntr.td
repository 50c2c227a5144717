//===- CQ4PIntr.td - LLVM intrinsics the kernels call ------*- tablegen -*-===//
//
// The LLVM intrinsics cq4p's lowerings call that no upstream dialect has an
// operation for (as of MLIR 22), one typed operation each, on the LLVM
// dialect's LLVM_IntrOpBase as upstream ArmSME, ArmSVE and ArmNeon declare
// theirs: the operand and result types are checked by the verifier, and the
// op translates to exactly one call of the intrinsic (the dialect's LLVM IR
// translation interface, CQ4PIntrToLLVMIRTranslation.cpp).
//
// Why a dialect of its own and not ops in `cq4p`: these are LLVM-level
// operations on LLVM types (pointers, literal structs of multi-vector
// results, `!llvm.target<"aarch64.svcount">`) for three instruction sets,
// created by the conversions after the cq4p ops are gone; the cq4p dialect
// holds the weight format and its kernels. A separate dialect keeps the
// graph dialect free of target detail, and lets the LLVM IR translation
// register for exactly these ops (as upstream keeps `arm_sme.intr.*` next to
// but apart from the LLVM dialect).
//
// Naming: an op is its intrinsic's name without `llvm.` and without the type
// suffixes of an overloaded intrinsic, which the operand and result types
// give back: `llvm.aarch64.neon.tbl1.v16i8` is `cq4p_intr.aarch64.neon.tbl1`
// on vector<16xi8>. Where upstream has the operation, the lowerings use it
// (`arm_neon.intr.sdot`, `arm_sme.intr.smopa.wide`, `.mopa`, `.zero`, `.str`,
// `.ld1w.horiz`, `.read.horiz`); X86Vector's `avx.dot.i8` is VPDPBSSD
// (signed x signed), not the VPDPBUSD used here.
//
// Memory effects: operations that only compute are Pure; loads and stores
// name their pointer's effect; ZA and ZT0 operations (SME, LDR ZT0
// included) keep the unknown effects of a call, as upstream's
// `arm_sme.intr.*` do.
//
// `cq4p_intr.opaque` and `cq4p_intr.x86.cpuid_vendor` are the two operations
// here that are no intrinsic (LLVM has none for them): see their
// descriptions.
//
//===----------------------------------------------------------------------===//

#ifndef CQ4P_DIALECT_CQ4PINTR_IR_CQ4PINTR_TD
#define CQ4P_DIALECT_CQ4PINTR_IR_CQ4PINTR_TD

include "mlir/Dialect/LLVMIR/LLVMOpBase.td"
include "mlir/Interfaces/SideEffectInterfaces.td"

def CQ4PIntr_Dialect : Dialect {
  let name = "cq4p_intr";
  let cppNamespace = "::mlir::cq4p_intr";
  let summary = "typed LLVM intrinsics of NEON, SVE/SME2 and x86 for cq4p's kernels";
  let dependentDialects = ["::mlir::LLVM::LLVMDialect"];
}

//===----------------------------------------------------------------------===//
// Type constraints
//===----------------------------------------------------------------------===//

def CQ4PIntr_SvCount : Type<
    CPred<"::mlir::cq4p_intr::isSvCount($_self)">,
    "a predicate-as-counter (!llvm.target<\"aarch64.svcount\">)">;

// A literal struct of `n` values of `element`: an intrinsic's `n` results.
class CQ4PIntr_MultiVector<int n, Type element> : Type<
    And<[CPred<"::mlir::cq4p_intr::isUniformStruct($_self, " # n # ")">,
         SubstLeaves<"$_self",
                     "::llvm::cast<::mlir::LLVM::LLVMStructType>($_self).getBody()[0]",
                     element.predicate>]>,
    "a literal struct of " # n # " " # element.summary>;

def CQ4PIntr_I8x16 : VectorOfLengthAndType<[16], [I8]>;
def CQ4PIntr_NxI8x16 : ScalableVectorOfLengthAndType<[16], [I8]>;
def CQ4PIntr_NxI32x4 : ScalableVectorOfLengthAndType<[4], [I32]>;
def CQ4PIntr_NxF32x4 : ScalableVectorOfLengthAndType<[4], [F32]>;
def CQ4PIntr_NxF16x8 : ScalableVectorOfLengthAndType<[8], [F16]>;
def CQ4PIntr_NxI1x4 : ScalableVectorOfLengthAndType<[4], [I1]>;
def CQ4PIntr_NxI1x16 : ScalableVectorOfLengthAndType<[16], [I1]>;

//===----------------------------------------------------------------------===//
// Base classes
//===----------------------------------------------------------------------===//

// An intrinsic, `llvm.<mnemonic>[.<overload types>]`: its enum is the
// mnemonic with `_` for `.`. numResults > 1 is a literal struct of that many
// results; overloadedResults index its members.
class CQ4PIntr_Op<string mnemonic, list<Trait> traits = [],
                  int numResults = 1, list<int> overloadedResults = [],
                  list<int> overloadedOperands = [],
                  list<int> immArgPositions = [],
                  list<string> immArgAttrNames = []>
    : LLVM_IntrOpBase</*dialect=*/CQ4PIntr_Dialect,
                      /*opName=*/mnemonic,
                      /*enumName=*/!subst(".", "_", mnemonic),
                      /*overloadedResults=*/overloadedResults,
                      /*overloadedOperands=*/overloadedOperands,
                      /*traits=*/traits,
                      /*numResults=*/numResults,
                      /*requiresAccessGroup=*/0,
                      /*requiresAliasAnalysis=*/0,
                      /*requiresFastmath=*/0,
                      /*requiresArgAndResultAttrs=*/0,
                      /*requiresOpBundles=*/0,
                      /*immArgPositions=*/immArgPositions,
                      /*immArgAttrNames=*/immArgAttrNames> {
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
}

//===----------------------------------------------------------------------===//
// AArch64 NEON
//===----------------------------------------------------------------------===//

// LD1 (four registers) and LD2: a structure load from an LLVM pointer.
class CQ4PIntr_NeonStructLoad<string mnemonic, int count>
    : CQ4PIntr_Op<"aarch64.neon." # mnemonic, [], count,
                  /*overloadedResults=*/[0], /*overloadedOperands=*/[0]>,
      Arguments<(ins Arg<LLVM_AnyPointer, "address", [MemRead]>:$address)> {
  let results = (outs CQ4PIntr_MultiVector<count, CQ4PIntr_I8x16>:$res);
}

def CQ4PIntr_NeonLd1x4Op : CQ4PIntr_NeonStructLoad<"ld1x4", 4> {
  let summary = "64 bytes into four registers (LD1 {v0-v3}.16b)";
  let description = [{
    The 64 consecutive bytes at `address` as four vectors of 16, in order.

    Example:

    ```mlir
    %q = cq4p_intr.aarch64.neon.ld1x4 %p : (!llvm.ptr)
        -> !llvm.struct<(vector<16xi8>, vector<16xi8>, vector<16xi8>, vector<16xi8>)>
    ```
  }];
}

def CQ4PIntr_NeonLd2Op : CQ4PIntr_NeonStructLoad<"ld2", 2> {
  let summary = "32 bytes de-interleaved into even and odd bytes (LD2 .16b)";
  let description = [{
    The 32 bytes at `address`: member 0 holds the even bytes, member 1 the
    odd ones.

    Example:

    ```mlir
    %pair = cq4p_intr.aarch64.neon.ld2 %p : (!llvm.ptr)
        -> !llvm.struct<(vector<16xi8>, vector<16xi8>)>
    ```
  }];
}

// TBL with 1, 2 or 4 table registers: byte i of the result is table byte
// index[i], 0 where the index is out of range.
class CQ4PIntr_NeonTbl<string mnemonic, int tables, dag tableArgs>
    : CQ4PIntr_Op<"aarch64.neon." # mnemonic, [Pure], 1, /*overloadedResults=*/[0]>,
      Arguments<!con(tableArgs, (ins CQ4PIntr_I8x16:$index))> {
  let results = (outs CQ4PIntr_I8x16:$res);
  let summary = "table lookup in " # tables # " registers (TBL)";
  let description = [{
    Byte i of the result is byte `index[i]` of the tables' concatenation,
    0 where `index[i]` is past its end.

    Example:

    ```mlir
    %r = cq4p_intr.aarch64.neon.tbl1 %table, %index
        : (vector<16xi8>, vector<16xi8>) -> vector<16xi8>
    ```
  }];
}

def CQ4PIntr_NeonTbl1Op : CQ4PIntr_NeonTbl<"tbl1", 1,
    (ins CQ4PIntr_I8x16:$table)>;
def CQ4PIntr_NeonTbl2Op : CQ4PIntr_NeonTbl<"tbl2", 2,
    (ins CQ4PIntr_I8x16:$table0, CQ4PIntr_I8x16:$table1)>;
def CQ4PIntr_NeonTbl4Op : CQ4PIntr_NeonTbl<"tbl4", 4,
    (ins CQ4PIntr_I8x16:$table0, CQ4PIntr_I8x16:$table1,
         CQ4PIntr_I8x16:$table2, CQ4PIntr_I8x16:$table3)>;

def CQ4PIntr_NeonTbx4Op
    : CQ4PIntr_Op<"aarch64.neon.tbx4", [Pure, AllTypesMatch<["fallback", "res"]>],
                  1, /*overloadedResults=*/[0]>,
      Arguments<(ins CQ4PIntr_I8x16:$fallback,
                 CQ4PIntr_I8x16:$table0, CQ4PIntr_I8x16:$table1,
                 CQ4PIntr_I8x16:$table2, CQ4PIntr_I8x16:$table3,
                 CQ4PIntr_I8x16:$index)> {
  let results = (outs CQ4PIntr_I8x16:$res);
  let summary = "table lookup in 4 registers, out-of-range bytes kept (TBX)";
  let description = [{
    As `tbl4`, but byte i keeps `fallback[i]` where `index[i]` is past the
    64 table bytes.

    Example:

    ```mlir
    %r = cq4p_intr.aarch64.neon.tbx4 %old, %t0, %t1, %t2, %t3, %index
        : (vector<16xi8>, vector<16xi8>, vector<16xi8>, vector<16xi8>,
           vector<16xi8>, vector<16xi8>) -> vector<16xi8>
    ```
  }];
}

def CQ4PIntr_NeonSqxtnOp
    : CQ4PIntr_Op<"aarch64.neon.sqxtn",
                  [Pure, TypesMatchWith<
                      "the source has the result's lanes at twice the width",
                      "res", "source",
                      "::mlir::VectorType::get(::llvm::cast<::mlir::VectorType>($_self).getShape(), "
                      "::mlir::IntegerType::get($_self.getContext(), 2 * "
                      "::llvm::cast<::mlir::VectorType>($_self).getElementTypeBitWidth()))">],
                  1, /*overloadedResults=*/[0]>,
      Arguments<(ins VectorOfLengthAndType<[4, 8], [I32, I16]>:$source)> {
  let results = (outs VectorOfLengthAndType<[4, 8], [I16, I8]>:$res);
  let summary = "signed saturating narrow to half the width (SQXTN)";
  let description = [{
    Each lane of `source` clamped to the range of the half-width integer.

    Example:

    ```mlir
    %h = cq4p_intr.aarch64.neon.sqxtn %w : (vector<4xi32>) -> vector<4xi16>
    %b = cq4p_intr.aarch64.neon.sqxtn %h8 : (vector<8xi16>) -> vector<8xi8>
    ```
  }];
}

def CQ4PIntr_NeonFcvtnsOp
    : CQ4PIntr_Op<"aarch64.neon.fcvtns", [Pure], 1,
                  /*overloadedResults=*/[0], /*overloadedOperands=*/[0]>,
      Arguments<(ins VectorOfLengthAndType<[4], [F32]>:$source)> {
  let results = (outs VectorOfLengthAndType<[4], [I32]>:$res);
  let summary = "fp32 to int32, rounding to nearest with ties to even (FCVTNS)";
  let description = [{
    Example:

    ```mlir
    %i = cq4p_intr.aarch64.neon.fcvtns %f : (vector<4xf32>) -> vector<4xi32>
    ```
  }];
}

//===----------------------------------------------------------------------===//
// AArch64 SVE and SME2 (streaming mode)
//===----------------------------------------------------------------------===//

def CQ4PIntr_SvePtrueC8Op
    : CQ4PIntr_Op<"aarch64.sve.ptrue.c8", [Pure]> {
  let results = (outs CQ4PIntr_SvCount:$res);
  let summary = "an all-true predicate-as-counter for bytes (PTRUE PN.B)";
  let description = [{
    Example:

    ```mlir
    %pn = cq4p_intr.aarch64.sve.ptrue.c8 : () -> !llvm.target<"aarch64.svcount">
    ```
  }];
}

def CQ4PIntr_SvePtrueC16Op
    : CQ4PIntr_Op<"aarch64.sve.ptrue.c16", [Pure]> {
  let results = (outs CQ4PIntr_SvCount:$res);
  let summary = "an all-true predicate-as-counter for 16-bit elements (PTRUE PN.H)";
  let description = [{
    Example:

    ```mlir
    %pn = cq4p_intr.aarch64.sve.ptrue.c16 : () -> !llvm.target<"aarch64.svcount">
    ```
  }];
}

def CQ4PIntr_SvePtrueC32Op
    : CQ4PIntr_Op<"aarch64.sve.ptrue.c32", [Pure]> {
  let results = (outs CQ4PIntr_SvCount:$res);
  let summary = "an all-true predicate-as-counter for 32-bit elements (PTRUE PN.S)";
  let description = [{
    Example:

    ```mlir
    %pn = cq4p_intr.aarch64.sve.ptrue.c32 : () -> !llvm.target<"aarch64.svcount">
    ```
  }];
}

def CQ4PIntr_SveLd1rqOp
    : CQ4PIntr_Op<"aarch64.sve.ld1rq", [], 1, /*overloadedResults=*/[0]>,
      Arguments<(ins CQ4PIntr_NxI1x16:$predicate,
                 Arg<LLVM_AnyPointer, "address", [MemRead]>:$address)> {
  let results = (outs CQ4PIntr_NxI8x16:$res);
  let summary = "16 bytes replicated into every 128-bit segment (LD1RQB)";
  let description = [{
    Example:

    ```mlir
    %a = cq4p_intr.aarch64.sve.ld1rq %pg, %p
        : (vector<[16]xi1>, !llvm.ptr) -> vector<[16]xi8>
    ```
  }];
}

class CQ4PIntr_SveLoadPn<int count, Type element>
    : CQ4PIntr_Op<"aarch64.sve.ld1.pn.x" # count, [], count,
                  /*overloadedResults=*/[0]>,
      Arguments<(ins CQ4PIntr_SvCount:$counter,
                 Arg<LLVM_AnyPointer, "address", [MemRead]>:$address)> {
  let results = (outs CQ4PIntr_MultiVector<count, element>:$res);
  let summary = count # " consecutive streaming vectors (multi-vector LD1)";
  let description = [{
    The vectors at `address`, `address` + 1 vector length, ..., under a
    predicate-as-counter.

    Example:

    ```mlir
    %q = cq4p_intr.aarch64.sve.ld1.pn.x4 %pn, %p
        : (!llvm.target<"aarch64.svcount">, !llvm.ptr)
        -> !llvm.struct<(vector<[16]xi8>, vector<[16]xi8>, vector<[16]xi8>,
                         vector<[16]xi8>)>
    ```
  }];
}

def CQ4PIntr_SveLd1PnX2Op : CQ4PIntr_SveLoadPn<2, CQ4PIntr_NxI8x16>;
def CQ4PIntr_SveLd1PnX4Op : CQ4PIntr_SveLoadPn<4,
    AnyTypeOf<[CQ4PIntr_NxI8x16, CQ4PIntr_NxF32x4, CQ4PIntr_NxF16x8]>>;

// FCVT and FCVTLT from fp16 to fp32: the even (bottom) or odd (top) fp16
// elements of a vector widened into its 32-bit lanes.
class CQ4PIntr_SveWidenHalves<string mnemonic, string half>
    : CQ4PIntr_Op<"aarch64.sve." # mnemonic # ".f32f16", [Pure]>,
      Arguments<(ins CQ4PIntr_NxF32x4:$inactive, CQ4PIntr_NxI1x4:$predicate,
                 CQ4PIntr_NxF16x8:$halves)> {
  let results = (outs CQ4PIntr_NxF32x4:$res);
  let summary = "the " # half # " fp16 elements widened to fp32 (" #
                !toupper(mnemonic) # ")";
  let description = [{
    Lane i of the result is element 2i (FCVT) or 2i + 1 (FCVTLT) of
    `halves` widened to fp32 (exact), where `predicate` is set, else lane i
    of `inactive`.

    Example:

    ```mlir
    %even = cq4p_intr.aarch64.sve.fcvt.f32f16 %undef, %pg, %h
        : (vector<[4]xf32>, vector<[4]xi1>, vector<[8]xf16>) -> vector<[4]xf32>
    %odd = cq4p_intr.aarch64.sve.fcvtlt.f32f16 %undef, %pg, %h
        : (vector<[4]xf32>, vector<[4]xi1>, vector<[8]xf16>) -> vector<[4]xf32>
    ```
  }];
}

def CQ4PIntr_SveFcvtF32F16Op : CQ4PIntr_SveWidenHalves<"fcvt", "even (bottom)">;
def CQ4PIntr_SveFcvtltF32F16Op : CQ4PIntr_SveWidenHalves<"fcvtlt", "odd (top)">;

// The streaming softmax's power of two: FCVTZS to int32 (saturating) and
// FSCALE.

def CQ4PIntr_SveFcvtzsOp
    : CQ4PIntr_Op<"aarch64.sve.fcvtzs", [Pure], 1, /*overloadedResults=*/[0],
                  /*overloadedOperands=*/[2]>,
      Arguments<(ins CQ4PIntr_NxI32x4:$inactive, CQ4PIntr_NxI1x4:$predicate,
                 CQ4PIntr_NxF32x4:$value)> {
  let results = (outs CQ4PIntr_NxI32x4:$res);
  let summary = "fp32 to int32 toward zero, saturating (SVE FCVTZS)";
  let description = [{
    Lane i of the result is lane i of `value` converted toward zero, a
    value beyond int32's range saturated (arith.fptosi would be poison
    there), where `predicate` is set, else lane i of `inactive`.

    Example:

    ```mlir
    %k = cq4p_intr.aarch64.sve.fcvtzs %undef, %pg, %x
        : (vector<[4]xi32>, vector<[4]xi1>, vector<[4]xf32>) -> vector<[4]xi32>
    ```
  }];
}

def CQ4PIntr_SveFscaleOp
    : CQ4PIntr_Op<"aarch64.sve.fscale", [Pure], 1, /*overloadedResults=*/[0]>,
      Arguments<(ins CQ4PIntr_NxI1x4:$predicate, CQ4PIntr_NxF32x4:$value,
                 CQ4PIntr_NxI32x4:$exponents)> {
  let results = (outs CQ4PIntr_NxF32x4:$res);
  let summary = "fp32 lanes times two to an integer power (SVE FSCALE)";
  let description = [{
    Lane i of the result is `value[i] * 2^exponents[i]`, rounded once (a
    denormal or zero where it underflows), where `predicate` is set, else
    lane i of `value`.

    Example:

    ```mlir
    %y = cq4p_intr.aarch64.sve.fscale %pg, %p, %k
        : (vector<[4]xi1>, vector<[4]xf32>, vector<[4]xi32>) -> vector<[4]xf32>
    ```
  }];
}

def CQ4PIntr_SveSt1PnX4Op
    : CQ4PIntr_Op<"aarch64.sve.st1.pn.x4",
                  [AllTypesMatch<["v0", "v1", "v2", "v3"]>], 0, [],
                  /*overloadedOperands=*/[0]>,
      Arguments<(ins AnyTypeOf<[CQ4PIntr_NxI32x4, CQ4PIntr_NxF32x4]>:$v0,
                 AnyTypeOf<[CQ4PIntr_NxI32x4, CQ4PIntr_NxF32x4]>:$v1,
                 AnyTypeOf<[CQ4PIntr_NxI32x4, CQ4PIntr_NxF32x4]>:$v2,
                 AnyTypeOf<[CQ4PIntr_NxI32x4, CQ4PIntr_NxF32x4]>:$v3,
                 CQ4PIntr_SvCount:$counter,
                 Arg<LLVM_AnyPointer, "address", [MemWrite]>:$address)> {
  let summary = "four streaming vectors to consecutive memory (multi-vector ST1W)";
  let description = [{
    Example:

    ```mlir
    cq4p_intr.aarch64.sve.st1.pn.x4 %a, %b, %c, %d, %pn, %p
        : (vector<[4]xf32>, vector<[4]xf32>, vector<[4]xf32>, vector<[4]xf32>,
           !llvm.target<"aarch64.svcount">, !llvm.ptr) -> ()
    ```
  }];
}

def CQ4PIntr_SveScvtfX4Op
    : CQ4PIntr_Op<"aarch64.sve.scvtf.x4", [Pure], 4,
                  /*overloadedResults=*/[0], /*overloadedOperands=*/[0]>,
      Arguments<(ins CQ4PIntr_NxI32x4:$v0, CQ4PIntr_NxI32x4:$v1,
                 CQ4PIntr_NxI32x4:$v2, CQ4PIntr_NxI32x4:$v3)> {
  let results = (outs CQ4PIntr_MultiVector<4, CQ4PIntr_NxF32x4>:$res);
  let summary = "four int32 vectors to fp32 (multi-vector SCVTF)";
  let description = [{
    Example:

    ```mlir
    %f = cq4p_intr.aarch64.sve.scvtf.x4 %a, %b, %c, %d
        : (vector<[4]xi32>, vector<[4]xi32>, vector<[4]xi32>, vector<[4]xi32>)
        -> !llvm.struct<(vector<[4]xf32>, vector<[4]xf32>, vector<[4]xf32>,
                         vector<[4]xf32>)>
    ```
  }];
}

// The streaming activation transform's lane permutations and its
// rounding and narrowing of four vectors at a time.

def CQ4PIntr_SveTblOp
    : CQ4PIntr_Op<"aarch64.sve.tbl", [Pure], 1, /*overloadedResults=*/[0]>,
      Arguments<(ins CQ4PIntr_NxF32x4:$table, CQ4PIntr_NxI32x4:$indices)> {
  let results = (outs CQ4PIntr_NxF32x4:$res);
  let summary = "a lane permutation of one fp32 vector (SVE TBL)";
  let description = [{
    Lane i of the result is lane `indices[i]` of `table`, zero where the
    index is out of range.

    Example:

    ```mlir
    %t = cq4p_intr.aarch64.sve.tbl %v, %i
        : (vector<[4]xf32>, vector<[4]xi32>) -> vector<[4]xf32>
    ```
  }];
}

def CQ4PIntr_SveTbl2Op
    : CQ4PIntr_Op<"aarch64.sve.tbl2", [Pure], 1, /*overloadedResults=*/[0]>,
      Arguments<(ins CQ4PIntr_NxI8x16:$table0, CQ4PIntr_NxI8x16:$table1,
                 CQ4PIntr_NxI8x16:$indices)> {
  let results = (outs CQ4PIntr_NxI8x16:$res);
  let summary = "a byte lookup in a table of two vectors (SVE2 TBL, two registers)";
  let description = [{
    Byte i of the result is byte `indices[i]` of `table0` followed by
    `table1`, zero where the index is at or beyond their two vector lengths.

    Example:

    ```mlir
    %t = cq4p_intr.aarch64.sve.tbl2 %a, %b, %i
        : (vector<[16]xi8>, vector<[16]xi8>, vector<[16]xi8>) -> vector<[16]xi8>
    ```
  }];
}

def CQ4PIntr_SveFrintnX4Op
    : CQ4PIntr_Op<"aarch64.sve.frintn.x4", [Pure], 4, /*overloadedResults=*/[0]>,
      Arguments<(ins CQ4PIntr_NxF32x4:$v0, CQ4PIntr_NxF32x4:$v1,
                 CQ4PIntr_NxF32x4:$v2, CQ4PIntr_NxF32x4:$v3)> {
  let results = (outs CQ4PIntr_MultiVector<4, CQ4PIntr_NxF32x4>:$res);
  let summary = "four fp32 vectors rounded to integers, ties to even (multi-vector FRINTN)";
  let description = [{
    Example:

    ```mlir
    %r = cq4p_intr.aarch64.sve.frintn.x4 %a, %b, %c, %d
        : (vector<[4]xf32>, vector<[4]xf32>, vector<[4]xf32>, vector<[4]xf32>)
        -> !llvm.struct<(vector<[4]xf32>, vector<[4]xf32>, vector<[4]xf32>,
                         vector<[4]xf32>)>
    ```
  }];
}

def CQ4PIntr_SveFcvtzsX4Op
    : CQ4PIntr_Op<"aarch64.sve.fcvtzs.x4", [Pure], 4,
                  /*overloadedResults=*/[0], /*overloadedOperands=*/[0]>,
      Arguments<(ins CQ4PIntr_NxF32x4:$v0, CQ4PIntr_NxF32x4:$v1,
                 CQ4PIntr_NxF32x4:$v2, CQ4PIntr_NxF32x4:$v3)> {
  let results = (outs CQ4PIntr_MultiVector<4, CQ4PIntr_NxI32x4>:$res);
  let summary = "four fp32 vectors to int32 toward zero, saturating (multi-vector FCVTZS)";
  let description = [{
    Example:

    ```mlir
    %i = cq4p_intr.aarch64.sve.fcvtzs.x4 %a, %b, %c, %d
        : (vector<[4]xf32>, vector<[4]xf32>, vector<[4]xf32>, vector<[4]xf32>)
        -> !llvm.struct<(vector<[4]xi32>, vector<[4]xi32>, vector<[4]xi32>,
                         vector<[4]xi32>)>
    ```
  }];
}

def CQ4PIntr_SveSqcvtX4Op
    : CQ4PIntr_Op<"aarch64.sve.sqcvt.x4", [Pure], 1, [],
                  /*overloadedOperands=*/[0]>,
      Arguments<(ins CQ4PIntr_NxI32x4:$v0, CQ4PIntr_NxI32x4:$v1,
                 CQ4PIntr_NxI32x4:$v2, CQ4PIntr_NxI32x4:$v3)> {
  let results = (outs CQ4PIntr_NxI8x16:$res);
  let summary = "four int32 vectors saturated to one vector of int8 (multi-vector SQCVT)";
  let description = [{
    Each word saturated to a signed byte; the bytes of `v0` first, then
    those of `v1`, `v2` and `v3`.

    Example:

    ```mlir
    %b = cq4p_intr.aarch64.sve.sqcvt.x4 %a, %b, %c, %d
        : (vector<[4]xi32>, vector<[4]xi32>, vector<[4]xi32>, vector<[4]xi32>)
        -> vector<[16]xi8>
    ```
  }];
}

def CQ4PIntr_SmeLdrZtOp
    : CQ4PIntr_Op<"aarch64.sme.ldr.zt", [], 0, [], [],
                  /*immArgPositions=*/[0], /*immArgAttrNames=*/["zt"]>,
      Arguments<(ins ConfinedAttr<I32Attr, [IntMinValue<0>, IntMaxValue<0>]>:$zt,
                 LLVM_AnyPointer:$address)> {
  let summary = "ZT0 <- the 64 bytes at an address (LDR ZT0)";
  let description = [{
    `zt` names the lookup-table register: SME2 has one, ZT0. The op keeps
    unknown memory effects: it writes ZT0, which no MLIR resource models,
    and an op with only a read effect and no result would be erased as dead.

    Example:

    ```mlir
    cq4p_intr.aarch64.sme.ldr.zt %p {zt = 0 : i32} : (!llvm.ptr) -> ()
    ```
  }];
}

def CQ4PIntr_SmeLuti4LaneZtX2Op
    : CQ4PIntr_Op<"aarch64.sme.luti4.lane.zt.x2", [], 2,
                  /*overloadedResults=*/[0], [],
                  /*immArgPositions=*/[0, 2],
                  /*immArgAttrNames=*/["zt", "segment"]>,
      Arguments<(ins ConfinedAttr<I32Attr, [IntMinValue<0>, IntMaxValue<0>]>:$zt,
                 CQ4PIntr_NxI8x16:$indices,
                 ConfinedAttr<I32Attr, [IntMinValue<0>, IntMaxValue<1>]>:$segment)> {
  let results = (outs CQ4PIntr_MultiVector<2, CQ4PIntr_NxI8x16>:$res);
  let summary = "4-bit indices looked up in ZT0 into two vectors (LUTI4)";
  let description = [{
    The nibbles of `indices` (the half `segment` selects) looked up as bytes
    in ZT0, nibble j to byte j of the pair.

    Example:

    ```mlir
    %pair = cq4p_intr.aarch64.sme.luti4.lane.zt.x2 %packed {segment = 0 : i32, zt = 0 : i32}
        : (vector<[16]xi8>) -> !llvm.struct<(vector<[16]xi8>, vector<[16]xi8>)>
    ```
  }];
}

def CQ4PIntr_SmeLuti4LaneZtX4Op
    : CQ4PIntr_Op<"aarch64.sme.luti4.lane.zt.x4", [], 4,
                  /*overloadedResults=*/[0], [],
                  /*immArgPositions=*/[0, 2],
                  /*immArgAttrNames=*/["zt", "segment"]>,
      Arguments<(ins ConfinedAttr<I32Attr, [IntMinValue<0>, IntMaxValue<0>]>:$zt,
                 CQ4PIntr_NxI8x16:$indices,
                 ConfinedAttr<I32Attr, [IntMinValue<0>, IntMaxValue<1>]>:$segment)> {
  let results = (outs CQ4PIntr_MultiVector<4, CQ4PIntr_NxF32x4>:$res);
  let summary = "4-bit indices looked up in ZT0 into four fp32 vectors (LUTI4)";
  let description = [{
    The 64 nibbles of the half `segment` of `indices` (at a 512-bit vector
    length) looked up as 32-bit entries of ZT0, nibble j to element j of
    the four vectors in order.

    Example:

    ```mlir
    %quad = cq4p_intr.aarch64.sme.luti4.lane.zt.x4 %packed {segment = 1 : i32, zt = 0 : i32}
        : (vector<[16]xi8>) -> !llvm.struct<(vector<[4]xf32>, vector<[4]xf32>,
                                             vector<[4]xf32>, vector<[4]xf32>)>
    ```
  }];
}

def CQ4PIntr_SmeSdotLaneZa32Vg1x4Op
    : CQ4PIntr_Op<"aarch64.sme.sdot.lane.za32.vg1x4",
                  [AllTypesMatch<["v0", "v1", "v2", "v3", "indexed"]>], 0, [],
                  /*overloadedOperands=*/[1],
                  /*immArgPositions=*/[6], /*immArgAttrNames=*/["lane"]>,
      Arguments<(ins I32:$slice,
                 CQ4PIntr_NxI8x16:$v0, CQ4PIntr_NxI8x16:$v1,
                 CQ4PIntr_NxI8x16:$v2, CQ4PIntr_NxI8x16:$v3,
                 CQ4PIntr_NxI8x16:$indexed,
                 ConfinedAttr<I32Attr, [IntMinValue<0>, IntMaxValue<3>]>:$lane)> {
  let summary = "ZA vector groups += 4-way dot products by an indexed lane (multi-vector SDOT)";
  let description = [{
    ZA array vectors `slice` + 16i (i < 4, at a 512-bit vector length) +=
    the 4-way int8 dot products of `vi` with the four bytes `lane` of each
    128-bit segment of `indexed`.

    Example:

    ```mlir
    cq4p_intr.aarch64.sme.sdot.lane.za32.vg1x4 %s, %z0, %z1, %z2, %z3, %a {lane = 1 : i32}
        : (i32, vector<[16]xi8>, vector<[16]xi8>, vector<[16]xi8>,
           vector<[16]xi8>, vector<[16]xi8>) -> ()
    ```
  }];
}

def CQ4PIntr_SmeFmlaLaneVg1x4Op
    : CQ4PIntr_Op<"aarch64.sme.fmla.lane.vg1x4",
                  [AllTypesMatch<["v0", "v1", "v2", "v3", "indexed"]>], 0, [],
                  /*overloadedOperands=*/[1],
                  /*immArgPositions=*/[6], /*immArgAttrNames=*/["lane"]>,
      Arguments<(ins I32:$slice,
                 CQ4PIntr_NxF32x4:$v0, CQ4PIntr_NxF32x4:$v1,
                 CQ4PIntr_NxF32x4:$v2, CQ4PIntr_NxF32x4:$v3,
                 CQ4PIntr_NxF32x4:$indexed,
                 ConfinedAttr<I32Attr, [IntMinValue<0>, IntMaxValue<3>]>:$lane)> {
  let summary = "ZA vector groups += fp32 vectors times an indexed lane (multi-vector FMLA)";
  let description = [{
    ZA array vectors `slice` + 16i (i < 4, at a 512-bit vector length) +=
    `vi` times the fp32 element `lane` of each 128-bit segment of
    `indexed`, each lane a fused multiply-add.

    Example:

    ```mlir
    cq4p_intr.aarch64.sme.fmla.lane.vg1x4 %s, %z0, %z1, %z2, %z3, %a {lane = 1 : i32}
        : (i32, vector<[4]xf32>, vector<[4]xf32>, vector<[4]xf32>,
           vector<[4]xf32>, vector<[4]xf32>) -> ()
    ```
  }];
}

def CQ4PIntr_SmeFmlalLaneVg2x4Op
    : CQ4PIntr_Op<"aarch64.sme.fmlal.lane.vg2x4",
                  [AllTypesMatch<["v0", "v1", "v2", "v3", "indexed"]>], 0, [],
                  /*overloadedOperands=*/[1],
                  /*immArgPositions=*/[6], /*immArgAttrNames=*/["lane"]>,
      Arguments<(ins I32:$slice,
                 CQ4PIntr_NxF16x8:$v0, CQ4PIntr_NxF16x8:$v1,
                 CQ4PIntr_NxF16x8:$v2, CQ4PIntr_NxF16x8:$v3,
                 CQ4PIntr_NxF16x8:$indexed,
                 ConfinedAttr<I32Attr, [IntMinValue<0>, IntMaxValue<7>]>:$lane)> {
  let summary = "ZA vector pairs += fp16 products widened to fp32 (multi-vector FMLAL by lane)";
  let description = [{
    For i < 4 (at a 512-bit vector length): ZA array vector `slice` + 16i
    += the even fp16 elements of `vi` times the fp16 element `lane` of each
    128-bit segment of `indexed`, and ZA array vector `slice` + 16i + 1 +=
    the odd ones; each product of two fp16 values is exact in fp32 and is
    added with one rounding. `slice` must be even.

    Example:

    ```mlir
    cq4p_intr.aarch64.sme.fmlal.lane.vg2x4 %s, %z0, %z1, %z2, %z3, %a {lane = 5 : i32}
        : (i32, vector<[8]xf16>, vector<[8]xf16>, vector<[8]xf16>,
           vector<[8]xf16>, vector<[8]xf16>) -> ()
    ```
  }];
}

def CQ4PIntr_SmeReadVg1x4Op
    : CQ4PIntr_Op<"aarch64.sme.read.vg1x4", [], 4, /*overloadedResults=*/[0]>,
      Arguments<(ins I32:$slice)> {
  let results = (outs CQ4PIntr_MultiVector<4, CQ4PIntr_NxI32x4>:$res);
  let summary = "four ZA array vectors as int32 vectors (multi-vector MOVA)";
  let description = [{
    ZA array vectors `slice` + 16i, i < 4 (at a 512-bit vector length).

    Example:

    ```mlir
    %v = cq4p_intr.aarch64.sme.read.vg1x4 %s : (i32)
        -> !llvm.struct<(vector<[4]xi32>, vector<[4]xi32>, vector<[4]xi32>,
                         vector<[4]xi32>)>
    ```
  }];
}

def CQ4PIntr_SmeReadVerVg4Op
    : CQ4PIntr_Op<"aarch64.sme.read.ver.vg4", [], 4, /*overloadedResults=*/[0], [],
                  /*immArgPositions=*/[0], /*immArgAttrNames=*/["tile"]>,
      Arguments<(ins ConfinedAttr<I32Attr, [IntMinValue<0>, IntMaxValue<3>]>:$tile,
                 I32:$slice)> {
  let results = (outs CQ4PIntr_MultiVector<4, CQ4PIntr_NxI32x4>:$res);
  let summary = "four vertical slices of a 32-bit ZA tile (multi-vector MOVA)";
  let description = [{
    Vertical slices `slice` .. `slice` + 3 of za`tile`.s: word `slice` + i
    of each of the tile's rows.

    Example:

    ```mlir
    %c = cq4p_intr.aarch64.sme.read.ver.vg4 %s {tile = 0 : i32} : (i32)
        -> !llvm.struct<(vector<[4]xi32>, vector<[4]xi32>, vector<[4]xi32>,
                         vector<[4]xi32>)>
    ```
  }];
}

def CQ4PIntr_SmeReadHorVg4Op
    : CQ4PIntr_Op<"aarch64.sme.read.hor.vg4", [], 4, /*overloadedResults=*/[0], [],
                  /*immArgPositions=*/[0], /*immArgAttrNames=*/["tile"]>,
      Arguments<(ins ConfinedAttr<I32Attr, [IntMinValue<0>, IntMaxValue<3>]>:$tile,
                 I32:$slice)> {
  let results = (outs CQ4PIntr_MultiVector<4, CQ4PIntr_NxF32x4>:$res);
  let summary = "four horizontal slices of a 32-bit ZA tile (multi-vector MOVA)";
  let description = [{
    Horizontal slices `slice` .. `slice` + 3 of za`tile`.s: four of the
    tile's rows.

    Example:

    ```mlir
    %r = cq4p_intr.aarch64.sme.read.hor.vg4 %s {tile = 0 : i32} : (i32)
        -> !llvm.struct<(vector<[4]xf32>, vector<[4]xf32>, vector<[4]xf32>,
                         vector<[4]xf32>)>
    ```
  }];
}

//===----------------------------------------------------------------------===//
// x86
//===----------------------------------------------------------------------===//

// An x86 intrinsic of fixed types: (lhs, rhs) -> res.
class CQ4PIntr_X86Binary<string mnemonic, Type result, Type lhs, Type rhs,
                         string instruction>
    : CQ4PIntr_Op<"x86." # mnemonic, [Pure]>,
      Arguments<(ins lhs:$lhs, rhs:$rhs)> {
  let results = (outs result:$res);
  let summary = instruction;
}

def CQ4PIntr_X86Ssse3PshufB128Op : CQ4PIntr_X86Binary<"ssse3.pshuf.b.128",
    VectorOfLengthAndType<[16], [I8]>, VectorOfLengthAndType<[16], [I8]>,
    VectorOfLengthAndType<[16], [I8]>, "byte shuffle (PSHUFB xmm)"> {
  let description = [{
    Byte i of the result is `lhs[rhs[i] & 15]`, 0 where bit 7 of `rhs[i]`
    is set.

    Example:

    ```mlir
    %r = cq4p_intr.x86.ssse3.pshuf.b.128 %table, %index
        : (vector<16xi8>, vector<16xi8>) -> vector<16xi8>
    ```
  }];
}
def CQ4PIntr_X86Avx2PshufBOp : CQ4PIntr_X86Binary<"avx2.pshuf.b",
    VectorOfLengthAndType<[32], [I8]>, VectorOfLengthAndType<[32], [I8]>,
    VectorOfLengthAndType<[32], [I8]>, "byte shuffle in each 128-bit lane (VPSHUFB ymm)">;
def CQ4PIntr_X86Avx512PshufB512Op : CQ4PIntr_X86Binary<"avx512.pshuf.b.512",
    VectorOfLengthAndType<[64], [I8]>, VectorOfLengthAndType<[64], [I8]>,
    VectorOfLengthAndType<[64], [I8]>, "byte shuffle in each 128-bit lane (VPSHUFB zmm)">;
def CQ4PIntr_X86Avx2PsignBOp : CQ4PIntr_X86Binary<"avx2.psign.b",
    VectorOfLengthAndType<[32], [I8]>, VectorOfLengthAndType<[32], [I8]>,
    VectorOfLengthAndType<[32], [I8]>,
    "lhs negated, kept or zeroed by the sign of rhs (VPSIGNB ymm)">;
def CQ4PIntr_X86Avx2PmaddUbSwOp : CQ4PIntr_X86Binary<"avx2.pmadd.ub.sw",
    VectorOfLengthAndType<[16], [I16]>, VectorOfLengthAndType<[32], [I8]>,
    VectorOfLengthAndType<[32], [I8]>,
    "unsigned x signed byte pairs summed with saturation to int16 (VPMADDUBSW ymm)">;
def CQ4PIntr_X86Avx2PmaddWdOp : CQ4PIntr_X86Binary<"avx2.pmadd.wd",
    VectorOfLengthAndType<[8], [I32]>, VectorOfLengthAndType<[16], [I16]>,
    VectorOfLengthAndType<[16], [I16]>, "int16 pairs multiplied and summed to int32 (VPMADDWD ymm)">;
def CQ4PIntr_X86Avx512Packssdw512Op : CQ4PIntr_X86Binary<"avx512.packssdw.512",
    VectorOfLengthAndType<[32], [I16]>, VectorOfLengthAndType<[16], [I32]>,
    VectorOfLengthAndType<[16], [I32]>,
    "int32 to int16 with signed saturation, per 128-bit lane (VPACKSSDW zmm)">;
def CQ4PIntr_X86Avx512Packsswb512Op : CQ4PIntr_X86Binary<"avx512.packsswb.512",
    VectorOfLengthAndType<[64], [I8]>, VectorOfLengthAndType<[32], [I16]>,
    VectorOfLengthAndType<[32], [I16]>,
    "int16 to int8 with signed saturation, per 128-bit lane (VPACKSSWB zmm)">;
def CQ4PIntr_X86Avx512PermvarHi128Op : CQ4PIntr_X86Binary<"avx512.permvar.hi.128",
    VectorOfLengthAndType<[8], [I16]>, VectorOfLengthAndType<[8], [I16]>,
    VectorOfLengthAndType<[8], [I16]>, "word permutation (VPERMW xmm)">;
def CQ4PIntr_X86Avx512PermvarHi256Op : CQ4PIntr_X86Binary<"avx512.permvar.hi.256",
    VectorOfLengthAndType<[16], [I16]>, VectorOfLengthAndType<[16], [I16]>,
    VectorOfLengthAndType<[16], [I16]>, "word permutation (VPERMW ymm)">;
def CQ4PIntr_X86Avx512PermvarHi512Op : CQ4PIntr_X86Binary<"avx512.permvar.hi.512",
    VectorOfLengthAndType<[32], [I16]>, VectorOfLengthAndType<[32], [I16]>,
    VectorOfLengthAndType<[32], [I16]>, "word permutation (VPERMW zmm)">;

def CQ4PIntr_X86Avx512Vpermi2varHi512Op
    : CQ4PIntr_Op<"x86.avx512.vpermi2var.hi.512", [Pure]>,
      Arguments<(ins VectorOfLengthAndType<[32], [I16]>:$table0,
                 VectorOfLengthAndType<[32], [I16]>:$index,
                 VectorOfLengthAndType<[32], [I16]>:$table1)> {
  let results = (outs VectorOfLengthAndType<[32], [I16]>:$res);
  let summary = "word permutation across two tables (VPERMI2W zmm)";
  let description = [{
    Word i of the result is word `index[i] & 63` of the 64 words of
    `table0` then `table1`.

    Example:

    ```mlir
    %r = cq4p_intr.x86.avx512.vpermi2var.hi.512 %t0, %i, %t1
        : (vector<32xi16>, vector<32xi16>, vector<32xi16>) -> vector<32xi16>
    ```
  }];
}

class CQ4PIntr_X86Vpdpbusd<int width>
    : CQ4PIntr_Op<"x86.avx512.vpdpbusd." # width, [Pure]>,
      Arguments<(ins VectorOfLengthAndType<[!div(width, 32)], [I32]>:$acc,
                 VectorOfLengthAndType<[!div(width, 8)], [I8]>:$unsigned_bytes,
                 VectorOfLengthAndType<[!div(width, 8)], [I8]>:$signed_bytes)> {
  let results = (outs VectorOfLengthAndType<[!div(width, 32)], [I32]>:$res);
  let summary = "acc += 4-way unsigned x signed byte dot products (VPDPBUSD, " # width # " bits)";
  let description = [{
    Each int32 lane of `acc` plus the dot product of the four unsigned bytes
    of `unsigned_bytes` with the four signed bytes of `signed_bytes` in that
    lane (AVX-512 VNNI on zmm; AVX-512 VNNI or AVX-VNNI on ymm).

    Example:

    ```mlir
    %r = cq4p_intr.x86.avx512.vpdpbusd.512 %acc, %u, %s
        : (vector<16xi32>, vector<64xi8>, vector<64xi8>) -> vector<16xi32>
    ```
  }];
}

def CQ4PIntr_X86Avx512Vpdpbusd256Op : CQ4PIntr_X86Vpdpbusd<256>;
def CQ4PIntr_X86Avx512Vpdpbusd512Op : CQ4PIntr_X86Vpdpbusd<512>;

def CQ4PIntr_X86Avx512MaskCvtps2dq512Op
    : CQ4PIntr_Op<"x86.avx512.mask.cvtps2dq.512", [Pure], 1, [], [],
                  /*immArgPositions=*/[3], /*immArgAttrNames=*/["rounding"]>,
      Arguments<(ins VectorOfLengthAndType<[16], [F32]>:$source,
                 VectorOfLengthAndType<[16], [I32]>:$passthru,
                 I16:$mask, I32Attr:$rounding)> {
  let results = (outs VectorOfLengthAndType<[16], [I32]>:$res);
  let summary = "fp32 to int32 under a mask and a rounding mode (VCVTPS2DQ zmm)";
  let description = [{
    The lanes `mask` selects converted with the `rounding` control (8: to
    nearest even, exceptions suppressed), the others from `passthru`.

    Example:

    ```mlir
    %i = cq4p_intr.x86.avx512.mask.cvtps2dq.512 %f, %zero, %all {rounding = 8 : i32}
        : (vector<16xf32>, vector<16xi32>, i16) -> vector<16xi32>
    ```
  }];
}

//===----------------------------------------------------------------------===//
// The pointer-chain barrier
//===----------------------------------------------------------------------===//

def CQ4PIntr_OpaqueOp : LLVM_OpBase<CQ4PIntr_Dialect, "opaque",
                                    [Pure, AllTypesMatch<["value", "res"]>]> {
  let summary = "a value the code generator cannot see through";
  let description = [{
    `value` itself, in the same register, with no instruction: but LLVM's
    optimizers, instruction selection and loop strength reduction see a new
    value they know nothing about. It translates to an empty inline asm
    whose output register is tied to its input (`asm "", "=r,0"`), and it
    emits no instruction (the only other inline asm cq4p emits is
    `cq4p_intr.x86.cpuid_vendor`'s CPUID).

    Why: the NEON GEMV advances its panel pointers with post-indexed loads
    (`ld1 {v0.16b-v3.16b}, [x0], #64`). Left visible, the chain of pointers
    base + 64 i is rewritten by loop strength reduction into one induction
    variable and register-offset addressing, and instruction selection folds
    the adds into the loads' immediate offsets: extra adds and no
    post-indexing. Passing each iteration's next pointer through this op
    keeps one add per pointer, which instruction selection turns into the
    post-index of the load that uses it (see emitNeonGemvLoop).

    `value` must be an integer or a pointer (a general-purpose register).

    Example:

    ```mlir
    %next = cq4p_intr.opaque %p : !llvm.ptr
    ```
  }];
  let arguments = (ins AnyTypeOf<[AnySignlessInteger, LLVM_AnyPointer]>:$value);
  let results = (outs AnyTypeOf<[AnySignlessInteger, LLVM_AnyPointer]>:$res);
  let assemblyFormat = "$value attr-dict `:` type($value)";
  let llvmBuilder = [{
    $res = createOpaqueValue(builder, $value);
  }];
}

def CQ4PIntr_X86CpuidVendorOp
    : LLVM_OpBase<CQ4PIntr_Dialect, "x86.cpuid_vendor", []> {
  let summary = "the first four bytes of the CPU's vendor string (CPUID)";
  let description = [{
    EBX of CPUID leaf 0: the first four bytes of the vendor string, little
    endian ("Auth"enticAMD is 0x68747541, "Genu"ineIntel 0x756e6547,
    "Hygo"nGenuine 0x6f677948). LLVM has no intrinsic for CPUID, so this
    translates to an inline asm of the one instruction (`cpuid`, EAX = ECX =
    0). Not pure: a VM may trap it, so the code that asks runs it once and
    keeps the answer (HostKernels.cpp, hostPrefetching).

    Example:

    ```mlir
    %vendor = cq4p_intr.x86.cpuid_vendor : i32
    ```
  }];
  let results = (outs I32:$res);
  let assemblyFormat = "attr-dict `:` type($res)";
  let llvmBuilder = [{
    $res = createCpuidVendor(builder);
  }];
}

#endif // CQ4P_DIALECT_CQ4PINTR_IR_CQ4PINTR_TD

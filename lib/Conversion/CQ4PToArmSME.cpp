//===- CQ4PToArmSME.cpp - convert-cq4p-to-arm-sme -------------------------===//
//
// SME2 computes a super-block's int32 partials in a streaming leaf:
//
//   cq4p.panel_partials %panels, %cb, %act, %partials, %sb, %row
//
// becomes `func.call @<kernel>_sme_partials(...)`, a function marked
// `cq4p.sme_leaf` (cq4p-export-kernels gives it locally-streaming, new-ZA
// and new-ZT0 attributes once it is an llvm.func) whose body is, at a
// 512-bit streaming vector length:
//
//   ZT0 <- the int8 codebook (entry i's low byte)       ldr zt0
//   for each chunk of 16 groups:
//     zero ZA
//     for g in chunk, slice s = g % 16:
//       for each 4 kg-blocks: a = ld1rq(act[row, g*gs + 16q ..])
//         for t in 0..3 (kg-block 4q+t):
//           {z0,z1} = luti4.x2(panels[sb, g, kg, 0:64])   channels 0-31
//           {z2,z3} = luti4.x2(panels[sb, g, kg, 64:128]) channels 32-63
//           za.s[s, vgx4] += {z0..z3} . a[t]              sdot (lane t)
//     for g in chunk: partials[0, g, 16i:16i+16] <- za[s + 16i], i < 4
//
// Each multi-vector SDOT updates the ZA vectors s, s+16, s+32, s+48, which
// hold the 16-channel blocks of the super-block in order, so `str za`
// writes the partials linearly.
//
//===----------------------------------------------------------------------===//

#include "cq4p/Conversion/Passes.h"
#include "cq4p/Dialect/CQ4P/IR/CQ4P.h"
#include "cq4p/format.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/SymbolTable.h"

namespace mlir::cq4p {
#define GEN_PASS_DEF_CONVERTCQ4PTOARMSME
#include "cq4p/Conversion/Passes.h.inc"
} // namespace mlir::cq4p

using namespace mlir;
using namespace mlir::cq4p;

namespace {

constexpr int64_t kStreamingBytes = 64;  // SVL 512: one Z register
constexpr int64_t kZaSlices = 16;        // ZA vector groups of 4 at SVL 512

class LeafBuilder {
public:
  LeafBuilder(OpBuilder &b, Location loc) : b(b), loc(loc) {
    ptrType = LLVM::LLVMPointerType::get(b.getContext());
    nxv16i8 = VectorType::get({16}, b.getI8Type(), {true});
  }

  Value index(int64_t value) { return arith::ConstantIndexOp::create(b, loc, value); }
  Value i32(int64_t value) {
    return arith::ConstantOp::create(b, loc, b.getI32IntegerAttr(value));
  }
  Value toI32(Value indexValue) {
    return arith::IndexCastOp::create(b, loc, b.getI32Type(), indexValue);
  }

  /// The address of a memref's first element.
  Value base(Value memref) {
    Value address =
        memref::ExtractAlignedPointerAsIndexOp::create(b, loc, memref);
    Value address64 = arith::IndexCastOp::create(b, loc, b.getI64Type(), address);
    return LLVM::IntToPtrOp::create(b, loc, ptrType, address64);
  }
  /// base + byteOffset (an index).
  Value offset(Value basePtr, Value byteOffset) {
    Value offset64 = arith::IndexCastOp::create(b, loc, b.getI64Type(), byteOffset);
    return LLVM::GEPOp::create(b, loc, ptrType, b.getI8Type(), basePtr,
                               ArrayRef<LLVM::GEPArg>{offset64});
  }

  Value intrinsic(Type result, StringRef name, ValueRange args) {
    if (!result) {
      LLVM::CallIntrinsicOp::create(b, loc, b.getStringAttr(name), args);
      return Value();
    }
    return LLVM::CallIntrinsicOp::create(b, loc, result, b.getStringAttr(name),
                                         args)
        .getResult(0);
  }

  OpBuilder &b;
  Location loc;
  Type ptrType;
  VectorType nxv16i8;
};

/// Builds the body of a leaf for `op`'s buffer types.
void buildLeafBody(OpBuilder &b, Location loc, PanelPartialsOp op,
                   ValueRange args) {
  Value panels = args[0], cb = args[1], act = args[2], partials = args[3];
  Value sb = args[4], row = args[5];
  auto panelsType = cast<MemRefType>(op.getPanels().getType());
  int64_t ng = panelsType.getDimSize(1), kgPerGroup = panelsType.getDimSize(2);
  int64_t gs = kgPerGroup * CQ4P_KG_BLOCK_K;
  int64_t k = ng * gs;
  LeafBuilder leaf(b, loc);
  Value c0 = leaf.index(0), c1 = leaf.index(1);

  // ZT0: entry i (32 bits) holds cb_i8[i] in its low byte.
  Value table = memref::AllocaOp::create(
      b, loc, MemRefType::get({CQ4P_CODEBOOK_LEVELS}, b.getI32Type()));
  for (int64_t i = 0; i < CQ4P_CODEBOOK_LEVELS; ++i) {
    Value level = memref::LoadOp::create(b, loc, cb, leaf.index(i));
    Value entry = arith::ExtUIOp::create(b, loc, b.getI32Type(), level);
    memref::StoreOp::create(b, loc, entry, table, leaf.index(i));
  }
  leaf.intrinsic(Type(), "llvm.aarch64.sme.ldr.zt", {leaf.i32(0), leaf.base(table)});

  Value panelsBase = leaf.base(panels), actBase = leaf.base(act);
  Value partialsBase = leaf.base(partials);
  Value allLanes = leaf.intrinsic(VectorType::get({16}, b.getI1Type(), {true}),
                                  "llvm.aarch64.sve.ptrue.nxv16i1", {leaf.i32(31)});
  auto pairType = LLVM::LLVMStructType::getLiteral(
      b.getContext(), {leaf.nxv16i8, leaf.nxv16i8});
  // act[row, 0] and panels[sb, 0, 0, 0], in bytes.
  Value actRow = leaf.offset(
      actBase, arith::MulIOp::create(b, loc, row, leaf.index(k)));
  Value sbBase = leaf.offset(
      panelsBase,
      arith::MulIOp::create(b, loc, sb,
                            leaf.index(ng * kgPerGroup * CQ4P_KG_BLOCK_BYTES)));

  int64_t chunks = (ng + kZaSlices - 1) / kZaSlices;
  auto chunkLoop = scf::ForOp::create(b, loc, c0, leaf.index(chunks), c1);
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(chunkLoop.getBody());
  Value chunkFirst = arith::MulIOp::create(b, loc, chunkLoop.getInductionVar(),
                                           leaf.index(kZaSlices));
  Value chunkEnd = arith::MinSIOp::create(
      b, loc, arith::AddIOp::create(b, loc, chunkFirst, leaf.index(kZaSlices)),
      leaf.index(ng));
  leaf.intrinsic(Type(), "llvm.aarch64.sme.zero", {leaf.i32(255)});

  auto groupLoop = scf::ForOp::create(b, loc, chunkFirst, chunkEnd, c1);
  {
    OpBuilder::InsertionGuard groupGuard(b);
    b.setInsertionPointToStart(groupLoop.getBody());
    Value g = groupLoop.getInductionVar();
    Value slice = leaf.toI32(arith::SubIOp::create(b, loc, g, chunkFirst));
    Value groupPanels = leaf.offset(
        sbBase, arith::MulIOp::create(
                    b, loc, g, leaf.index(kgPerGroup * CQ4P_KG_BLOCK_BYTES)));
    Value groupAct =
        leaf.offset(actRow, arith::MulIOp::create(b, loc, g, leaf.index(gs)));
    auto stepLoop =
        scf::ForOp::create(b, loc, c0, leaf.index(kgPerGroup / 4), c1);
    OpBuilder::InsertionGuard stepGuard(b);
    b.setInsertionPointToStart(stepLoop.getBody());
    Value q = stepLoop.getInductionVar();
    // The 16 activations of kg-blocks 4q..4q+3, in every 128-bit segment.
    Value activations = leaf.intrinsic(
        leaf.nxv16i8, "llvm.aarch64.sve.ld1rq.nxv16i8",
        {allLanes,
         leaf.offset(groupAct, arith::MulIOp::create(b, loc, q, leaf.index(16)))});
    Value stepPanels = leaf.offset(
        groupPanels,
        arith::MulIOp::create(b, loc, q, leaf.index(4 * CQ4P_KG_BLOCK_BYTES)));
    for (int64_t t = 0; t < 4; ++t) {
      SmallVector<Value> vectors;
      for (int64_t half = 0; half < 2; ++half) {
        Value address = leaf.offset(
            stepPanels,
            leaf.index(t * CQ4P_KG_BLOCK_BYTES + half * kStreamingBytes));
        Value packed = LLVM::LoadOp::create(b, loc, leaf.nxv16i8, address);
        Value pair = leaf.intrinsic(pairType,
                                    "llvm.aarch64.sme.luti4.lane.zt.x2.nxv16i8",
                                    {leaf.i32(0), packed, leaf.i32(0)});
        vectors.push_back(LLVM::ExtractValueOp::create(b, loc, pair, 0));
        vectors.push_back(LLVM::ExtractValueOp::create(b, loc, pair, 1));
      }
      leaf.intrinsic(Type(), "llvm.aarch64.sme.sdot.lane.za32.vg1x4.nxv16i8",
                     {slice, vectors[0], vectors[1], vectors[2], vectors[3],
                      activations, leaf.i32(t)});
    }
  }

  // The chunk's partials, from ZA to memory: vector s + 16i holds channels
  // 16i..16i+15 of the group in slice s.
  auto storeLoop = scf::ForOp::create(b, loc, chunkFirst, chunkEnd, c1);
  OpBuilder::InsertionGuard storeGuard(b);
  b.setInsertionPointToStart(storeLoop.getBody());
  Value g = storeLoop.getInductionVar();
  Value slice = leaf.toI32(arith::SubIOp::create(b, loc, g, chunkFirst));
  for (int64_t i = 0; i < 4; ++i) {
    Value vectorIndex =
        arith::AddIOp::create(b, loc, slice, leaf.i32(i * kZaSlices));
    Value byteOffset = arith::AddIOp::create(
        b, loc,
        arith::MulIOp::create(b, loc, g, leaf.index(CQ4P_PANEL_CHANNELS * 4)),
        leaf.index(i * kStreamingBytes));
    leaf.intrinsic(Type(), "llvm.aarch64.sme.str",
                   {vectorIndex, leaf.offset(partialsBase, byteOffset), leaf.i32(0)});
  }
}

class ConvertCQ4PToArmSME
    : public mlir::cq4p::impl::ConvertCQ4PToArmSMEBase<ConvertCQ4PToArmSME> {
public:
  void runOnOperation() override {
    ModuleOp module = getOperation();
    SymbolTable symbols(module);
    SmallVector<PanelPartialsOp> ops;
    module.walk([&](PanelPartialsOp op) { ops.push_back(op); });
    for (PanelPartialsOp op : ops) {
      auto parent = op->getParentOfType<func::FuncOp>();
      auto panelsType = cast<MemRefType>(op.getPanels().getType());
      int64_t kg = panelsType.getDimSize(2);
      if ((kg * CQ4P_KG_BLOCK_K) % 16 != 0) {
        op.emitError() << "SME2 partials need groups of a multiple of 16 K, got "
                       << kg * CQ4P_KG_BLOCK_K;
        return signalPassFailure();
      }
      // One leaf per kernel.
      std::string name = (parent.getSymName() + "_sme_partials").str();
      auto leafFunc = symbols.lookup<func::FuncOp>(name);
      if (!leafFunc) {
        OpBuilder b = OpBuilder::atBlockEnd(module.getBody());
        SmallVector<Type> types(op->getOperandTypes());
        leafFunc = b.create<func::FuncOp>(op.getLoc(), name,
                                          b.getFunctionType(types, {}));
        leafFunc.setPrivate();
        leafFunc->setAttr("cq4p.sme_leaf", b.getUnitAttr());
        Block *entry = leafFunc.addEntryBlock();
        OpBuilder body = OpBuilder::atBlockBegin(entry);
        buildLeafBody(body, op.getLoc(), op, entry->getArguments());
        func::ReturnOp::create(body, op.getLoc());
        symbols.insert(leafFunc);
      }
      OpBuilder b(op);
      func::CallOp::create(b, op.getLoc(), leafFunc, op->getOperands());
      op.erase();
    }
  }
};

} // namespace

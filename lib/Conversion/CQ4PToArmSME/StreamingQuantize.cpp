//===- StreamingQuantize.cpp - SME2 activation transform leaf -------------===//
//
// cq4p.quantize_activations (docs/FORMAT.md section 5, steps 1-2) as one
// streaming leaf per kernel call, `<kernel>_sme_quantize[_<gating>]`, over all
// the call's groups and rows, at the 512-bit streaming vector length the
// SME2 target assumes: a group of gs = 64, 128 or 256 elements is gs / 16
// fp32 vectors in natural order (element 16v + l in lane l of vector v).
// The contract's fp32 operations in its order, so the bytes and scales
// equal the NEON lowering's (ActivationTransform.cpp) bit for bit:
//
//   w = x * (isr * left)         left is +-1: (x * isr) * left exactly
//   stages h = 1, 2, 4, 8        in each vector: t = TBL(w, lane ^ h) and
//                                w = fma(w, s, t), s = +1 in the lanes
//                                without bit h and -1 in those with it:
//                                b + a below, a - b above, each rounded once
//                                from exact operands, the contract's bits
//   stages h = 16 .. gs / 2      between whole vectors: FADD and FSUB
//   w = w * (1/sqrt(gs) * right) right is +-1: (w / sqrt(gs)) * right
//                                exactly, as one multiply
//   max|w|                       the magnitudes' bits (AND 0x7fffffff) under
//                                an integer max (SMAX, SMAXV): for floats
//                                without a sign bit the bits order as the
//                                values, a NaN above every number
//   scale = max(max|w| / 127, 1e-10)
//   q = RN(w / scale)            FDIV (one instruction per vector, which
//                                counts fewer than a reciprocal and two
//                                FMA), then FRINTN and FCVTZS four vectors at
//                                a time: round half to even; |q| <= 127
//                                except for an infinite input, where the
//                                conversion and the narrowing saturate
//   bytes = SQCVT(q0..q3)        four int32 vectors to 64 bytes, saturated
//   act[j] = bytes[perm[j]]      TBL with a two-vector table (128 bytes),
//                                two of them or-ed for gs = 256
//
// The right signs ride on the 1/sqrt(gs) multiply: negating w changes
// neither |w| nor the rounding of w / scale but its sign, so the bytes are
// the contract's round(w * right / scale). The permutation's byte indices
// depend only on perm and on where SQCVT puts each word, so they are formed
// once per call (words narrowed through a stack buffer, an index past the
// table reading as zero). The in-vector stages' lane indices and signs,
// the left signs and 1/sqrt(gs) * right are formed once per call too;
// isr * left once per group, and the row loops read those two from a stack
// table (four vectors per LD1W x4, through a pointer the loop carries
// opaquely: in registers they spilled). Groups are the outer loop and rows
// the inner, as in the NEON lowering.
//
// Gated (a dense MLP's down projection): x = act(gate) * up is formed with
// the vector lowering's own builder (gatedInput: cq4p.glu's formula and
// order, activateLanes' sigmoid from one exponential of a non-positive
// argument), so the bytes equal the NEON lowering's. From 16 rows on, per
// block of 16 rows of a group, a loop of its own writes x * (isr * left)
// to a stack scratch that the transform's loop reads (the gating's
// constants and the stages' do not fit the registers together); fewer rows
// gate inline.
//
//===----------------------------------------------------------------------===//

#include "StreamingQuantize.h"
#include "Addresses.h"
#include "KernelLowering/ActivationTransform.h"

#include "cq4p/Codegen/EmitBuilder.h"

#include "cq4p/Dialect/CQ4PIntr/IR/CQ4PIntr.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/Builders.h"

#include <cmath>
#include <functional>
#include <string>

using namespace mlir;
using namespace mlir::cq4p;

namespace {

constexpr int64_t kLanes = 16;      ///< fp32 lanes of a 512-bit vector
constexpr int64_t kVectorBytes = 64; ///< bytes of a 512-bit vector
constexpr int64_t kTableBytes = 2 * kVectorBytes; ///< a two-vector TBL
/// Rows per block of a gated transform's scratch (kGatedRows x gs fp32 on
/// the stack: 16 KiB at gs = 256).
constexpr int64_t kGatedRows = 16;
/// SQCVT (four registers) puts the bytes of its first source vector first,
/// then the second's, ... (not interleaved, as SQCVTN does).
constexpr bool kSqcvtInterleaves = false;

/// The leaf's operations on scalable vectors (16 lanes of fp32 or 64 bytes
/// at the target's vector length).
class QuantizeBuilder : public sme::StreamingBuilder {
public:
  QuantizeBuilder(OpBuilder &b, Location loc) : StreamingBuilder(b, loc) {
    i8v = VectorType::get({16}, b.getI8Type(), {true});
    // Made before the loops, where every load can see it.
    makeCounter();
  }

  Value constantFloats(float value) {
    return arith::ConstantOp::create(
        b, loc, DenseElementsAttr::get(floats, b.getF32FloatAttr(value)));
  }
  Value constantWords(int32_t value) {
    return arith::ConstantOp::create(
        b, loc, DenseElementsAttr::get(words, b.getI32IntegerAttr(value)));
  }
  using StreamingBuilder::at;
  Value at(Value address, int64_t bytes) { return at(address, index(bytes)); }

  /// The 16 elements at `address` of a narrower type (i8 or f16) widened
  /// to fp32 (an extending LD1 into 32-bit lanes, then SCVTF or FCVT).
  Value loadWidened(Value address, Type element) {
    auto narrow = VectorType::get({4}, element, {true});
    Value v = LLVM::LoadOp::create(b, loc, narrow, address,
                                   /*alignment=*/element.getIntOrFloatBitWidth() / 8);
    if (element.isF16())
      return arith::ExtFOp::create(b, loc, floats, v);
    return arith::SIToFPOp::create(b, loc, floats, v);
  }

  /// Lane i of `v` moved to lane i ^ h (TBL by precomputed indices).
  Value swapLanes(Value v, Value indices) {
    return cq4p_intr::SveTblOp::create(b, loc, floats, v, indices);
  }

  /// Four fp32 vectors rounded half to even, converted and saturated to one
  /// vector of bytes (FRINTN, FCVTZS, SQCVT: four vectors each).
  Value roundToBytes(ArrayRef<Value> q) {
    SmallVector<Value> rounded =
        unpack(cq4p_intr::SveFrintnX4Op::create(b, loc, quad(floats), q[0], q[1], q[2], q[3]));
    SmallVector<Value> ints = unpack(cq4p_intr::SveFcvtzsX4Op::create(
        b, loc, quad(words), rounded[0], rounded[1], rounded[2], rounded[3]));
    return cq4p_intr::SveSqcvtX4Op::create(b, loc, i8v, ints[0], ints[1], ints[2], ints[3]);
  }

  Value lookup(Value table0, Value table1, Value indices) {
    return cq4p_intr::SveTbl2Op::create(b, loc, i8v, table0, table1, indices);
  }

  VectorType i8v;
};


/// The leaf's body; `args` are the op's operands in its order.
void buildQuantizeLeafBody(OpBuilder &b, Location loc, QuantizeActivationsOp op,
                           ValueRange args) {
  bool gated = bool(op.getUp());
  size_t a = 0;
  Value x = args[a++];
  Value up = gated ? args[a++] : Value();
  Value isr = args[a++], left = args[a++], right = args[a++], perm = args[a++],
        act = args[a++], actScales = args[a++], groupBegin = args[a++],
        groupEnd = args[a++];
  QuantizeBuilder q(b, loc);
  int64_t gs = op.getGroupSize();
  int64_t k = cast<MemRefType>(x.getType()).getDimSize(1), ng = k / gs;
  int64_t vectors = gs / kLanes, byteVectors = gs / kVectorBytes;
  int64_t pairs = std::max<int64_t>(1, gs / kTableBytes);
  Type i8 = b.getI8Type(), f16 = b.getF16Type();

  Value xBase = q.base(x), upBase = gated ? q.base(up) : Value(),
        isrBase = q.base(isr), leftBase = q.base(left), rightBase = q.base(right),
        permBase = q.base(perm), actBase = q.base(act), scalesBase = q.base(actScales);

  // Per call: the in-vector stages' lane indices and signs.
  Value step = LLVM::StepVectorOp::create(b, loc, q.words);
  SmallVector<Value> swapIndices, stageSigns;
  for (int32_t h = 1; h < kLanes; h *= 2) {
    swapIndices.push_back(arith::XOrIOp::create(b, loc, step, q.constantWords(h)));
    Value upper = arith::CmpIOp::create(
        b, loc, arith::CmpIPredicate::ne,
        arith::AndIOp::create(b, loc, step, q.constantWords(h)), q.constantWords(0));
    stageSigns.push_back(
        arith::SelectOp::create(b, loc, upper, q.constantFloats(-1.0f), q.constantFloats(1.0f)));
  }
  // The left signs, and 1/sqrt(gs) * right.
  Value invSqrt = q.constantFloats(float(1.0 / std::sqrt(double(gs))));
  // The row loops read isr * left (per group) and 1/sqrt(gs) * right (per
  // call) from a stack table, four vectors per LD1W x4, through a pointer
  // the loop carries and passes through cq4p_intr.opaque so that LLVM
  // cannot hoist the loads: held in registers for the whole loop, these 2
  // gs / 16 vectors and the stages' constants are more than the 32 vector
  // registers, and LLVM spilled and reloaded them one at a time.
  Value tables = sme::alignedBase(
      b, loc,
      memref::AllocaOp::create(b, loc, MemRefType::get({2 * gs}, b.getF32Type()),
                               ValueRange{}, b.getI64IntegerAttr(kVectorBytes)));
  SmallVector<Value> leftSigns;
  for (int64_t v = 0; v < vectors; ++v) {
    leftSigns.push_back(q.loadWidened(q.at(leftBase, v * kLanes), i8));
    q.store(arith::MulFOp::create(b, loc, q.loadWidened(q.at(rightBase, v * kLanes), i8),
                                  invSqrt),
            q.at(tables, (vectors + v) * kVectorBytes));
  }
  // The permutation's byte indices: output byte j of vector o reads table
  // pair t at index pos(perm[j]) - 128 t, or 255 (past the table: zero) when
  // that is outside [0, 128). pos(n) is where SQCVT put natural element n.
  Value indexBuffer = sme::alignedBase(
      b, loc,
      memref::AllocaOp::create(
          b, loc, MemRefType::get({byteVectors * pairs * kVectorBytes}, i8), ValueRange{},
          b.getI64IntegerAttr(kVectorBytes)));
  auto bytesOf = [&](Value wordsValue) {
    return arith::TruncIOp::create(b, loc, VectorType::get({4}, i8, {true}), wordsValue);
  };
  for (int64_t o = 0; o < byteVectors; ++o)
    for (int64_t part = 0; part < kVectorBytes / kLanes; ++part) {
      int64_t j = o * kVectorBytes + part * kLanes;
      Value n = LLVM::LoadOp::create(b, loc, q.words, q.at(permBase, j * 4), /*alignment=*/4);
      Value pos = n;
      if (kSqcvtInterleaves) {
        // (n & ~63) | (n & 15) << 2 | (n >> 4) & 3
        Value lane = arith::ShLIOp::create(
            b, loc, arith::AndIOp::create(b, loc, n, q.constantWords(15)), q.constantWords(2));
        Value source = arith::AndIOp::create(
            b, loc, arith::ShRUIOp::create(b, loc, n, q.constantWords(4)), q.constantWords(3));
        pos = arith::OrIOp::create(
            b, loc, arith::AndIOp::create(b, loc, n, q.constantWords(~63)),
            arith::OrIOp::create(b, loc, lane, source));
      }
      for (int64_t t = 0; t < pairs; ++t) {
        Value d = arith::SubIOp::create(b, loc, pos, q.constantWords(int32_t(kTableBytes * t)));
        Value inside = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult, d,
                                             q.constantWords(int32_t(kTableBytes)));
        Value index = arith::SelectOp::create(b, loc, inside, d, q.constantWords(255));
        LLVM::StoreOp::create(
            b, loc, bytesOf(index),
            q.at(indexBuffer, (o * pairs + t) * kVectorBytes + part * kLanes),
            /*alignment=*/1);
      }
    }
  SmallVector<Value> permIndices;
  for (int64_t i = 0; i < byteVectors * pairs; ++i)
    permIndices.push_back(LLVM::LoadOp::create(b, loc, q.i8v,
                                               q.at(indexBuffer, i * kVectorBytes),
                                               /*alignment=*/kVectorBytes));

  Value c0 = q.index(0), c1 = q.index(1);
  Value rows = memref::DimOp::create(b, loc, x, 0);
  auto groups = scf::ForOp::create(b, loc, groupBegin, groupEnd, c1);
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(groups.getBody());
  Value g = groups.getInductionVar();
  Value kBase = arith::MulIOp::create(b, loc, g, q.index(gs));
  Value isrGroup = q.at(isrBase, arith::MulIOp::create(b, loc, kBase, q.index(2)));
  for (int64_t v = 0; v < vectors; ++v)
    q.store(arith::MulFOp::create(b, loc, q.loadWidened(q.at(isrGroup, v * kLanes * 2), f16),
                                  leftSigns[v]),
            q.at(tables, v * kVectorBytes));
  // A row loop over [begin, end) carrying the tables' address; `body` gets
  // the row and the address, and the loop yields it through the opaque op.
  auto rowLoopOf = [&](Value begin, Value end, function_ref<void(Value, Value)> body) {
    auto loop = scf::ForOp::create(b, loc, begin, end, c1, ValueRange{tables});
    OpBuilder::InsertionGuard loopGuard(b);
    b.setInsertionPointToStart(loop.getBody());
    Value address = loop.getRegionIterArgs()[0];
    body(loop.getInductionVar(), address);
    scf::YieldOp::create(
        b, loc, ValueRange{cq4p_intr::OpaqueOp::create(b, loc, address.getType(), address)});
  };
  // x * (isr * left), four vectors from v.
  auto scaled = [&](SmallVector<Value> xs, Value table, int64_t v) {
    SmallVector<Value> isrLeft = q.loadQuad(q.at(table, v * kVectorBytes));
    for (int64_t i = 0; i < 4; ++i)
      xs[i] = arith::MulFOp::create(b, loc, xs[i], isrLeft[i]);
    return xs;
  };
  auto elementOf = [&](Value row) {
    return arith::AddIOp::create(b, loc, arith::MulIOp::create(b, loc, row, q.index(k)),
                                 kBase);
  };
  // The row's x * (isr * left), gated or not, as 16-lane vectors.
  auto inputsOf = [&](Value row, Value table) {
    Value floatOffset = arith::MulIOp::create(b, loc, elementOf(row), q.index(4));
    SmallVector<Value> w;
    for (int64_t v = 0; v < vectors; v += 4) {
      SmallVector<Value> xs = q.loadQuad(q.at(q.at(xBase, floatOffset), v * kLanes * 4));
      if (gated) {
        SmallVector<Value> us = q.loadQuad(q.at(q.at(upBase, floatOffset), v * kLanes * 4));
        for (int64_t i = 0; i < 4; ++i)
          xs[i] = gatedInput(b, loc, *op.getGating(), xs[i], us[i]);
      }
      llvm::append_range(w, scaled(xs, table, v));
    }
    return w;
  };
  // The transform of one row from its inputs (the rest of this function).
  std::function<void(Value, Value, ArrayRef<Value>)> transformRow;
  auto transformRows = [&](Value begin, Value end,
                           function_ref<SmallVector<Value>(Value, Value)> inputs) {
    rowLoopOf(begin, end,
              [&](Value row, Value table) { transformRow(row, table, inputs(row, table)); });
  };
  // Gated, from kGatedRows rows on: per block of up to kGatedRows rows,
  // act(gate) * up * (isr * left) first, into a stack scratch of the
  // block's rows of this group, then the transform reads it back. Two
  // loops where one would hold the gating's constants and the transform's
  // (lane indices, signs, permutation) live at once, more than the 32
  // vector registers: the store and the load back (one ST1W and one LD1W
  // x4 per four vectors) cost less than the spills. Fewer rows (a decode
  // step's one) take one loop, where the blocks' own setup would cost more.
  auto blockedRows = [&] {
    Value scratch = sme::alignedBase(
        b, loc,
        memref::AllocaOp::create(b, loc, MemRefType::get({kGatedRows * gs}, b.getF32Type()),
                                 ValueRange{}, b.getI64IntegerAttr(kVectorBytes)));
    auto blocks = scf::ForOp::create(b, loc, c0, rows, q.index(kGatedRows));
    OpBuilder::InsertionGuard blockGuard(b);
    b.setInsertionPointToStart(blocks.getBody());
    Value blockStart = blocks.getInductionVar();
    Value blockEnd = arith::MinUIOp::create(
        b, loc, rows, arith::AddIOp::create(b, loc, blockStart, q.index(kGatedRows)));
    auto slot = [&](Value row) {
      return q.at(scratch,
                  arith::MulIOp::create(b, loc, arith::SubIOp::create(b, loc, row, blockStart),
                                        q.index(gs * 4)));
    };
    rowLoopOf(blockStart, blockEnd, [&](Value row, Value table) {
      SmallVector<Value> w = inputsOf(row, table);
      Value target = slot(row);
      for (int64_t v = 0; v < vectors; v += 4)
        q.storeQuad(ArrayRef<Value>(w).slice(v, 4), q.at(target, v * kLanes * 4));
    });
    transformRows(blockStart, blockEnd, [&](Value row, Value) {
      SmallVector<Value> w;
      Value source = slot(row);
      for (int64_t v = 0; v < vectors; v += 4)
        llvm::append_range(w, q.loadQuad(q.at(source, v * kLanes * 4)));
      return w;
    });
  };
  transformRow = [&](Value row, Value table, ArrayRef<Value> inputs) {
    Value element = elementOf(row);
    SmallVector<Value> w(inputs);
    // The stages in the contract's order: inside vectors, then between them.
    for (size_t stage = 0; stage < swapIndices.size(); ++stage)
      for (Value &v : w)
        v = math::FmaOp::create(b, loc, v, stageSigns[stage],
                                q.swapLanes(v, swapIndices[stage]));
    for (size_t distance = 1; distance < w.size(); distance *= 2)
      butterflies(b, loc, w, distance);
    Value magnitudeBits = q.constantWords(0x7fffffff);
    Value columnMax;
    SmallVector<Value> scaledRight;
    for (int64_t v = 0; v < vectors; v += 4)
      llvm::append_range(scaledRight, q.loadQuad(q.at(table, (vectors + v) * kVectorBytes)));
    for (int64_t v = 0; v < vectors; ++v) {
      w[v] = arith::MulFOp::create(b, loc, w[v], scaledRight[v]);
      Value magnitude = arith::AndIOp::create(
          b, loc, arith::BitcastOp::create(b, loc, q.words, w[v]), magnitudeBits);
      columnMax = columnMax ? Value(arith::MaxSIOp::create(b, loc, columnMax, magnitude))
                            : magnitude;
    }
    Value maxAbs = arith::BitcastOp::create(
        b, loc, b.getF32Type(),
        vector::ReductionOp::create(b, loc, vector::CombiningKind::MAXSI, columnMax));
    // act_scales[row, g] = max(max|w| / 127, 1e-10), as every lowering.
    Value scale = arith::MaximumFOp::create(
        b, loc,
        arith::DivFOp::create(b, loc, maxAbs,
                              arith::ConstantOp::create(b, loc, b.getF32FloatAttr(127.0f))),
        arith::ConstantOp::create(b, loc, b.getF32FloatAttr(1e-10f)));
    Value scaleIndex = arith::AddIOp::create(
        b, loc, arith::MulIOp::create(b, loc, row, q.index(ng)), g);
    LLVM::StoreOp::create(b, loc, scale,
                          q.at(scalesBase, arith::MulIOp::create(b, loc, scaleIndex, q.index(4))),
                          /*alignment=*/4);
    Value scales = vector::BroadcastOp::create(b, loc, q.floats, scale);
    SmallVector<Value> natural;
    for (int64_t c = 0; c < byteVectors; ++c) {
      SmallVector<Value> quotients;
      for (int64_t i = 0; i < 4; ++i)
        quotients.push_back(arith::DivFOp::create(b, loc, w[4 * c + i], scales));
      natural.push_back(q.roundToBytes(quotients));
    }
    Value actRow = q.at(actBase, element);
    for (int64_t o = 0; o < byteVectors; ++o) {
      Value out;
      for (int64_t t = 0; t < pairs; ++t) {
        Value table0 = natural[std::min<int64_t>(2 * t, byteVectors - 1)];
        Value table1 = natural[std::min<int64_t>(2 * t + 1, byteVectors - 1)];
        Value part = q.lookup(table0, table1, permIndices[o * pairs + t]);
        out = out ? Value(arith::OrIOp::create(b, loc, out, part)) : part;
      }
      LLVM::StoreOp::create(b, loc, out, q.at(actRow, o * kVectorBytes), /*alignment=*/1);
    }
  };
  if (!gated) {
    transformRows(c0, rows, inputsOf);
    return;
  }
  Value blocked = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::uge, rows,
                                        q.index(kGatedRows));
  auto ifOp = scf::IfOp::create(b, loc, blocked, /*withElseRegion=*/true);
  b.setInsertionPointToStart(ifOp.thenBlock());
  blockedRows();
  b.setInsertionPointToStart(ifOp.elseBlock());
  transformRows(c0, rows, inputsOf);
}

} // namespace

bool mlir::cq4p::hasStreamingQuantize(QuantizeActivationsOp op) {
  int64_t gs = op.getGroupSize();
  return gs == 64 || gs == 128 || gs == 256;
}

void mlir::cq4p::lowerToStreamingQuantize(ModuleOp module, SymbolTable &symbols,
                                          QuantizeActivationsOp op) {
  Location loc = op.getLoc();
  auto type = FunctionType::get(op.getContext(), op->getOperandTypes(), {});
  // One leaf per kernel, gating and operand types (the types hold the group
  // size: the signs and the permutation are gs long). A kernel has one
  // transform; a second of other types gets a numbered name.
  std::string base = op->getParentOfType<func::FuncOp>().getSymName().str() +
                     "_sme_quantize";
  if (std::optional<Activation> gating = op.getGating())
    base += "_" + stringifyActivation(*gating).str();
  std::string name = base;
  for (int i = 1;; ++i) {
    auto existing = symbols.lookup<func::FuncOp>(name);
    if (!existing || existing.getFunctionType() == type)
      break;
    name = base + "_" + std::to_string(i);
  }
  auto leaf = symbols.lookup<func::FuncOp>(name);
  if (!leaf) {
    OpBuilder b = OpBuilder::atBlockEnd(module.getBody());
    leaf = func::FuncOp::create(b, loc, name, type);
    leaf.setPrivate();
    leaf->setAttr("cq4p.sme_leaf", b.getUnitAttr());
    Block *entry = leaf.addEntryBlock();
    OpBuilder body = OpBuilder::atBlockBegin(entry);
    buildQuantizeLeafBody(body, loc, op, entry->getArguments());
    func::ReturnOp::create(body, loc);
    symbols.insert(leaf);
  }
  OpBuilder b(op);
  func::CallOp::create(b, loc, leaf, op->getOperands());
  op.erase();
}

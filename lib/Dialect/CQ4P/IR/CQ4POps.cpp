//===- CQ4POps.cpp - cq4p operations --------------------------------------===//

#include "cq4p/Dialect/CQ4P/IR/CQ4P.h"
#include "cq4p/format.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "llvm/Support/MathExtras.h"

#include <cmath>
#include <cstdio>
#include <string>

using namespace mlir;
using namespace mlir::cq4p;

/// `[rows, begin, end]`: the scalars as bare keywords.
static ParseResult parseScalars(OpAsmParser &parser, ArrayAttr &scalars) {
  SmallVector<Attribute> values;
  if (parser.parseCommaSeparatedList(
          OpAsmParser::Delimiter::Square, [&]() -> ParseResult {
            FailureOr<DispatchScalar> scalar = parseEnumKeyword<DispatchScalar>(
                parser, "dispatch scalar",
                "rows, position, begin, end or context");
            if (failed(scalar))
              return failure();
            values.push_back(
                DispatchScalarAttr::get(parser.getContext(), *scalar));
            return success();
          }))
    return failure();
  scalars = parser.getBuilder().getArrayAttr(values);
  return success();
}

static void printScalars(OpAsmPrinter &printer, Operation *, ArrayAttr scalars) {
  printer << '[';
  llvm::interleaveComma(scalars, printer, [&](Attribute scalar) {
    printer << stringifyDispatchScalar(
        cast<DispatchScalarAttr>(scalar).getValue());
  });
  printer << ']';
}

#define GET_OP_CLASSES
#include "cq4p/Dialect/CQ4P/IR/CQ4POps.cpp.inc"

/// A float the way messages write it: `inf`, `nan`, or the shortest
/// decimal (`1`, `0.125`, `-1e-06`).
static std::string formatFloat(float value) {
  if (std::isnan(value))
    return "nan";
  if (std::isinf(value))
    return value < 0 ? "-inf" : "inf";
  char text[32];
  std::snprintf(text, sizeof(text), "%g", double(value));
  return text;
}

/// A dimension the way a tensor type writes it: a number or `?`.
static std::string formatDim(int64_t size) {
  return ShapedType::isDynamic(size) ? "?" : std::to_string(size);
}

LogicalResult LinearOp::verify() {
  RankedTensorType inputType = getInput().getType();
  RankedTensorType resultType = getResult().getType();
  WeightType weightType = getWeight().getType();

  if (inputType.getRank() != 2)
    return emitOpError() << "expected the input to have rank 2 ([M, K]), got "
                            "rank "
                         << inputType.getRank();
  if (resultType.getRank() != 2)
    return emitOpError() << "expected the result to have rank 2 ([M, N]), got "
                            "rank "
                         << resultType.getRank();

  int64_t m = inputType.getDimSize(0);
  int64_t k = inputType.getDimSize(1);
  int64_t resultM = resultType.getDimSize(0);
  int64_t n = resultType.getDimSize(1);
  if (k != weightType.getK())
    return emitOpError() << "expected the input's K (" << formatDim(k)
                         << ") to equal the weight's K (" << weightType.getK()
                         << ")";
  if (n != weightType.getN())
    return emitOpError() << "expected the result's N (" << formatDim(n)
                         << ") to equal the weight's N (" << weightType.getN()
                         << ")";
  if (resultM != m)
    return emitOpError() << "expected the result's M (" << formatDim(resultM)
                         << ") to equal the input's M (" << formatDim(m) << ")";
  if (Value bias = getBias()) {
    auto biasType = cast<RankedTensorType>(bias.getType());
    if (biasType.getRank() != 1 || biasType.getDimSize(0) != n)
      return emitOpError() << "expected the bias to be [N = " << n << "], got ["
                           << (biasType.getRank() == 1
                                   ? formatDim(biasType.getDimSize(0))
                                   : "rank " + std::to_string(biasType.getRank()))
                           << "]";
  }
  return success();
}

LogicalResult EmbeddingOp::verify() {
  WeightType weightType = getWeight().getType();
  RankedTensorType idsType = getIds().getType();
  RankedTensorType resultType = getResult().getType();
  if (weightType.getRotation() != Rotation::orthogonal)
    return emitOpError() << "expected an orthogonal weight (a token embedding), "
                            "got a hadamard one";
  if (std::optional<APFloat> scale = getScale();
      scale && !std::isfinite(scale->convertToFloat()))
    return emitOpError() << "expected a finite scale, got "
                         << formatFloat(scale->convertToFloat());
  if (idsType.getRank() != 1)
    return emitOpError() << "expected the ids to have rank 1, got rank "
                         << idsType.getRank();
  if (resultType.getRank() != 2)
    return emitOpError() << "expected the result to have rank 2 ([ids, K]), "
                            "got rank "
                         << resultType.getRank();
  if (resultType.getDimSize(0) != idsType.getDimSize(0))
    return emitOpError() << "expected the result's rows ("
                         << formatDim(resultType.getDimSize(0))
                         << ") to equal the number of ids ("
                         << formatDim(idsType.getDimSize(0)) << ")";
  std::optional<uint64_t> rowsPerId = getRowsPerId();
  if (rowsPerId && (int64_t(*rowsPerId) < 1 ||
                    weightType.getN() % int64_t(*rowsPerId) != 0))
    return emitOpError() << "expected rows_per_id (" << int64_t(*rowsPerId)
                         << ") to be at least 1 and to divide the table's rows ("
                         << weightType.getN() << ")";
  int64_t rows = getRowsPerIdOrOne();
  if (resultType.getDimSize(1) != rows * weightType.getK()) {
    InFlightDiagnostic error = emitOpError()
                               << "expected the result's width ("
                               << formatDim(resultType.getDimSize(1))
                               << ") to equal the weight's K (" << weightType.getK()
                               << ")";
    if (rows > 1)
      error << " times rows_per_id (" << rows << ")";
    return error;
  }
  return success();
}

//===----------------------------------------------------------------------===//
// Kernel-level ops
//===----------------------------------------------------------------------===//

namespace {
/// Checks one dimension of a buffer operand, naming it in the message.
struct ShapeChecker {
  Operation *op;
  LogicalResult failed = success();

  /// Expects `type` dimension `dim` to be `expected` (dynamic matches only
  /// dynamic).
  ShapeChecker &dim(StringRef what, Value value, unsigned dim,
                    int64_t expected) {
    if (::mlir::failed(failed))
      return *this;
    auto type = cast<MemRefType>(value.getType());
    int64_t actual = type.getDimSize(dim);
    if (actual != expected)
      failed = op->emitOpError()
               << "expected dimension " << dim << " of " << what << " to be "
               << formatDim(expected) << ", got " << formatDim(actual);
    return *this;
  }
  /// Expects dimension `dim` of `what` to be static.
  ShapeChecker &isStatic(StringRef what, Value value, unsigned dim) {
    if (::mlir::failed(failed))
      return *this;
    auto type = cast<MemRefType>(value.getType());
    if (type.isDynamicDim(dim))
      failed = op->emitOpError()
               << "expected dimension " << dim << " of " << what
               << " to be static";
    return *this;
  }
  /// Expects the same row count (dimension 0) in both.
  ShapeChecker &sameRows(StringRef what, Value value, StringRef otherWhat,
                         Value other) {
    if (::mlir::failed(failed))
      return *this;
    int64_t a = cast<MemRefType>(value.getType()).getDimSize(0);
    int64_t b = cast<MemRefType>(other.getType()).getDimSize(0);
    if (a != b)
      failed = op->emitOpError()
               << "expected " << what << " and " << otherWhat
               << " to have the same rows, got " << formatDim(a) << " and "
               << formatDim(b);
    return *this;
  }
};

int64_t dimOf(Value value, unsigned dim) {
  return cast<MemRefType>(value.getType()).getDimSize(dim);
}

LogicalResult verifyGroupSize(Operation *op, int64_t k, int64_t groupSize) {
  if (groupSize <= 0 || !llvm::isPowerOf2_64(groupSize))
    return op->emitOpError() << "expected the group size (" << groupSize
                             << ") to be a power of two";
  if (k % groupSize != 0)
    return op->emitOpError() << "expected K (" << k
                             << ") to be a multiple of the group size ("
                             << groupSize << ")";
  return success();
}
} // namespace

/// What both activation transforms require: a static K, a power-of-two
/// group size dividing it, and activations and scales for every input row.
/// Returns K, or nothing after reporting.
static std::optional<int64_t> verifyActivationOperands(ShapeChecker &check,
                                                       Operation *op, Value x,
                                                       Value isr, Value act,
                                                       Value actScales,
                                                       int64_t gs) {
  check.isStatic("the input", x, 1);
  if (failed(check.failed))
    return std::nullopt;
  int64_t k = dimOf(x, 1);
  if (failed(verifyGroupSize(op, k, gs)))
    return std::nullopt;
  check.dim("the input scale reciprocal", isr, 0, k)
      .dim("the activations", act, 1, k)
      .dim("the activation scales", actScales, 1, k / gs)
      .sameRows("the input", x, "the activations", act)
      .sameRows("the input", x, "the activation scales", actScales);
  if (failed(check.failed))
    return std::nullopt;
  return k;
}

LogicalResult QuantizeActivationsOp::verify() {
  ShapeChecker check{*this};
  int64_t gs = getGroupSize();
  if (!verifyActivationOperands(check, *this, getX(), getInputScaleRecip(),
                                getAct(), getActScales(), gs))
    return failure();
  if (bool(getUp()) != bool(getGatingAttr()))
    return emitOpError() << "expected the up rows and the gating activation "
                            "together (got "
                         << (getUp() ? "up rows" : "a gating activation")
                         << " alone)";
  if (Value up = getUp())
    check.dim("the up rows", up, 0, dimOf(getX(), 0))
        .dim("the up rows", up, 1, dimOf(getX(), 1));
  return check.dim("the left signs", getLeftSigns(), 0, gs)
      .dim("the right signs", getRightSigns(), 0, gs)
      .dim("the permutation", getPermutation(), 0, gs)
      .failed;
}

LogicalResult RotateQuantizeActivationsOp::verify() {
  ShapeChecker check{*this};
  std::optional<int64_t> k =
      verifyActivationOperands(check, *this, getX(), getInputScaleRecip(),
                               getAct(), getActScales(), getGroupSize());
  if (!k)
    return failure();
  return check.dim("the rotation", getRotation(), 0, *k)
      .dim("the rotation", getRotation(), 1, *k)
      .failed;
}

/// The panel buffer [SB][ng][gs/4][128]: static, 128-byte kg-blocks.
static LogicalResult verifyPanels(Operation *op, Value panels) {
  auto type = cast<MemRefType>(panels.getType());
  if (!type.hasStaticShape())
    return op->emitOpError() << "expected static panels, got " << type;
  if (type.getDimSize(3) != CQ4P_KG_BLOCK_BYTES)
    return op->emitOpError() << "expected 128-byte kg-blocks in the panels "
                                "(dimension 3), got "
                             << type.getDimSize(3);
  return success();
}

LogicalResult PanelMatmulOp::verify() {
  if (failed(verifyPanels(*this, getPanels())))
    return failure();
  int64_t sb = dimOf(getPanels(), 0), ng = dimOf(getPanels(), 1);
  int64_t k = ng * dimOf(getPanels(), 2) * CQ4P_KG_BLOCK_K;
  ShapeChecker check{*this};
  check.dim("the norm panels", getNormPanels(), 0, sb)
      .dim("the norm panels", getNormPanels(), 1, ng)
      .dim("the norm panels", getNormPanels(), 2, CQ4P_PANEL_CHANNELS)
      .dim("the int8 codebook", getCbI8(), 0, CQ4P_CODEBOOK_LEVELS)
      .dim("the activations", getAct(), 1, k)
      .dim("the activation scales", getActScales(), 1, ng)
      .isStatic("the output", getY(), 1)
      .sameRows("the activations", getAct(), "the activation scales",
                getActScales())
      .sameRows("the activations", getAct(), "the output", getY());
  if (failed(check.failed))
    return failure();
  int64_t n = dimOf(getY(), 1);
  if (int64_t(cq4p_num_super_blocks(n)) != sb)
    return emitOpError() << "expected " << cq4p_num_super_blocks(n)
                         << " super-blocks for N = " << n << ", got " << sb;
  return success();
}

LogicalResult PanelDotOp::verify() {
  if (failed(verifyPanels(*this, getPanels())))
    return failure();
  int64_t k = dimOf(getPanels(), 1) * dimOf(getPanels(), 2) * CQ4P_KG_BLOCK_K;
  ShapeChecker check{*this};
  check.dim("the int8 codebook", getCbI8(), 0, CQ4P_CODEBOOK_LEVELS)
      .dim("the activations", getAct(), 1, k)
      .isStatic("the partials", getPartials(), 0)
      .dim("the partials", getPartials(), 1, CQ4P_PANEL_CHANNELS);
  if (failed(check.failed) || !getPairedActivations())
    return check.failed;
  // A packed tile has exactly the partials' rows, in whole 8-K pairs.
  check.dim("the paired activations", getAct(), 0, dimOf(getPartials(), 0));
  if (failed(check.failed))
    return failure();
  if (k % 8 != 0)
    return emitOpError() << "expected K (" << k
                         << ") to be a multiple of 8 with paired activations";
  return success();
}

LogicalResult PanelPartialsOp::verify() {
  if (failed(verifyPanels(*this, getPanels())))
    return failure();
  int64_t ng = dimOf(getPanels(), 1), kg = dimOf(getPanels(), 2);
  int64_t k = ng * kg * CQ4P_KG_BLOCK_K;
  auto actType = cast<MemRefType>(getAct().getType());
  ShapeChecker check{*this};
  check.dim("the int8 codebook", getCbI8(), 0, CQ4P_CODEBOOK_LEVELS)
      .isStatic("the partials", getPartials(), 0)
      .isStatic("the partials", getPartials(), 1)
      .dim("the partials", getPartials(), 2, CQ4P_PANEL_CHANNELS);
  if (failed(check.failed))
    return failure();
  int64_t tileRows = dimOf(getPartials(), 1);
  if (dimOf(getPartials(), 0) > ng)
    return emitOpError() << "expected at most " << ng
                         << " groups of partials, got " << dimOf(getPartials(), 0);
  if (actType.getRank() == 2)
    return check.dim("the activations", getAct(), 1, k).failed;
  return check.dim("the packed activations", getAct(), 0, ng)
      .dim("the packed activations", getAct(), 1, kg)
      .dim("the packed activations", getAct(), 2, tileRows)
      .dim("the packed activations", getAct(), 3, CQ4P_KG_BLOCK_K)
      .failed;
}

LogicalResult PackActivationTileOp::verify() {
  ShapeChecker check{*this};
  check.isStatic("the activations", getAct(), 1);
  if (failed(check.failed))
    return failure();
  int64_t k = dimOf(getAct(), 1);
  int64_t ng = dimOf(getPacked(), 0), kg = dimOf(getPacked(), 1);
  int64_t tileRows = dimOf(getPacked(), 2);
  if (ng * kg * CQ4P_KG_BLOCK_K != k)
    return emitOpError() << "expected the packed tile to hold K = " << k
                         << " values per row, got " << ng * kg * CQ4P_KG_BLOCK_K;
  return check.dim("the packed activations", getPacked(), 3, CQ4P_KG_BLOCK_K)
      .dim("the activation scales", getActScales(), 1, ng)
      .dim("the packed scales", getPackedScales(), 0, tileRows)
      .dim("the packed scales", getPackedScales(), 1, ng)
      .sameRows("the activations", getAct(), "the activation scales",
                getActScales())
      .failed;
}

LogicalResult RescaleOp::verify() {
  ShapeChecker check{*this};
  check.isStatic("the partials", getPartials(), 0)
      .dim("the partials", getPartials(), 1, CQ4P_PANEL_CHANNELS)
      .dim("the accumulator", getAccum(), 0, dimOf(getPartials(), 0))
      .dim("the accumulator", getAccum(), 1, CQ4P_PANEL_CHANNELS)
      .dim("the norm panels", getNormPanels(), 2, CQ4P_PANEL_CHANNELS)
      .dim("the activation scales", getActScales(), 1,
           dimOf(getNormPanels(), 1));
  return check.failed;
}

LogicalResult DecodeEmbeddingOp::verify() {
  if (failed(verifyPanels(*this, getPanels())))
    return failure();
  int64_t ng = dimOf(getPanels(), 1);
  int64_t k = ng * dimOf(getPanels(), 2) * CQ4P_KG_BLOCK_K;
  ShapeChecker check{*this};
  check.dim("the norms", getNorms(), 1, ng)
      .dim("the codebook", getCodebook(), 0, CQ4P_CODEBOOK_LEVELS)
      .dim("the transposed rotation", getRotationT(), 0, k)
      .dim("the transposed rotation", getRotationT(), 1, k)
      .dim("the input scale reciprocal", getInputScaleRecip(), 0, k)
      .dim("the output", getOut(), 1, k)
      .sameRows("the ids", getIds(), "the output", getOut());
  return check.failed;
}

/// The shape rules shared by the graph-level and the kernel-level attention.
static LogicalResult verifyAttentionShapes(Operation *op, ShapedType q,
                                           ShapedType k, ShapedType v,
                                           ShapedType out, int64_t heads,
                                           int64_t kvHeads, int64_t headDim,
                                           int64_t window, bool cached = false) {
  if (heads <= 0 || kvHeads <= 0 || headDim <= 0 || window < 0)
    return op->emitOpError() << "expected positive heads (" << heads
                             << "), kv heads (" << kvHeads << ") and head dim ("
                             << headDim << "), and a window >= 0 (" << window
                             << ")";
  if (heads % kvHeads != 0)
    return op->emitOpError() << "expected the kv heads (" << kvHeads
                             << ") to divide the heads (" << heads << ")";
  struct Operand {
    const char *name;
    ShapedType type;
    int64_t width;
    bool cacheLength;
  } operands[] = {{"q", q, heads * headDim, false},
                  {"k", k, kvHeads * headDim, true},
                  {"v", v, kvHeads * headDim, true},
                  {"the output", out, heads * headDim, false}};
  for (const Operand &operand : operands) {
    if (operand.type.getRank() != 2)
      return op->emitOpError() << "expected " << operand.name
                               << " to have rank 2 ([S, heads * head_dim]), got rank "
                               << operand.type.getRank();
    if (operand.type.getDimSize(1) != operand.width)
      return op->emitOpError() << "expected " << operand.name << "'s width ("
                               << formatDim(operand.type.getDimSize(1))
                               << ") to be " << operand.width;
    // Keys and values over a cache have the cache's own length.
    if (cached && operand.cacheLength)
      continue;
    if (operand.type.getDimSize(0) != q.getDimSize(0))
      return op->emitOpError() << "expected " << operand.name
                               << " to have q's sequence length ("
                               << formatDim(q.getDimSize(0)) << "), got "
                               << formatDim(operand.type.getDimSize(0));
  }
  return success();
}

/// An attention's or embedding's scale: a finite number.
static LogicalResult verifyFiniteScale(Operation *op, float scale) {
  if (!std::isfinite(scale))
    return op->emitOpError() << "expected a finite scale, got "
                             << formatFloat(scale);
  return success();
}

LogicalResult PrefillAttentionOp::verify() {
  if (failed(verifyFiniteScale(*this, getScale().convertToFloat())))
    return failure();
  return verifyAttentionShapes(*this, getQ().getType(), getK().getType(),
                               getV().getType(), getResult().getType(),
                               getNumHeads(), getNumKvHeads(), getHeadDim(),
                               getWindow());
}

LogicalResult AttentionOp::verify() {
  if (failed(verifyFiniteScale(*this, getScale().convertToFloat())))
    return failure();
  return verifyAttentionShapes(
      *this, cast<ShapedType>(getQ().getType()), cast<ShapedType>(getK().getType()),
      cast<ShapedType>(getV().getType()), cast<ShapedType>(getOut().getType()),
      getNumHeads(), getNumKvHeads(), getHeadDim(), getWindow(),
      static_cast<bool>(getPosition()));
}

//===----------------------------------------------------------------------===//
// Model ops
//===----------------------------------------------------------------------===//

/// A `[M, W]` activation: rank 2 with a static width.
static LogicalResult verifyRows(Operation *op, StringRef what,
                                RankedTensorType type) {
  if (type.getRank() != 2)
    return op->emitOpError() << "expected " << what
                             << " to have rank 2 ([M, width]), got rank "
                             << type.getRank();
  if (type.isDynamicDim(1))
    return op->emitOpError() << "expected " << what << " to have a static width";
  return success();
}

/// `a` and `b` are the same `[M, W]` shape (M may be dynamic in both).
static LogicalResult verifySameShape(Operation *op, StringRef whatA,
                                     RankedTensorType a, StringRef whatB,
                                     RankedTensorType b) {
  if (a.getShape() != b.getShape())
    return op->emitOpError()
           << "expected " << whatB << " ([" << formatDim(b.getDimSize(0)) << ", "
           << formatDim(b.getDimSize(1)) << "]) to have the shape of " << whatA
           << " ([" << formatDim(a.getDimSize(0)) << ", "
           << formatDim(a.getDimSize(1)) << "])";
  return success();
}

int64_t RmsNormOp::getChunkLength() {
  if (Value weight = getWeight())
    return cast<RankedTensorType>(weight.getType()).getDimSize(0);
  return getChunk() ? int64_t(*getChunk()) : int64_t(0);
}

LogicalResult RmsNormOp::verify() {
  if (failed(verifyRows(*this, "the input", getInput().getType())) ||
      failed(verifySameShape(*this, "the input", getInput().getType(),
                             "the result", getResult().getType())))
    return failure();
  int64_t width = getInput().getType().getDimSize(1);
  if (Value weightValue = getWeight()) {
    auto weight = cast<RankedTensorType>(weightValue.getType());
    if (weight.getRank() != 1 || weight.isDynamicDim(0) || weight.getDimSize(0) <= 0)
      return emitOpError() << "expected a static 1-d weight, got rank "
                           << weight.getRank();
    if (getChunk())
      return emitOpError() << "expected no chunk attribute with a weight (the "
                              "weight's length is the chunk)";
    if (width % weight.getDimSize(0) != 0)
      return emitOpError() << "expected the weight's length ("
                           << weight.getDimSize(0)
                           << ") to divide the row width (" << width << ")";
  } else {
    if (!getChunk())
      return emitOpError() << "expected a chunk attribute without a weight";
    int64_t d = *getChunk();
    if (d <= 0 || width % d != 0)
      return emitOpError() << "expected the chunk (" << d
                           << ") to be positive and divide the row width ("
                           << width << ")";
    if (getUnitOffset())
      return emitOpError() << "expected no unit_offset without a weight";
  }
  float epsilon = getEpsilon().convertToFloat();
  if (!(epsilon >= 0.0f) || std::isinf(epsilon))
    return emitOpError() << "expected a finite epsilon >= 0, got "
                         << formatFloat(epsilon);
  return success();
}

LogicalResult RopeOp::verify() {
  if (failed(verifyRows(*this, "the input", getInput().getType())) ||
      failed(verifySameShape(*this, "the input", getInput().getType(),
                             "the result", getResult().getType())))
    return failure();
  int64_t width = getInput().getType().getDimSize(1);
  int64_t d = getHeadDim();
  if (d <= 0 || d % 2 != 0)
    return emitOpError() << "expected an even, positive head dim, got " << d;
  if (width % d != 0)
    return emitOpError() << "expected the head dim (" << d
                         << ") to divide the row width (" << width << ")";
  if (std::optional<ArrayRef<float>> freqs = getInvFreq()) {
    if (getTheta() || getScaling())
      return emitOpError() << "expected either inv_freq or theta and scaling, "
                              "not both";
    if (int64_t(freqs->size()) != d / 2)
      return emitOpError() << "expected head_dim / 2 = " << d / 2
                           << " frequencies in inv_freq, got " << freqs->size();
    for (auto [i, f] : llvm::enumerate(*freqs))
      if (!(f >= 0.0f) || std::isinf(f))
        return emitOpError() << "expected finite frequencies >= 0, got "
                             << formatFloat(f) << " at " << i;
    return success();
  }
  if (!getTheta() || !getScaling())
    return emitOpError() << "expected theta and scaling, or inv_freq";
  float theta = getTheta()->convertToFloat();
  float scaling = getScaling()->convertToFloat();
  if (!(theta > 0.0f) || !(scaling > 0.0f) || std::isinf(theta) ||
      std::isinf(scaling))
    return emitOpError() << "expected finite theta (" << formatFloat(theta)
                         << ") and scaling (" << formatFloat(scaling) << ") > 0";
  return success();
}

SmallVector<float> RopeOp::getFrequencies() {
  if (std::optional<ArrayRef<float>> freqs = getInvFreq())
    return SmallVector<float>(*freqs);
  // inv_freq[i] = theta^(-2i/d) / scaling, as fp32 computes the exponent.
  int64_t d = getHeadDim();
  double theta = getTheta()->convertToDouble();
  float scaling = getScaling()->convertToFloat();
  SmallVector<float> freqs;
  for (int64_t i = 0; i < d / 2; ++i) {
    float exponent = float(2 * i) / float(d);
    freqs.push_back(float(1.0 / std::pow(theta, double(exponent))) / scaling);
  }
  return freqs;
}

ParseResult CachedAttentionOp::parse(OpAsmParser &parser, OperationState &result) {
  SmallVector<OpAsmParser::UnresolvedOperand, 4> operands;
  SmallVector<Type, 4> types;
  Type resultType;
  SMLoc loc = parser.getCurrentLocation();
  if (parser.parseOperandList(operands) ||
      parser.parseOptionalAttrDict(result.attributes) || parser.parseColon() ||
      parser.parseTypeList(types) || parser.parseArrow() ||
      parser.parseType(resultType))
    return failure();
  if ((operands.size() != 4 && operands.size() != 2) ||
      types.size() != operands.size())
    return parser.emitError(loc)
           << "expected queries, keys, values and the position, or queries and "
              "the position, each with its type; got "
           << operands.size() << " operands and " << types.size() << " types";
  if (parser.resolveOperands(operands, types, loc, result.operands))
    return failure();
  int32_t kv = operands.size() == 4 ? 1 : 0;
  result.addAttribute(getOperandSegmentSizesAttrName(result.name),
                      parser.getBuilder().getDenseI32ArrayAttr({1, kv, kv, 1}));
  result.addTypes(resultType);
  return success();
}

void CachedAttentionOp::print(OpAsmPrinter &p) {
  p << ' ' << getOperation()->getOperands();
  p.printOptionalAttrDict((*this)->getAttrs(),
                          {getOperandSegmentSizesAttrName()});
  p << " : ";
  llvm::interleaveComma(getOperation()->getOperandTypes(), p);
  p << " -> " << getResult().getType();
}

LogicalResult CachedAttentionOp::verify() {
  if (bool(getKeys()) != bool(getValues()))
    return emitOpError() << "expected both keys and values, or neither (an "
                            "attention over another layer's cache)";
  if (failed(verifyRows(*this, "the queries", getQueries().getType())))
    return failure();
  if (getLayerAttr().getInt() < 0)
    return emitOpError() << "expected a layer >= 0, got "
                         << getLayerAttr().getInt();
  if (getHeadDim() % 16 != 0)
    return emitOpError() << "expected the head dim (" << getHeadDim()
                         << ") to be a multiple of 16";
  float scale = getScale().convertToFloat();
  if (!std::isfinite(scale))
    return emitOpError() << "expected a finite scale, got " << formatFloat(scale);
  // Without keys and values, shapes are checked as if they had the
  // queries' rows and the cache's width.
  auto kvType = RankedTensorType::get(
      {getQueries().getType().getDimSize(0), int64_t(getNumKvHeads() * getHeadDim())},
      getQueries().getType().getElementType());
  RankedTensorType keys = getKeys() ? cast<RankedTensorType>(getKeys().getType()) : kvType;
  RankedTensorType values =
      getValues() ? cast<RankedTensorType>(getValues().getType()) : kvType;
  for (auto [what, type] : {std::pair<StringRef, RankedTensorType>{"the keys", keys},
                            {"the values", values}})
    if (failed(verifyRows(*this, what, type)))
      return failure();
  return verifyAttentionShapes(*this, getQueries().getType(), keys, values,
                               getResult().getType(), getNumHeads(),
                               getNumKvHeads(), getHeadDim(), getWindow());
}

LogicalResult GluOp::verify() {
  if (failed(verifyRows(*this, "the gate", getGate().getType())) ||
      failed(verifySameShape(*this, "the gate", getGate().getType(), "the up",
                             getUp().getType())) ||
      failed(verifySameShape(*this, "the gate", getGate().getType(),
                             "the result", getResult().getType())))
    return failure();
  return success();
}

LogicalResult ColumnsOp::verify() {
  if (failed(verifyRows(*this, "the input", getInput().getType())) ||
      failed(verifyRows(*this, "the result", getResult().getType())))
    return failure();
  int64_t width = getInput().getType().getDimSize(1);
  int64_t offset = getOffset();
  if (offset < 0 || offset >= width)
    return emitOpError() << "expected the offset (" << offset
                         << ") to be a column of the input (0 to "
                         << width - 1 << ")";
  int64_t rows = getInput().getType().getDimSize(0);
  int64_t resultRows = getResult().getType().getDimSize(0);
  if (rows != resultRows)
    return emitOpError() << "expected the result's rows ("
                         << formatDim(resultRows) << ") to equal the input's ("
                         << formatDim(rows) << ")";
  return success();
}

/// A bound scalar or vector operand: a static 1-d tensor of `length`.
static LogicalResult verifyVector(Operation *op, StringRef what, Value value,
                                  int64_t length) {
  auto type = cast<RankedTensorType>(value.getType());
  if (type.getRank() != 1 || type.getDimSize(0) != length)
    return op->emitOpError() << "expected " << what << " to be a 1-d tensor of "
                             << length << " elements, got " << type;
  return success();
}

LogicalResult ScaleOp::verify() {
  if (failed(verifyRows(*this, "the input", getInput().getType())) ||
      failed(verifySameShape(*this, "the input", getInput().getType(),
                             "the result", getResult().getType())))
    return failure();
  if (bool(getScalar()) == bool(getFactor()))
    return emitOpError() << "expected either a factor or a scalar operand";
  if (getScalar())
    return verifyVector(*this, "the scalar", getScalar(), 1);
  float factor = getFactor()->convertToFloat();
  if (!std::isfinite(factor))
    return emitOpError() << "expected a finite factor, got " << formatFloat(factor);
  return success();
}

LogicalResult SoftcapOp::verify() {
  if (failed(verifyRows(*this, "the input", getInput().getType())) ||
      failed(verifySameShape(*this, "the input", getInput().getType(),
                             "the result", getResult().getType())))
    return failure();
  float cap = getCap().convertToFloat();
  if (!(cap > 0.0f) || std::isinf(cap))
    return emitOpError() << "expected a finite cap > 0, got " << formatFloat(cap);
  return success();
}

int64_t ShortConvOp::getKernelWidth() {
  int64_t h = getResult().getType().getDimSize(1);
  int64_t elements = getWeight().getType().getNumElements();
  return h > 0 ? elements / h : 0;
}

LogicalResult ShortConvOp::verify() {
  if (failed(verifyRows(*this, "the input", getInput().getType())) ||
      failed(verifyRows(*this, "the result", getResult().getType())))
    return failure();
  int64_t h = getResult().getType().getDimSize(1);
  int64_t width = getInput().getType().getDimSize(1);
  if (width != 3 * h)
    return emitOpError() << "expected the input's width (" << width
                         << ") to be 3 x the result's (B, C and x: 3 x " << h
                         << " = " << 3 * h << ")";
  if (getInput().getType().getDimSize(0) != getResult().getType().getDimSize(0))
    return emitOpError() << "expected the result's rows ("
                         << formatDim(getResult().getType().getDimSize(0))
                         << ") to equal the input's ("
                         << formatDim(getInput().getType().getDimSize(0)) << ")";
  RankedTensorType weight = getWeight().getType();
  if (weight.getRank() != 1 || weight.isDynamicDim(0) ||
      weight.getDimSize(0) % h != 0 || weight.getDimSize(0) / h < 1 ||
      weight.getDimSize(0) / h > 16)
    return emitOpError() << "expected the weight to be [H x L] = [" << h
                         << " x L] elements with 1 <= L <= 16, got " << weight;
  if (getLayerAttr().getInt() < 0)
    return emitOpError() << "expected a layer >= 0, got "
                         << getLayerAttr().getInt();
  return success();
}

LogicalResult DispatchOp::verify() {
  if (getWork().size() != 2 || getWork()[0] < 0 || getWork()[1] < 0)
    return emitOpError() << "expected work = [rows factor >= 0, constant >= 0]";
  if (std::optional<int64_t> grain = getGrain()) {
    if (*grain < 1)
      return emitOpError() << "expected a grain of at least 1 work item, found "
                           << *grain;
    if (getSerial())
      return emitOpError() << "expected no grain on a serial dispatch (one call "
                              "over all its work)";
  }
  return success();
}


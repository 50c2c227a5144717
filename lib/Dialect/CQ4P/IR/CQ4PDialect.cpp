//===- CQ4PDialect.cpp - the cq4p dialect ---------------------------------===//
//
// The dialect, its attributes (`#cq4p.place` and the enums of the dispatch
// contract, `#cq4p.kernel`, `#cq4p.model_plan`), and the verifier of the discardable `cq4p.*` attributes the
// passes hand each other: a malformed one is reported where it is written,
// not when a later pass trips over it.
//
//===----------------------------------------------------------------------===//

#include "WeightShape.h"

#include "cq4p/Dialect/CQ4P/IR/CQ4P.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/DialectImplementation.h"
#include "mlir/Interfaces/FunctionInterfaces.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/StringSwitch.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace mlir::cq4p;

#include "cq4p/Dialect/CQ4P/IR/CQ4PDialect.cpp.inc"
#include "cq4p/Dialect/CQ4P/IR/CQ4PEnums.cpp.inc"

#define GET_ATTRDEF_CLASSES
#include "cq4p/Dialect/CQ4P/IR/CQ4PAttrs.cpp.inc"

void CQ4PDialect::initialize() {
  registerTypes();
  registerAttributes();
  addOperations<
#define GET_OP_LIST
#include "cq4p/Dialect/CQ4P/IR/CQ4POps.cpp.inc"
      >();
}

void CQ4PDialect::registerAttributes() {
  addAttributes<
#define GET_ATTRDEF_LIST
#include "cq4p/Dialect/CQ4P/IR/CQ4PAttrs.cpp.inc"
      >();
}

//===----------------------------------------------------------------------===//
// #cq4p.place<base, key = value, ..., at_position, last_row>
//===----------------------------------------------------------------------===//

Attribute PlaceAttr::parse(AsmParser &parser, Type) {
  if (parser.parseLess())
    return {};
  FailureOr<PlaceBase> base = parseEnumKeyword<PlaceBase>(
      parser, "place base",
      "binding, workspace, keys, values, state, ids or logits");
  if (failed(base))
    return {};
  int64_t index = 0, offset = 0, cacheOffset = 0, rowBytes = 0;
  bool atPosition = false, lastRow = false;
  while (succeeded(parser.parseOptionalComma())) {
    SMLoc loc = parser.getCurrentLocation();
    StringRef key;
    if (parser.parseKeyword(&key))
      return {};
    if (key == "at_position") {
      atPosition = true;
      continue;
    }
    if (key == "last_row") {
      lastRow = true;
      continue;
    }
    int64_t *field = llvm::StringSwitch<int64_t *>(key)
                         .Case("index", &index)
                         .Case("offset", &offset)
                         .Case("cache_offset", &cacheOffset)
                         .Case("row_bytes", &rowBytes)
                         .Default(nullptr);
    if (!field) {
      parser.emitError(loc) << "unknown place field '" << key
                            << "' (expected index, offset, cache_offset, "
                               "row_bytes, at_position or last_row)";
      return {};
    }
    if (parser.parseEqual() || parser.parseInteger(*field))
      return {};
  }
  if (parser.parseGreater())
    return {};
  return parser.getChecked<PlaceAttr>(parser.getContext(), *base, index, offset,
                                      cacheOffset, rowBytes, atPosition,
                                      lastRow);
}

void PlaceAttr::print(AsmPrinter &printer) const {
  printer << '<' << stringifyPlaceBase(getBase());
  auto field = [&](StringRef key, int64_t value) {
    if (value)
      printer << ", " << key << " = " << value;
  };
  field("index", getIndex());
  field("offset", getOffset());
  field("cache_offset", getCacheOffset());
  field("row_bytes", getRowBytes());
  if (getAtPosition())
    printer << ", at_position";
  if (getLastRow())
    printer << ", last_row";
  printer << '>';
}

LogicalResult
PlaceAttr::verify(function_ref<InFlightDiagnostic()> emitError, PlaceBase base,
                  int64_t index, int64_t offset, int64_t cacheOffset,
                  int64_t rowBytes, bool atPosition, bool lastRow) {
  bool indexed = base == PlaceBase::binding || base == PlaceBase::keys ||
                 base == PlaceBase::values;
  bool cache = base == PlaceBase::keys || base == PlaceBase::values;
  if (index < 0 || offset < 0 || cacheOffset < 0 || rowBytes < 0)
    return emitError() << "expected the place's index (" << index
                       << "), offset (" << offset << "), cache_offset ("
                       << cacheOffset << ") and row_bytes (" << rowBytes
                       << ") to be non-negative";
  if (index && !indexed)
    return emitError() << "a " << stringifyPlaceBase(base)
                       << " place has no index (only binding, keys and values)";
  if (cacheOffset && !cache)
    return emitError() << "a " << stringifyPlaceBase(base)
                       << " place has no cache_offset (only keys and values)";
  if (atPosition && lastRow)
    return emitError() << "a place is at_position or last_row, not both";
  return success();
}

//===----------------------------------------------------------------------===//
// #cq4p.kernel<kind, key = value, ..., params = ["name": type, ...]>
//===----------------------------------------------------------------------===//

Attribute KernelAttr::parse(AsmParser &parser, Type) {
  MLIRContext *ctx = parser.getContext();
  if (parser.parseLess())
    return {};
  SMLoc kindLoc = parser.getCurrentLocation();
  StringRef kindName;
  if (parser.parseKeyword(&kindName))
    return {};
  std::optional<KernelKind> kind = symbolizeKernelKind(kindName);
  if (!kind) {
    parser.emitError(kindLoc) << "unknown kernel kind '" << kindName << "'";
    return {};
  }
  int64_t n = 0, k = 0, groupSize = 0, window = 0, minRows = 1, maxRows = 0;
  bool orthogonal = false;
  SmallVector<KernelParameter> params;
  auto parseParam = [&]() -> ParseResult {
    std::string name;
    Type type;
    if (parser.parseString(&name) || parser.parseColonType(type))
      return failure();
    StringAttr sizedBy;
    if (succeeded(parser.parseOptionalKeyword("sized_by"))) {
      std::string size;
      if (parser.parseString(&size))
        return failure();
      sizedBy = StringAttr::get(ctx, size);
    }
    params.push_back({StringAttr::get(ctx, name), type, sizedBy});
    return success();
  };
  while (succeeded(parser.parseOptionalComma())) {
    SMLoc loc = parser.getCurrentLocation();
    StringRef key;
    if (parser.parseKeyword(&key))
      return {};
    if (key == "orthogonal") {
      orthogonal = true;
      continue;
    }
    if (key == "params") {
      if (parser.parseEqual() ||
          parser.parseCommaSeparatedList(AsmParser::Delimiter::Square,
                                         parseParam))
        return {};
      continue;
    }
    int64_t *field = llvm::StringSwitch<int64_t *>(key)
                         .Case("n", &n)
                         .Case("k", &k)
                         .Case("group_size", &groupSize)
                         .Case("window", &window)
                         .Case("min_rows", &minRows)
                         .Case("max_rows", &maxRows)
                         .Default(nullptr);
    if (!field) {
      parser.emitError(loc) << "unknown kernel field '" << key
                            << "' (expected n, k, group_size, window, "
                               "orthogonal, min_rows, max_rows or params)";
      return {};
    }
    if (parser.parseEqual() || parser.parseInteger(*field))
      return {};
  }
  if (parser.parseGreater())
    return {};
  return parser.getChecked<KernelAttr>(ctx, *kind, n, k, groupSize, window,
                                       orthogonal, minRows, maxRows, params);
}

void KernelAttr::print(AsmPrinter &printer) const {
  printer << '<' << stringifyKernelKind(getKind());
  auto field = [&](StringRef key, int64_t value, int64_t byDefault) {
    if (value != byDefault)
      printer << ", " << key << " = " << value;
  };
  field("n", getN(), 0);
  field("k", getK(), 0);
  field("group_size", getGroupSize(), 0);
  field("window", getWindow(), 0);
  if (getOrthogonal())
    printer << ", orthogonal";
  field("min_rows", getMinRows(), 1);
  field("max_rows", getMaxRows(), 0);
  printer << ", params = [";
  llvm::interleaveComma(getParams(), printer, [&](const KernelParameter &param) {
    printer.printString(param.name.getValue());
    printer << ": ";
    printer.printType(param.type);
    if (param.sizedBy) {
      printer << " sized_by ";
      printer.printString(param.sizedBy.getValue());
    }
  });
  printer << "]>";
}

LogicalResult KernelAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                                 KernelKind kind, int64_t n, int64_t k,
                                 int64_t groupSize, int64_t window,
                                 bool orthogonal, int64_t minRows,
                                 int64_t maxRows,
                                 ArrayRef<KernelParameter> params) {
  if (n < 0 || k < 0 || groupSize < 0 || window < 0)
    return emitError() << "expected the kernel's n (" << n << "), k (" << k
                       << "), group_size (" << groupSize << ") and window ("
                       << window << ") to be non-negative";
  if (minRows < 1)
    return emitError() << "expected min_rows (" << minRows
                       << ") to be at least 1";
  if (maxRows != 0 && maxRows < minRows)
    return emitError() << "expected max_rows (" << maxRows
                       << ") to be 0 (unbounded) or at least min_rows ("
                       << minRows << ")";
  llvm::SmallDenseSet<StringAttr> names, scalars;
  for (const KernelParameter &param : params) {
    if (!param.name || param.name.getValue().empty() || !param.type)
      return emitError() << "expected each kernel parameter to have a name "
                            "and a type";
    if (!names.insert(param.name).second)
      return emitError() << "kernel parameter '" << param.name.getValue()
                         << "' appears twice";
    if (isa<IndexType, IntegerType>(param.type))
      scalars.insert(param.name);
    else if (!isa<MemRefType>(param.type))
      return emitError() << "expected kernel parameter '"
                         << param.name.getValue()
                         << "' to be a memref, an index or an integer, got "
                         << param.type;
  }
  for (const KernelParameter &param : params) {
    if (!param.sizedBy)
      continue;
    if (!isa<MemRefType>(param.type) || !scalars.contains(param.sizedBy))
      return emitError() << "kernel parameter '" << param.name.getValue()
                         << "' is sized_by '" << param.sizedBy.getValue()
                         << "', expected a buffer sized by an integer "
                            "parameter of the kernel";
  }
  return success();
}

//===----------------------------------------------------------------------===//
// #cq4p.model_plan<prefill_chunk = C, kv_dtype = D, ..., bindings = [...]>
//===----------------------------------------------------------------------===//

/// Parses `key = <integer>`.
static ParseResult parseIntegerField(AsmParser &parser, StringRef key,
                                     int64_t &value) {
  return failure(parser.parseKeyword(key) || parser.parseEqual() ||
                 parser.parseInteger(value));
}

/// Parses a binding: `"name": cq4<NxK, gs = G[, orthogonal]>` or
/// `"name": fp16<N>` / `fp32<N>`.
static ParseResult parsePlanBinding(AsmParser &parser,
                                    SmallVectorImpl<PlanBinding> &bindings) {
  std::string name;
  if (parser.parseString(&name) || parser.parseColon())
    return failure();
  FailureOr<BindingKind> kind =
      parseEnumKeyword<BindingKind>(parser, "binding kind", "cq4, fp16 or fp32");
  if (failed(kind) || parser.parseLess())
    return failure();
  PlanBinding binding;
  binding.tensor = StringAttr::get(parser.getContext(), name);
  binding.kind = *kind;
  if (*kind == BindingKind::cq4) {
    if (cq4p::detail::parseWeightShape(parser, binding.n, binding.k))
      return failure();
    if (parser.parseComma() ||
        parseIntegerField(parser, "gs", binding.groupSize))
      return failure();
    if (succeeded(parser.parseOptionalComma())) {
      if (parser.parseKeyword("orthogonal"))
        return failure();
      binding.orthogonal = true;
    }
  } else if (parser.parseInteger(binding.n)) {
    return failure();
  }
  if (parser.parseGreater())
    return failure();
  bindings.push_back(binding);
  return success();
}

Attribute ModelPlanAttr::parse(AsmParser &parser, Type) {
  int64_t prefillChunk, workspaceBytes, kvPositionBytes, kvWidth, stateBytes;
  SmallVector<PlanBinding> bindings;
  if (parser.parseLess() ||
      parseIntegerField(parser, "prefill_chunk", prefillChunk) ||
      parser.parseComma() || parser.parseKeyword("kv_dtype") ||
      parser.parseEqual())
    return {};
  FailureOr<KvDtype> kvDtype =
      parseEnumKeyword<KvDtype>(parser, "KV cache element type", "f32 or f16");
  if (failed(kvDtype) || parser.parseComma() ||
      parseIntegerField(parser, "workspace_bytes", workspaceBytes) ||
      parser.parseComma() ||
      parseIntegerField(parser, "kv_position_bytes", kvPositionBytes) ||
      parser.parseComma() || parseIntegerField(parser, "kv_width", kvWidth) ||
      parser.parseComma() ||
      parseIntegerField(parser, "state_bytes", stateBytes) ||
      parser.parseComma() || parser.parseKeyword("bindings") ||
      parser.parseEqual() ||
      parser.parseCommaSeparatedList(
          AsmParser::Delimiter::Square,
          [&] { return parsePlanBinding(parser, bindings); }) ||
      parser.parseGreater())
    return {};
  return parser.getChecked<ModelPlanAttr>(
      parser.getContext(), prefillChunk, *kvDtype, workspaceBytes,
      kvPositionBytes, kvWidth, stateBytes, bindings);
}

void ModelPlanAttr::print(AsmPrinter &printer) const {
  printer << "<prefill_chunk = " << getPrefillChunk()
          << ", kv_dtype = " << stringifyKvDtype(getKvDtype())
          << ", workspace_bytes = " << getWorkspaceBytes()
          << ", kv_position_bytes = " << getKvPositionBytes()
          << ", kv_width = " << getKvWidth()
          << ", state_bytes = " << getStateBytes() << ", bindings = [";
  llvm::interleaveComma(getBindings(), printer, [&](const PlanBinding &binding) {
    printer.printString(binding.tensor.getValue());
    printer << ": " << stringifyBindingKind(binding.kind) << '<';
    if (binding.kind == BindingKind::cq4) {
      printer << binding.n << 'x' << binding.k << ", gs = " << binding.groupSize;
      if (binding.orthogonal)
        printer << ", orthogonal";
    } else {
      printer << binding.n;
    }
    printer << '>';
  });
  printer << "]>";
}

/// A strategy's pair of row counts: both 0 (no decision), or rows > 0 and
/// minRows in [1, rows].
static LogicalResult verifyStrategyRows(function_ref<InFlightDiagnostic()> emitError,
                                        StringRef rowsName, int64_t rows,
                                        StringRef minName, int64_t minRows) {
  if (rows < 0)
    return emitError() << "expected " << rowsName << " (" << rows
                       << ") to be at least 0";
  if (rows == 0 && minRows != 0)
    return emitError() << "expected " << minName << " (" << minRows
                       << ") to be 0 when " << rowsName << " is 0";
  if (rows > 0 && (minRows < 1 || minRows > rows))
    return emitError() << "expected " << minName << " (" << minRows
                       << ") to be in [1, " << rowsName << " (" << rows << ")]";
  return success();
}

LogicalResult StrategyAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                                   int64_t tileRows, int64_t minTileRows,
                                   int64_t embeddingRows,
                                   int64_t embeddingMinRows,
                                   bool superBlockPartials, bool pairedTiles) {
  if (failed(verifyStrategyRows(emitError, "tile_rows", tileRows,
                                "min_tile_rows", minTileRows)))
    return failure();
  if (pairedTiles && tileRows > 0)
    return emitError() << "expected one GEMM tiling: paired_tiles or tile_rows ("
                       << tileRows << "), not both";
  return verifyStrategyRows(emitError, "embedding_rows", embeddingRows,
                            "embedding_min_rows", embeddingMinRows);
}

LogicalResult
ModelPlanAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                      int64_t prefillChunk, KvDtype kvDtype,
                      int64_t workspaceBytes, int64_t kvPositionBytes,
                      int64_t kvWidth, int64_t stateBytes,
                      ArrayRef<PlanBinding> bindings) {
  if (prefillChunk < 2)
    return emitError() << "expected prefill_chunk (" << prefillChunk
                       << ") to be at least 2";
  if (workspaceBytes < 0 || kvPositionBytes < 0 || kvWidth < 0 ||
      stateBytes < 0)
    return emitError() << "expected workspace_bytes (" << workspaceBytes
                       << "), kv_position_bytes (" << kvPositionBytes
                       << "), kv_width (" << kvWidth << ") and state_bytes ("
                       << stateBytes << ") to be non-negative";
  llvm::SmallDenseSet<StringAttr> tensors;
  for (const PlanBinding &binding : bindings) {
    if (!binding.tensor || binding.tensor.getValue().empty())
      return emitError() << "expected each binding to name its tensor";
    StringRef name = binding.tensor.getValue();
    if (!tensors.insert(binding.tensor).second)
      return emitError() << "binding '" << name << "' appears twice";
    if (binding.n <= 0)
      return emitError() << "expected binding '" << name << "''s size ("
                         << binding.n << ") to be positive";
    if (binding.kind != BindingKind::cq4) {
      if (binding.k || binding.groupSize || binding.orthogonal)
        return emitError() << "dense binding '" << name
                           << "' has a K, a group size or a rotation";
      continue;
    }
    if (binding.k <= 0 || binding.groupSize <= 0 ||
        binding.k % binding.groupSize != 0)
      return emitError() << "expected binding '" << name << "''s K ("
                         << binding.k
                         << ") to be a positive multiple of its group size ("
                         << binding.groupSize << ")";
  }
  return success();
}

//===----------------------------------------------------------------------===//
// Discardable attributes.
//===----------------------------------------------------------------------===//

namespace {

/// Checks that `dict` has each of `keys`, of type AttrT.
template <typename AttrT>
LogicalResult requireFields(Operation *op, StringRef attrName,
                            DictionaryAttr dict, ArrayRef<StringRef> keys,
                            StringRef what) {
  for (StringRef key : keys)
    if (!dict.getAs<AttrT>(key))
      return op->emitError() << "'" << attrName << "' expected " << what
                             << " '" << key << "', got " << dict;
  return success();
}

LogicalResult verifyModel(Operation *op, NamedAttribute attr) {
  auto dict = dyn_cast<DictionaryAttr>(attr.getValue());
  if (!dict || !isa<ModuleOp>(op))
    return op->emitError() << "'" << attr.getName().getValue()
                           << "' expected a dictionary on a module";
  return requireFields<IntegerAttr>(op, attr.getName(), dict,
                                    {"vocab", "hidden", "layers"},
                                    "an integer");
}

LogicalResult verifyModelPlan(Operation *op, NamedAttribute attr) {
  if (!isa<ModelPlanAttr>(attr.getValue()) || !isa<ModuleOp>(op))
    return op->emitError() << "'" << attr.getName().getValue()
                           << "' expected a #cq4p.model_plan on a module";
  return success();
}

LogicalResult verifyKernel(Operation *op, NamedAttribute attr) {
  if (!isa<KernelAttr>(attr.getValue()) || !isa<FunctionOpInterface>(op))
    return op->emitError() << "'" << attr.getName().getValue()
                           << "' expected a #cq4p.kernel on a function";
  return success();
}

LogicalResult verifyKernels(Operation *op, NamedAttribute attr) {
  auto refs = dyn_cast<ArrayAttr>(attr.getValue());
  if (!refs || !llvm::all_of(refs, llvm::IsaPred<FlatSymbolRefAttr>))
    return op->emitError() << "'" << attr.getName().getValue()
                           << "' expected an array of kernel symbols, got "
                           << attr.getValue();
  return success();
}

LogicalResult verifySmeLeaf(Operation *op, NamedAttribute attr) {
  if (!isa<UnitAttr>(attr.getValue()) || !isa<FunctionOpInterface>(op))
    return op->emitError() << "'" << attr.getName().getValue()
                           << "' expected a unit attribute on a function";
  return success();
}

/// The streaming leaf of an orthogonal rotation's product (set by
/// convert-cq4p-to-arm-sme, read by the kernel lowering).
LogicalResult verifySmeRotation(Operation *op, NamedAttribute attr) {
  if (!isa<FlatSymbolRefAttr>(attr.getValue()) ||
      !isa<RotateQuantizeActivationsOp, DecodeEmbeddingOp>(op))
    return op->emitError() << "'" << attr.getName().getValue()
                           << "' expected a symbol on cq4p.rotate_quantize_activations "
                              "or cq4p.decode_embedding";
  return success();
}

/// The lm_head's rotation leaf takes fp16 values (convert-cq4p-to-arm-sme's
/// fmlal-rotation; the kernel lowering rounds the activations for it).
LogicalResult verifySmeRotationF16(Operation *op, NamedAttribute attr) {
  if (!isa<UnitAttr>(attr.getValue()) || !isa<RotateQuantizeActivationsOp>(op) ||
      !op->hasAttr("cq4p.sme_rotation"))
    return op->emitError() << "'" << attr.getName().getValue()
                           << "' expected a unit attribute on a "
                              "cq4p.rotate_quantize_activations with cq4p.sme_rotation";
  return success();
}

/// The embedding's outer-product leaf for prompt rows (set by
/// convert-cq4p-to-arm-sme, read by the kernel lowering), for the chunks
/// of rows the op's strategy records.
LogicalResult verifySmeEmbeddingMopa(Operation *op, NamedAttribute attr) {
  if (!isa<FlatSymbolRefAttr>(attr.getValue()) || !isa<DecodeEmbeddingOp>(op))
    return op->emitError() << "'" << attr.getName().getValue()
                           << "' expected a symbol on cq4p.decode_embedding";
  StrategyAttr strategy = getStrategy(op);
  if (!strategy || strategy.getEmbeddingRows() == 0)
    return op->emitError() << "'" << attr.getName().getValue()
                           << "' expected a cq4p.strategy with embedding_rows";
  return success();
}

} // namespace

LogicalResult CQ4PDialect::verifyOperationAttribute(Operation *op,
                                                    NamedAttribute attr) {
  StringRef name = attr.getName().getValue();
  if (name == "cq4p.model")
    return verifyModel(op, attr);
  if (name == "cq4p.model_plan")
    return verifyModelPlan(op, attr);
  if (name == "cq4p.kernel")
    return verifyKernel(op, attr);
  if (name == "cq4p.kernels")
    return verifyKernels(op, attr);
  if (name == "cq4p.sme_leaf" || name == "cq4p.sme_fixed_lanes")
    return verifySmeLeaf(op, attr);
  if (name == kStrategyAttrName) {
    auto strategy = dyn_cast<StrategyAttr>(attr.getValue());
    if (!strategy || !isa<PanelMatmulOp, DecodeEmbeddingOp>(op))
      return op->emitError() << "'" << name
                             << "' expected a #cq4p.strategy on cq4p.panel_matmul "
                                "or cq4p.decode_embedding";
    if (isa<PanelMatmulOp>(op) && strategy.getEmbeddingRows() != 0)
      return op->emitError() << "'" << name
                             << "' on cq4p.panel_matmul expected no embedding_rows";
    if (isa<DecodeEmbeddingOp>(op) &&
        (strategy.getTileRows() != 0 || strategy.getSuperBlockPartials() ||
         strategy.getPairedTiles()))
      return op->emitError()
             << "'" << name
             << "' on cq4p.decode_embedding expected no tile_rows, "
                "super_block_partials or paired_tiles (a panel_matmul's tilings)";
    return success();
  }
  if (name == "cq4p.sme_rotation")
    return verifySmeRotation(op, attr);
  if (name == "cq4p.sme_rotation_f16")
    return verifySmeRotationF16(op, attr);
  if (name == "cq4p.sme_embedding_mopa")
    return verifySmeEmbeddingMopa(op, attr);
  return op->emitError() << "unknown cq4p attribute '" << name << "'";
}

LogicalResult CQ4PDialect::verifyRegionArgAttribute(Operation *op, unsigned,
                                                    unsigned argIndex,
                                                    NamedAttribute attr) {
  StringRef name = attr.getName().getValue();
  if (name != "cq4p.tensor" && name != "cq4p.transform")
    return op->emitError() << "unknown cq4p argument attribute '" << name
                           << "'";
  if (!isa<StringAttr>(attr.getValue()))
    return op->emitError() << "'" << name << "' of argument " << argIndex
                           << " expected a string, got " << attr.getValue();
  return success();
}

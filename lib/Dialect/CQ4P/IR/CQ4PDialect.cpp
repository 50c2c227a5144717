//===- CQ4PDialect.cpp - the cq4p dialect ---------------------------------===//
//
// The dialect, its attributes (`#cq4p.place` and the enums of the dispatch
// contract), and the verifier of the discardable `cq4p.*` attributes the
// passes hand each other: a malformed one is reported where it is written,
// not when a later pass trips over it.
//
//===----------------------------------------------------------------------===//

#include "cq4p/Dialect/CQ4P/IR/CQ4P.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/DialectImplementation.h"
#include "mlir/Interfaces/FunctionInterfaces.h"
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
  auto dict = dyn_cast<DictionaryAttr>(attr.getValue());
  if (!dict || !isa<ModuleOp>(op))
    return op->emitError() << "'" << attr.getName().getValue()
                           << "' expected a dictionary on a module";
  if (failed(requireFields<IntegerAttr>(
          op, attr.getName(), dict,
          {"prefill_chunk", "workspace_bytes", "kv_position_bytes", "kv_width",
           "state_bytes"},
          "an integer")) ||
      failed(requireFields<KvDtypeAttr>(op, attr.getName(), dict,
                                        {"kv_dtype"}, "a #cq4p.kv_dtype")) ||
      failed(requireFields<ArrayAttr>(op, attr.getName(), dict, {"bindings"},
                                      "an array")))
    return failure();
  for (Attribute binding : dict.getAs<ArrayAttr>("bindings")) {
    auto fields = dyn_cast<DictionaryAttr>(binding);
    if (!fields || !fields.getAs<StringAttr>("tensor") ||
        !fields.getAs<IntegerAttr>("kind"))
      return op->emitError() << "'" << attr.getName().getValue()
                             << "' expected each binding to be a dictionary "
                                "with a tensor name and a kind, got "
                             << binding;
  }
  return success();
}

LogicalResult verifyKernel(Operation *op, NamedAttribute attr) {
  auto dict = dyn_cast<DictionaryAttr>(attr.getValue());
  if (!dict || !isa<FunctionOpInterface>(op))
    return op->emitError() << "'" << attr.getName().getValue()
                           << "' expected a dictionary on a function";
  auto kind = dict.getAs<StringAttr>("op");
  auto params = dict.getAs<ArrayAttr>("params");
  auto types = dict.getAs<ArrayAttr>("param_types");
  if (!kind || !params || !types ||
      !llvm::all_of(params, llvm::IsaPred<StringAttr>) ||
      !llvm::all_of(types, llvm::IsaPred<TypeAttr>))
    return op->emitError() << "'" << attr.getName().getValue()
                           << "' expected a string 'op', 'params' (strings) "
                              "and 'param_types' (types), got "
                           << dict;
  auto dynamicSizes = dict.getAs<ArrayAttr>("dynamic_sizes");
  if (params.size() != types.size() ||
      (dynamicSizes && dynamicSizes.size() != params.size()))
    return op->emitError() << "'" << attr.getName().getValue() << "' has "
                           << params.size() << " params, " << types.size()
                           << " param_types and "
                           << (dynamicSizes ? dynamicSizes.size() : 0)
                           << " dynamic_sizes (expected one of each per "
                              "param, dynamic_sizes optional)";
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
/// convert-cq4p-to-arm-sme, read by the kernel lowering).
LogicalResult verifySmeEmbeddingMopa(Operation *op, NamedAttribute attr) {
  if (!isa<FlatSymbolRefAttr>(attr.getValue()) || !isa<DecodeEmbeddingOp>(op))
    return op->emitError() << "'" << attr.getName().getValue()
                           << "' expected a symbol on cq4p.decode_embedding";
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

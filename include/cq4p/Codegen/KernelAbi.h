//===- KernelAbi.h - kernel_abi.h's structs as LLVM types -------*- C++ -*-===//
//
// The structs a compiled library shares with the runtime (cq4p_weight_view,
// cq4p_step_args, the kernel and variant tables, the model description) are
// stated once, as field lists in runtime/include/cq4p/kernel_abi.h. The C
// structs are declared from those lists, and so are the compiler's view of
// them here: for each struct S, `Fields<S>` holds
//
//   - an enumerator per field, its index (`Fields<cq4p_step_args>::rows`);
//   - the fields' LLVM kinds in order (`kFieldKinds`), from which
//     `structType<S>` builds the identified LLVM struct type
//     (`!llvm.struct<"cq4p_step_args", (ptr, ..., i64, ...)>`);
//   - static_asserts that every field's C offset, and the struct's size, are
//     what the natural layout of those LLVM types gives on the 64-bit
//     targets cq4p compiles for, so a field added, moved or retyped on one
//     side only does not build.
//
//===----------------------------------------------------------------------===//

#ifndef CQ4P_CODEGEN_KERNELABI_H
#define CQ4P_CODEGEN_KERNELABI_H

#include "cq4p/kernel_abi.h"

#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/IR/Builders.h"
#include "llvm/IR/DerivedTypes.h"

#include <cstddef>

namespace mlir::cq4p::abi {

// The layout below is that of the LP64 targets (x86-64, AArch64) whose
// pointers the LLVM `ptr` fields are.
static_assert(sizeof(void *) == 8 && alignof(uint64_t) == 8,
              "the kernel ABI's layout checks assume an LP64 host");

/// A field's type in the LLVM struct: kernel_abi.h's third column.
enum class FieldKind : uint8_t { PTR, I32, I64 };

constexpr size_t sizeOf(FieldKind kind) {
  return kind == FieldKind::I32 ? 4 : 8;
}

/// The offset of field `index` in the natural (unpacked) layout of `kinds`.
template <size_t N>
constexpr size_t fieldOffset(const FieldKind (&kinds)[N], size_t index) {
  size_t offset = 0;
  for (size_t i = 0; i < N; ++i) {
    size_t size = sizeOf(kinds[i]);
    offset = (offset + size - 1) / size * size;
    if (i == index)
      return offset;
    offset += size;
  }
  return offset;
}

/// The size of a struct of `kinds`: past its last field, aligned to its
/// widest one.
template <size_t N> constexpr size_t structSize(const FieldKind (&kinds)[N]) {
  size_t end = fieldOffset(kinds, N - 1) + sizeOf(kinds[N - 1]), align = 4;
  for (FieldKind kind : kinds)
    align = sizeOf(kind) > align ? sizeOf(kind) : align;
  return (end + align - 1) / align * align;
}

template <typename CStruct> struct Fields;

#define CQ4P_ABI_FIELD_INDEX(type, name, kind) name,
#define CQ4P_ABI_FIELD_KIND(type, name, kind) FieldKind::kind,
#define CQ4P_ABI_CHECK_OFFSET(type, name, kind)                                \
  static_assert(offsetof(CStruct, name) == fieldOffset(kFieldKinds, name),     \
                "kernel_abi.h: field '" #name "' is not where the compiler's " \
                "LLVM struct type puts it");
#define CQ4P_ABI_DEFINE_FIELDS(cStruct, fieldList)                             \
  template <> struct Fields<cStruct> {                                         \
    using CStruct = cStruct;                                                   \
    static constexpr const char *kName = #cStruct;                             \
    enum Field : unsigned { fieldList(CQ4P_ABI_FIELD_INDEX) };                 \
    static constexpr FieldKind kFieldKinds[] = {                               \
        fieldList(CQ4P_ABI_FIELD_KIND)};                                       \
    fieldList(CQ4P_ABI_CHECK_OFFSET)                                           \
    static_assert(sizeof(CStruct) == structSize(kFieldKinds),                  \
                  "kernel_abi.h: " #cStruct "'s size is not the size of the "  \
                  "compiler's LLVM struct type");                              \
  };
CQ4P_ABI_STRUCTS(CQ4P_ABI_DEFINE_FIELDS)
#undef CQ4P_ABI_DEFINE_FIELDS
#undef CQ4P_ABI_CHECK_OFFSET
#undef CQ4P_ABI_FIELD_KIND
#undef CQ4P_ABI_FIELD_INDEX

/// The MLIR LLVM-dialect type of a field of `kind`.
inline Type fieldType(MLIRContext *ctx, FieldKind kind) {
  switch (kind) {
  case FieldKind::PTR:
    return LLVM::LLVMPointerType::get(ctx);
  case FieldKind::I32:
    return IntegerType::get(ctx, 32);
  case FieldKind::I64:
    return IntegerType::get(ctx, 64);
  }
  llvm_unreachable("unknown FieldKind");
}

/// The identified LLVM-dialect struct type of kernel_abi.h's `CStruct`
/// (`!llvm.struct<"cq4p_step_args", (...)>`).
template <typename CStruct> LLVM::LLVMStructType structType(MLIRContext *ctx) {
  using F = Fields<CStruct>;
  auto type = LLVM::LLVMStructType::getIdentified(ctx, F::kName);
  if (!type.isInitialized()) {
    SmallVector<Type> body;
    for (FieldKind kind : F::kFieldKinds)
      body.push_back(fieldType(ctx, kind));
    LogicalResult set = type.setBody(body, /*isPacked=*/false);
    assert(succeeded(set) && "kernel ABI struct body set twice");
    (void)set;
  }
  return type;
}

/// The type of field `field` of `CStruct`.
template <typename CStruct>
Type fieldType(MLIRContext *ctx, typename Fields<CStruct>::Field field) {
  return fieldType(ctx, Fields<CStruct>::kFieldKinds[field]);
}

/// An undef `type` with `fields` (one per field, in order) inserted: the
/// initializer of a global of an ABI struct.
inline Value structValue(OpBuilder &b, Location loc, LLVM::LLVMStructType type,
                         ArrayRef<Value> fields) {
  assert(fields.size() == type.getBody().size() && "a value per field");
  Value value = LLVM::UndefOp::create(b, loc, type);
  for (auto [index, field] : llvm::enumerate(fields))
    value = LLVM::InsertValueOp::create(b, loc, value, field,
                                        ArrayRef<int64_t>{int64_t(index)});
  return value;
}

/// The same identified struct in LLVM IR (`%cq4p_kernel_variants`), for
/// what cq4p-compile builds past the MLIR pipeline.
template <typename CStruct>
llvm::StructType *llvmStructType(llvm::LLVMContext &context) {
  using F = Fields<CStruct>;
  if (llvm::StructType *existing =
          llvm::StructType::getTypeByName(context, F::kName))
    return existing;
  SmallVector<llvm::Type *> body;
  for (FieldKind kind : F::kFieldKinds)
    body.push_back(kind == FieldKind::PTR
                       ? static_cast<llvm::Type *>(
                             llvm::PointerType::getUnqual(context))
                       : llvm::IntegerType::get(context,
                                                8 * unsigned(sizeOf(kind))));
  return llvm::StructType::create(context, body, F::kName);
}

} // namespace mlir::cq4p::abi

#endif // CQ4P_CODEGEN_KERNELABI_H

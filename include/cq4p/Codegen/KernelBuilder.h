//===- KernelBuilder.h - kernel functions with the kernel ABI ---*- C++ -*-===//
//
// Kernel functions are func.func ops over buffers whose `cq4p.kernel`
// attribute (`#cq4p.kernel`) records what cq4p-export-kernels needs to give
// them a C ABI: the kind of kernel, the shapes the kernel table lists, and each
// parameter's name and type. Shared by the passes that create kernels
// (cq4p-lower-to-kernels, cq4p-lower-model), which choose what to compute;
// the generators here (KernelBuilder.cpp, ModelKernels.cpp) say how.
//
//===----------------------------------------------------------------------===//

#ifndef CQ4P_CODEGEN_KERNELBUILDER_H
#define CQ4P_CODEGEN_KERNELBUILDER_H

#include "cq4p/Dialect/CQ4P/IR/CQ4P.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"

#include <string>

namespace mlir::cq4p {

struct KernelParam {
  std::string name; ///< "weight.<region>" or the ABI parameter's name
  Type type;
  /// The integer parameter that gives this buffer's dynamic dimension
  /// (empty: the op's row count).
  std::string dynamicSize = {};
};

struct KernelSpec {
  std::string name;
  KernelKind kind; ///< set by every kernel's generator
  /// What the kernel table records (kernel_abi.h): N, K, group size and
  /// rotation of the weight; heads, head dim and kv heads for attention.
  int64_t n = 0, k = 0, groupSize = 0, window = 0;
  bool orthogonal = false;
  int64_t minRows = 1, maxRows = 0; ///< maxRows 0: unbounded
  SmallVector<KernelParam> params;

  void describeWeight(WeightType w) {
    n = w.getN();
    k = w.getK();
    groupSize = w.getGroupSize();
    orthogonal = w.getRotation() == Rotation::orthogonal;
  }
};

class KernelBuilder {
public:
  explicit KernelBuilder(ModuleOp module) : module(module), b(module.getContext()) {}

  MLIRContext *getContext() { return b.getContext(); }

  /// The kernel named in `spec`, created (with `body`) when it is new.
  FlatSymbolRefAttr
  getOrCreate(const KernelSpec &spec,
              function_ref<void(OpBuilder &, Location, ValueRange)> body);

private:
  ModuleOp module;
  OpBuilder b;
};

/// The kernels of a linear over `w`: the activation transform, then the
/// GEMV (when `gemv`) and the GEMM (when `gemm`), in that order.
SmallVector<FlatSymbolRefAttr> createLinearKernels(KernelBuilder &kernels,
                                                   WeightType w, bool gemv,
                                                   bool gemm);

/// The Hadamard activation transform of a linear over `w` whose input is
/// the gating `act(gate) * up` of two rows, formed as each group is loaded
/// (kernel op `quantize_glu`: gate, up, the weight's transform regions,
/// act, act_scales, rows, group_begin, group_end). `w` must be Hadamard.
FlatSymbolRefAttr createGatedQuantizeKernel(KernelBuilder &kernels,
                                            WeightType w, Activation activation);

/// The embedding row decoder of `w`. With `rowsPerId` R > 1, a model
/// kernel (`embedding_rows`, not in the kernel table) that decodes rows
/// id * R .. id * R + R - 1 of each id side by side into an R * K wide row.
FlatSymbolRefAttr createEmbeddingKernel(KernelBuilder &kernels, WeightType w,
                                        int64_t rowsPerId = 1);

/// memref<SB x ng x gs/4 x 128 x i8>: the panel bytes.
MemRefType panelsType(WeightType w);

} // namespace mlir::cq4p

#endif // CQ4P_CODEGEN_KERNELBUILDER_H

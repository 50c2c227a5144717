// The shapes bench/run measures (KERNELS.md), all gs 128: two GEMVs (M = 1,
// so only a GEMV kernel is emitted for them) and a GEMM run with 16 rows.
// The GEMM's M is dynamic: a layer binds only with a kernel for one row, so
// that linear needs its GEMV too (bench/run measures its GEMM).

func.func @gemv_1536_512(%x: tensor<1x1536xf32>, %w: !cq4p.weight<512x1536, gs = 128, hadamard, panels>) -> tensor<1x512xf32> {
  %y = cq4p.linear %x, %w : tensor<1x1536xf32>, !cq4p.weight<512x1536, gs = 128, hadamard, panels> -> tensor<1x512xf32>
  return %y : tensor<1x512xf32>
}

func.func @gemv_6144_1536(%x: tensor<1x6144xf32>, %w: !cq4p.weight<1536x6144, gs = 128, hadamard, panels>) -> tensor<1x1536xf32> {
  %y = cq4p.linear %x, %w : tensor<1x6144xf32>, !cq4p.weight<1536x6144, gs = 128, hadamard, panels> -> tensor<1x1536xf32>
  return %y : tensor<1x1536xf32>
}

func.func @gemm_1024_1024(%x: tensor<?x1024xf32>, %w: !cq4p.weight<1024x1024, gs = 128, hadamard, panels>) -> tensor<?x1024xf32> {
  %y = cq4p.linear %x, %w : tensor<?x1024xf32>, !cq4p.weight<1024x1024, gs = 128, hadamard, panels> -> tensor<?x1024xf32>
  return %y : tensor<?x1024xf32>
}

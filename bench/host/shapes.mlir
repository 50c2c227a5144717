// The shapes bench/host/run times (N x K, gs 128): GEMV from DRAM, GEMV in
// cache, GEMM, the activation transform; the orthogonal lm_head and the
// embedding at K = 4096. M is dynamic, so each linear gets a GEMV and a GEMM.

func.func @linear_4096x4096(%x: tensor<?x4096xf32>, %w: !cq4p.weight<4096x4096, gs = 128, hadamard, panels>) -> tensor<?x4096xf32> {
  %y = cq4p.linear %x, %w : tensor<?x4096xf32>, !cq4p.weight<4096x4096, gs = 128, hadamard, panels> -> tensor<?x4096xf32>
  return %y : tensor<?x4096xf32>
}

func.func @linear_14336x4096(%x: tensor<?x4096xf32>, %w: !cq4p.weight<14336x4096, gs = 128, hadamard, panels>) -> tensor<?x14336xf32> {
  %y = cq4p.linear %x, %w : tensor<?x4096xf32>, !cq4p.weight<14336x4096, gs = 128, hadamard, panels> -> tensor<?x14336xf32>
  return %y : tensor<?x14336xf32>
}

func.func @linear_4096x14336(%x: tensor<?x14336xf32>, %w: !cq4p.weight<4096x14336, gs = 128, hadamard, panels>) -> tensor<?x4096xf32> {
  %y = cq4p.linear %x, %w : tensor<?x14336xf32>, !cq4p.weight<4096x14336, gs = 128, hadamard, panels> -> tensor<?x4096xf32>
  return %y : tensor<?x4096xf32>
}

func.func @linear_1536x512(%x: tensor<?x512xf32>, %w: !cq4p.weight<1536x512, gs = 128, hadamard, panels>) -> tensor<?x1536xf32> {
  %y = cq4p.linear %x, %w : tensor<?x512xf32>, !cq4p.weight<1536x512, gs = 128, hadamard, panels> -> tensor<?x1536xf32>
  return %y : tensor<?x1536xf32>
}

func.func @linear_512x1536(%x: tensor<?x1536xf32>, %w: !cq4p.weight<512x1536, gs = 128, hadamard, panels>) -> tensor<?x512xf32> {
  %y = cq4p.linear %x, %w : tensor<?x1536xf32>, !cq4p.weight<512x1536, gs = 128, hadamard, panels> -> tensor<?x512xf32>
  return %y : tensor<?x512xf32>
}

func.func @linear_1024x1024(%x: tensor<?x1024xf32>, %w: !cq4p.weight<1024x1024, gs = 128, hadamard, panels>) -> tensor<?x1024xf32> {
  %y = cq4p.linear %x, %w : tensor<?x1024xf32>, !cq4p.weight<1024x1024, gs = 128, hadamard, panels> -> tensor<?x1024xf32>
  return %y : tensor<?x1024xf32>
}

func.func @lm_head_1024x4096(%x: tensor<?x4096xf32>, %w: !cq4p.weight<1024x4096, gs = 128, orthogonal, panels>) -> tensor<?x1024xf32> {
  %y = cq4p.linear %x, %w : tensor<?x4096xf32>, !cq4p.weight<1024x4096, gs = 128, orthogonal, panels> -> tensor<?x1024xf32>
  return %y : tensor<?x1024xf32>
}

func.func @embed_1024x4096(%ids: tensor<?xi64>, %w: !cq4p.weight<1024x4096, gs = 128, orthogonal, panels>) -> tensor<?x4096xf32> {
  %y = cq4p.embedding %ids, %w : tensor<?xi64>, !cq4p.weight<1024x4096, gs = 128, orthogonal, panels> -> tensor<?x4096xf32>
  return %y : tensor<?x4096xf32>
}

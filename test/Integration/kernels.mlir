// The kernels the integration tests run (KernelTest.cpp), compiled by
// cq4p-compile for the host and for aarch64-neon: the format's shape grid
// (N with tails, every panel group size, K up to 1536), the orthogonal
// lm_head and the embedding. M is dynamic, so each linear gets a GEMV and
// a GEMM.

func.func @linear_64x256_gs32(%x: tensor<?x256xf32>, %w: !cq4p.weight<64x256, gs = 32, hadamard, panels>) -> tensor<?x64xf32> {
  %y = cq4p.linear %x, %w : tensor<?x256xf32>, !cq4p.weight<64x256, gs = 32, hadamard, panels> -> tensor<?x64xf32>
  return %y : tensor<?x64xf32>
}

func.func @linear_64x256_gs64(%x: tensor<?x256xf32>, %w: !cq4p.weight<64x256, gs = 64, hadamard, panels>) -> tensor<?x64xf32> {
  %y = cq4p.linear %x, %w : tensor<?x256xf32>, !cq4p.weight<64x256, gs = 64, hadamard, panels> -> tensor<?x64xf32>
  return %y : tensor<?x64xf32>
}

func.func @linear_64x256_gs128(%x: tensor<?x256xf32>, %w: !cq4p.weight<64x256, gs = 128, hadamard, panels>) -> tensor<?x64xf32> {
  %y = cq4p.linear %x, %w : tensor<?x256xf32>, !cq4p.weight<64x256, gs = 128, hadamard, panels> -> tensor<?x64xf32>
  return %y : tensor<?x64xf32>
}

func.func @linear_64x256_gs256(%x: tensor<?x256xf32>, %w: !cq4p.weight<64x256, gs = 256, hadamard, panels>) -> tensor<?x64xf32> {
  %y = cq4p.linear %x, %w : tensor<?x256xf32>, !cq4p.weight<64x256, gs = 256, hadamard, panels> -> tensor<?x64xf32>
  return %y : tensor<?x64xf32>
}

func.func @linear_72x256_gs32(%x: tensor<?x256xf32>, %w: !cq4p.weight<72x256, gs = 32, hadamard, panels>) -> tensor<?x72xf32> {
  %y = cq4p.linear %x, %w : tensor<?x256xf32>, !cq4p.weight<72x256, gs = 32, hadamard, panels> -> tensor<?x72xf32>
  return %y : tensor<?x72xf32>
}

func.func @linear_72x256_gs64(%x: tensor<?x256xf32>, %w: !cq4p.weight<72x256, gs = 64, hadamard, panels>) -> tensor<?x72xf32> {
  %y = cq4p.linear %x, %w : tensor<?x256xf32>, !cq4p.weight<72x256, gs = 64, hadamard, panels> -> tensor<?x72xf32>
  return %y : tensor<?x72xf32>
}

func.func @linear_72x256_gs128(%x: tensor<?x256xf32>, %w: !cq4p.weight<72x256, gs = 128, hadamard, panels>) -> tensor<?x72xf32> {
  %y = cq4p.linear %x, %w : tensor<?x256xf32>, !cq4p.weight<72x256, gs = 128, hadamard, panels> -> tensor<?x72xf32>
  return %y : tensor<?x72xf32>
}

func.func @linear_72x256_gs256(%x: tensor<?x256xf32>, %w: !cq4p.weight<72x256, gs = 256, hadamard, panels>) -> tensor<?x72xf32> {
  %y = cq4p.linear %x, %w : tensor<?x256xf32>, !cq4p.weight<72x256, gs = 256, hadamard, panels> -> tensor<?x72xf32>
  return %y : tensor<?x72xf32>
}

func.func @linear_100x256_gs32(%x: tensor<?x256xf32>, %w: !cq4p.weight<100x256, gs = 32, hadamard, panels>) -> tensor<?x100xf32> {
  %y = cq4p.linear %x, %w : tensor<?x256xf32>, !cq4p.weight<100x256, gs = 32, hadamard, panels> -> tensor<?x100xf32>
  return %y : tensor<?x100xf32>
}

func.func @linear_100x256_gs64(%x: tensor<?x256xf32>, %w: !cq4p.weight<100x256, gs = 64, hadamard, panels>) -> tensor<?x100xf32> {
  %y = cq4p.linear %x, %w : tensor<?x256xf32>, !cq4p.weight<100x256, gs = 64, hadamard, panels> -> tensor<?x100xf32>
  return %y : tensor<?x100xf32>
}

func.func @linear_100x256_gs128(%x: tensor<?x256xf32>, %w: !cq4p.weight<100x256, gs = 128, hadamard, panels>) -> tensor<?x100xf32> {
  %y = cq4p.linear %x, %w : tensor<?x256xf32>, !cq4p.weight<100x256, gs = 128, hadamard, panels> -> tensor<?x100xf32>
  return %y : tensor<?x100xf32>
}

func.func @linear_100x256_gs256(%x: tensor<?x256xf32>, %w: !cq4p.weight<100x256, gs = 256, hadamard, panels>) -> tensor<?x100xf32> {
  %y = cq4p.linear %x, %w : tensor<?x256xf32>, !cq4p.weight<100x256, gs = 256, hadamard, panels> -> tensor<?x100xf32>
  return %y : tensor<?x100xf32>
}

func.func @linear_192x256_gs32(%x: tensor<?x256xf32>, %w: !cq4p.weight<192x256, gs = 32, hadamard, panels>) -> tensor<?x192xf32> {
  %y = cq4p.linear %x, %w : tensor<?x256xf32>, !cq4p.weight<192x256, gs = 32, hadamard, panels> -> tensor<?x192xf32>
  return %y : tensor<?x192xf32>
}

func.func @linear_192x256_gs64(%x: tensor<?x256xf32>, %w: !cq4p.weight<192x256, gs = 64, hadamard, panels>) -> tensor<?x192xf32> {
  %y = cq4p.linear %x, %w : tensor<?x256xf32>, !cq4p.weight<192x256, gs = 64, hadamard, panels> -> tensor<?x192xf32>
  return %y : tensor<?x192xf32>
}

func.func @linear_192x256_gs128(%x: tensor<?x256xf32>, %w: !cq4p.weight<192x256, gs = 128, hadamard, panels>) -> tensor<?x192xf32> {
  %y = cq4p.linear %x, %w : tensor<?x256xf32>, !cq4p.weight<192x256, gs = 128, hadamard, panels> -> tensor<?x192xf32>
  return %y : tensor<?x192xf32>
}

func.func @linear_192x256_gs256(%x: tensor<?x256xf32>, %w: !cq4p.weight<192x256, gs = 256, hadamard, panels>) -> tensor<?x192xf32> {
  %y = cq4p.linear %x, %w : tensor<?x256xf32>, !cq4p.weight<192x256, gs = 256, hadamard, panels> -> tensor<?x192xf32>
  return %y : tensor<?x192xf32>
}

func.func @linear_64x1536_gs128(%x: tensor<?x1536xf32>, %w: !cq4p.weight<64x1536, gs = 128, hadamard, panels>) -> tensor<?x64xf32> {
  %y = cq4p.linear %x, %w : tensor<?x1536xf32>, !cq4p.weight<64x1536, gs = 128, hadamard, panels> -> tensor<?x64xf32>
  return %y : tensor<?x64xf32>
}

func.func @linear_100x1536_gs128(%x: tensor<?x1536xf32>, %w: !cq4p.weight<100x1536, gs = 128, hadamard, panels>) -> tensor<?x100xf32> {
  %y = cq4p.linear %x, %w : tensor<?x1536xf32>, !cq4p.weight<100x1536, gs = 128, hadamard, panels> -> tensor<?x100xf32>
  return %y : tensor<?x100xf32>
}

func.func @lm_head_1024x1536(%x: tensor<?x1536xf32>, %w: !cq4p.weight<1024x1536, gs = 128, orthogonal, panels>) -> tensor<?x1024xf32> {
  %y = cq4p.linear %x, %w : tensor<?x1536xf32>, !cq4p.weight<1024x1536, gs = 128, orthogonal, panels> -> tensor<?x1024xf32>
  return %y : tensor<?x1024xf32>
}

func.func @embed(%ids: tensor<?xi64>, %w: !cq4p.weight<1024x1536, gs = 128, orthogonal, panels>) -> tensor<?x1536xf32> {
  %rows = cq4p.embedding %ids, %w : tensor<?xi64>, !cq4p.weight<1024x1536, gs = 128, orthogonal, panels> -> tensor<?x1536xf32>
  return %rows : tensor<?x1536xf32>
}

// The rotations at small K (one and two 128-wide groups; N with a tail)
// for the row counts of one chunk's row groups.
func.func @lm_head_192x128(%x: tensor<?x128xf32>, %w: !cq4p.weight<192x128, gs = 128, orthogonal, panels>) -> tensor<?x192xf32> {
  %y = cq4p.linear %x, %w : tensor<?x128xf32>, !cq4p.weight<192x128, gs = 128, orthogonal, panels> -> tensor<?x192xf32>
  return %y : tensor<?x192xf32>
}

func.func @embed_192x128(%ids: tensor<?xi64>, %w: !cq4p.weight<192x128, gs = 128, orthogonal, panels>) -> tensor<?x128xf32> {
  %rows = cq4p.embedding %ids, %w : tensor<?xi64>, !cq4p.weight<192x128, gs = 128, orthogonal, panels> -> tensor<?x128xf32>
  return %rows : tensor<?x128xf32>
}

func.func @lm_head_200x256(%x: tensor<?x256xf32>, %w: !cq4p.weight<200x256, gs = 128, orthogonal, panels>) -> tensor<?x200xf32> {
  %y = cq4p.linear %x, %w : tensor<?x256xf32>, !cq4p.weight<200x256, gs = 128, orthogonal, panels> -> tensor<?x200xf32>
  return %y : tensor<?x200xf32>
}

func.func @embed_200x256(%ids: tensor<?xi64>, %w: !cq4p.weight<200x256, gs = 128, orthogonal, panels>) -> tensor<?x256xf32> {
  %rows = cq4p.embedding %ids, %w : tensor<?xi64>, !cq4p.weight<200x256, gs = 128, orthogonal, panels> -> tensor<?x256xf32>
  return %rows : tensor<?x256xf32>
}

// Prefill attention, 8 query / 4 kv heads: head dims 64 and 256, causal, and
// sliding windows of 32 tokens and of 20 (a window's start inside a 16-key
// tile, so that the keys some row's window has left span a partial tile).
func.func @attention_d64(%q: tensor<?x512xf32>, %k: tensor<?x256xf32>, %v: tensor<?x256xf32>) -> tensor<?x512xf32> {
  %o = cq4p.prefill_attention %q, %k, %v {num_heads = 8 : i64, num_kv_heads = 4 : i64, head_dim = 64 : i64, window = 0 : i64, scale = 0.125 : f32} : tensor<?x512xf32>, tensor<?x256xf32>, tensor<?x256xf32> -> tensor<?x512xf32>
  return %o : tensor<?x512xf32>
}

func.func @attention_d256(%q: tensor<?x2048xf32>, %k: tensor<?x1024xf32>, %v: tensor<?x1024xf32>) -> tensor<?x2048xf32> {
  %o = cq4p.prefill_attention %q, %k, %v {num_heads = 8 : i64, num_kv_heads = 4 : i64, head_dim = 256 : i64, window = 0 : i64, scale = 0.0625 : f32} : tensor<?x2048xf32>, tensor<?x1024xf32>, tensor<?x1024xf32> -> tensor<?x2048xf32>
  return %o : tensor<?x2048xf32>
}

func.func @attention_d64_window(%q: tensor<?x512xf32>, %k: tensor<?x256xf32>, %v: tensor<?x256xf32>) -> tensor<?x512xf32> {
  %o = cq4p.prefill_attention %q, %k, %v {num_heads = 8 : i64, num_kv_heads = 4 : i64, head_dim = 64 : i64, window = 32 : i64, scale = 0.125 : f32} : tensor<?x512xf32>, tensor<?x256xf32>, tensor<?x256xf32> -> tensor<?x512xf32>
  return %o : tensor<?x512xf32>
}

func.func @attention_d64_window20(%q: tensor<?x512xf32>, %k: tensor<?x256xf32>, %v: tensor<?x256xf32>) -> tensor<?x512xf32> {
  %o = cq4p.prefill_attention %q, %k, %v {num_heads = 8 : i64, num_kv_heads = 4 : i64, head_dim = 64 : i64, window = 20 : i64, scale = 0.125 : f32} : tensor<?x512xf32>, tensor<?x256xf32>, tensor<?x256xf32> -> tensor<?x512xf32>
  return %o : tensor<?x512xf32>
}

// Groups that do not fill a vector of query units: 3 heads a KV head (rows
// of 3 units, lanes to spare), and 24 (more than a vector's lanes: the group
// in pieces) with a window.
func.func @attention_group3(%q: tensor<?x768xf32>, %k: tensor<?x256xf32>, %v: tensor<?x256xf32>) -> tensor<?x768xf32> {
  %o = cq4p.prefill_attention %q, %k, %v {num_heads = 12 : i64, num_kv_heads = 4 : i64, head_dim = 64 : i64, window = 0 : i64, scale = 0.125 : f32} : tensor<?x768xf32>, tensor<?x256xf32>, tensor<?x256xf32> -> tensor<?x768xf32>
  return %o : tensor<?x768xf32>
}

func.func @attention_group24(%q: tensor<?x768xf32>, %k: tensor<?x32xf32>, %v: tensor<?x32xf32>) -> tensor<?x768xf32> {
  %o = cq4p.prefill_attention %q, %k, %v {num_heads = 24 : i64, num_kv_heads = 1 : i64, head_dim = 32 : i64, window = 24 : i64, scale = 0.17677669 : f32} : tensor<?x768xf32>, tensor<?x32xf32>, tensor<?x32xf32> -> tensor<?x768xf32>
  return %o : tensor<?x768xf32>
}

// Gemma 4's shapes: one KV head for 8 query heads, head dims 256 with a
// window of 16 (one tile) and 512.
func.func @attention_group8_d256(%q: tensor<?x2048xf32>, %k: tensor<?x256xf32>, %v: tensor<?x256xf32>) -> tensor<?x2048xf32> {
  %o = cq4p.prefill_attention %q, %k, %v {num_heads = 8 : i64, num_kv_heads = 1 : i64, head_dim = 256 : i64, window = 16 : i64, scale = 1.0 : f32} : tensor<?x2048xf32>, tensor<?x256xf32>, tensor<?x256xf32> -> tensor<?x2048xf32>
  return %o : tensor<?x2048xf32>
}

func.func @attention_group8_d512(%q: tensor<?x4096xf32>, %k: tensor<?x512xf32>, %v: tensor<?x512xf32>) -> tensor<?x4096xf32> {
  %o = cq4p.prefill_attention %q, %k, %v {num_heads = 8 : i64, num_kv_heads = 1 : i64, head_dim = 512 : i64, window = 0 : i64, scale = 1.0 : f32} : tensor<?x4096xf32>, tensor<?x512xf32>, tensor<?x512xf32> -> tensor<?x4096xf32>
  return %o : tensor<?x4096xf32>
}

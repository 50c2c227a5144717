// RUN: cq4p-opt %s -split-input-file -verify-diagnostics

// The discardable cq4p.* attributes the passes exchange, verified where they
// are written.

// expected-error @+1 {{'cq4p.model' expected a dictionary on a module}}
module attributes {cq4p.model = "llama"} {
}

// -----

// expected-error @+1 {{'cq4p.model' expected an integer 'layers', got {hidden = 128 : i64, vocab = 256 : i64}}}
module attributes {cq4p.model = {vocab = 256 : i64, hidden = 128 : i64}} {
}

// -----

// expected-error @+1 {{'cq4p.model_plan' expected a #cq4p.model_plan on a module}}
module attributes {cq4p.model_plan = {prefill_chunk = 8 : i64}} {
}

// -----

// expected-error @+1 {{expected 'kv_dtype'}}
module attributes {cq4p.model_plan = #cq4p.model_plan<prefill_chunk = 8, workspace_bytes = 64, kv_position_bytes = 512, kv_width = 64, state_bytes = 0, bindings = []>} {
}

// -----

// expected-error @+1 {{expected a KV cache element type (f32 or f16), got 'bf16'}}
module attributes {cq4p.model_plan = #cq4p.model_plan<prefill_chunk = 8, kv_dtype = bf16, workspace_bytes = 64, kv_position_bytes = 512, kv_width = 64, state_bytes = 0, bindings = []>} {
}

// -----

// expected-error @+1 {{expected prefill_chunk (1) to be at least 2}}
module attributes {cq4p.model_plan = #cq4p.model_plan<prefill_chunk = 1, kv_dtype = f32, workspace_bytes = 64, kv_position_bytes = 512, kv_width = 64, state_bytes = 0, bindings = []>} {
}

// -----

// expected-error @+1 {{expected workspace_bytes (64), kv_position_bytes (512), kv_width (64) and state_bytes (-4) to be non-negative}}
module attributes {cq4p.model_plan = #cq4p.model_plan<prefill_chunk = 8, kv_dtype = f32, workspace_bytes = 64, kv_position_bytes = 512, kv_width = 64, state_bytes = -4, bindings = []>} {
}

// -----

// expected-error @+1 {{expected a binding kind (cq4, fp16 or fp32), got 'bf16'}}
module attributes {cq4p.model_plan = #cq4p.model_plan<prefill_chunk = 8, kv_dtype = f32, workspace_bytes = 64, kv_position_bytes = 512, kv_width = 64, state_bytes = 0, bindings = ["ln": bf16<128>]>} {
}

// -----

// expected-error @+1 {{expected binding 'w''s K (100) to be a positive multiple of its group size (64)}}
module attributes {cq4p.model_plan = #cq4p.model_plan<prefill_chunk = 8, kv_dtype = f32, workspace_bytes = 64, kv_position_bytes = 512, kv_width = 64, state_bytes = 0, bindings = ["w": cq4<64x100, gs = 64>]>} {
}

// -----

// expected-error @+1 {{expected binding 'ln''s size (0) to be positive}}
module attributes {cq4p.model_plan = #cq4p.model_plan<prefill_chunk = 8, kv_dtype = f32, workspace_bytes = 64, kv_position_bytes = 512, kv_width = 64, state_bytes = 0, bindings = ["ln": fp16<0>]>} {
}

// -----

// expected-error @+1 {{binding 'ln' appears twice}}
module attributes {cq4p.model_plan = #cq4p.model_plan<prefill_chunk = 8, kv_dtype = f32, workspace_bytes = 64, kv_position_bytes = 512, kv_width = 64, state_bytes = 0, bindings = ["ln": fp16<128>, "ln": fp32<128>]>} {
}

// -----

// expected-error @+1 {{'cq4p.model_plan' expected a #cq4p.model_plan on a module}}
func.func @plan() attributes {cq4p.model_plan = #cq4p.model_plan<prefill_chunk = 8, kv_dtype = f32, workspace_bytes = 64, kv_position_bytes = 512, kv_width = 64, state_bytes = 0, bindings = []>} {
  return
}

// -----

// expected-error @+1 {{'cq4p.kernel' expected a #cq4p.kernel on a function}}
func.func @kernel() attributes {cq4p.kernel = {op = "add"}} {
  return
}

// -----

// expected-error @+1 {{'cq4p.kernel' expected a #cq4p.kernel on a function}}
module attributes {cq4p.kernel = #cq4p.kernel<add, params = []>} {
}

// -----

// expected-error @+1 {{unknown kernel kind 'sub'}}
func.func @kernel() attributes {cq4p.kernel = #cq4p.kernel<sub, params = []>} {
  return
}

// -----

// expected-error @+1 {{unknown kernel field 'rows' (expected n, k, group_size, window, orthogonal, min_rows, max_rows or params)}}
func.func @kernel() attributes {cq4p.kernel = #cq4p.kernel<add, rows = 4, params = []>} {
  return
}

// -----

// expected-error @+1 {{expected the kernel's n (-4), k (0), group_size (0) and window (0) to be non-negative}}
func.func @kernel() attributes {cq4p.kernel = #cq4p.kernel<add, n = -4, params = []>} {
  return
}

// -----

// expected-error @+1 {{expected min_rows (0) to be at least 1}}
func.func @kernel() attributes {cq4p.kernel = #cq4p.kernel<matmul, min_rows = 0, params = []>} {
  return
}

// -----

// expected-error @+1 {{expected max_rows (1) to be 0 (unbounded) or at least min_rows (2)}}
func.func @kernel() attributes {cq4p.kernel = #cq4p.kernel<matmul, min_rows = 2, max_rows = 1, params = []>} {
  return
}

// -----

// expected-error @+1 {{kernel parameter 'a' appears twice}}
func.func @kernel() attributes {cq4p.kernel = #cq4p.kernel<add, params = ["a": memref<?x4xf32>, "a": memref<?x4xf32>, "rows": index]>} {
  return
}

// -----

// expected-error @+1 {{expected kernel parameter 'scale' to be a memref, an index or an integer, got 'f32'}}
func.func @kernel() attributes {cq4p.kernel = #cq4p.kernel<scale, params = ["x": memref<?x4xf32>, "scale": f32]>} {
  return
}

// -----

// expected-error @+1 {{kernel parameter 'keys' is sized_by 'context', expected a buffer sized by an integer parameter of the kernel}}
func.func @kernel() attributes {cq4p.kernel = #cq4p.kernel<cached_attention, params = ["keys": memref<?x64xf32> sized_by "context", "rows": index]>} {
  return
}

// -----

func.func @graph(%x: tensor<?x4xf32>) -> tensor<?x4xf32> {
  // expected-error @+1 {{'cq4p.kernels' expected an array of kernel symbols, got ["k"]}}
  %y = math.exp %x {cq4p.kernels = ["k"]} : tensor<?x4xf32>
  return %y : tensor<?x4xf32>
}

// -----

// expected-error @+1 {{'cq4p.sme_leaf' expected a unit attribute on a function}}
func.func @leaf() attributes {cq4p.sme_leaf = 1 : i64} {
  return
}

// -----

// expected-error @+1 {{'cq4p.sme_rotation' expected a symbol on cq4p.rotate_quantize_activations or cq4p.decode_embedding}}
func.func @rotation() attributes {cq4p.sme_rotation = @leaf} {
  return
}

// -----

// expected-error @+1 {{'cq4p.sme_embedding_mopa' expected a symbol on cq4p.decode_embedding}}
func.func @embedding() attributes {cq4p.sme_embedding_mopa = @leaf} {
  return
}

// -----

// expected-error @+1 {{unknown cq4p attribute 'cq4p.kernal'}}
func.func @typo() attributes {cq4p.kernal = {}} {
  return
}

// -----

// expected-error @+1 {{unknown cq4p argument attribute 'cq4p.tensr'}}
func.func @forward(%w: tensor<4xf16> {cq4p.tensr = "w"}) {
  return
}

// -----

// expected-error @+1 {{'cq4p.tensor' of argument 0 expected a string, got 3 : i64}}
func.func @forward(%w: tensor<4xf16> {cq4p.tensor = 3 : i64}) {
  return
}

// -----

// A CQ4 binding's shape is a weight's: NxK (the same parser).
// expected-error @+1 {{expected a weight shape NxK with 2 dimensions, got 3}}
module attributes {cq4p.model_plan = #cq4p.model_plan<prefill_chunk = 8, kv_dtype = f32, workspace_bytes = 64, kv_position_bytes = 512, kv_width = 64, state_bytes = 0, bindings = ["w": cq4<64x128x2, gs = 64>]>} {
}

// -----

// expected-error @+1 {{expected min_tile_rows (17) to be in [1, tile_rows (16)]}}
func.func @strategy_min_rows() attributes {s = #cq4p.strategy<tile_rows = 16, min_tile_rows = 17>} {
  return
}

// -----

// expected-error @+1 {{expected embedding_min_rows (32) to be 0 when embedding_rows is 0}}
func.func @strategy_min_without_rows() attributes {s = #cq4p.strategy<embedding_min_rows = 32>} {
  return
}

// -----

// expected-error @+1 {{expected tile_rows (-16) to be at least 0}}
func.func @strategy_negative() attributes {s = #cq4p.strategy<tile_rows = -16, min_tile_rows = 7>} {
  return
}

// -----

// expected-error @+1 {{'cq4p.strategy' expected a #cq4p.strategy on cq4p.panel_matmul or cq4p.decode_embedding}}
func.func @strategy_on_function() attributes {cq4p.strategy = #cq4p.strategy<tile_rows = 16, min_tile_rows = 7>} {
  return
}

// -----

func.func @strategy_embedding_on_matmul(%panels: memref<1x4x8x128xi8>, %norm_panels: memref<1x4x64xf32>,
                                        %cb: memref<16xi8>, %act: memref<?x128xi8>, %scales: memref<?x4xf32>,
                                        %y: memref<?x64xf32>, %sb0: index, %sb1: index) {
  // expected-error @+1 {{'cq4p.strategy' on cq4p.panel_matmul expected no embedding_rows}}
  cq4p.panel_matmul %panels, %norm_panels, %cb, %act, %scales, %y, %sb0, %sb1
      {cq4p.strategy = #cq4p.strategy<embedding_rows = 64, embedding_min_rows = 32>}
      : memref<1x4x8x128xi8>, memref<1x4x64xf32>, memref<16xi8>, memref<?x128xi8>,
        memref<?x4xf32>, memref<?x64xf32>
  return
}

// -----

// expected-error @+1 {{expected one GEMM tiling: paired_tiles or tile_rows (16), not both}}
func.func @strategy_two_tilings() attributes {s = #cq4p.strategy<tile_rows = 16, min_tile_rows = 7, paired_tiles = true>} {
  return
}

// -----

func.func @strategy_tiling_on_embedding(%panels: memref<2x1x32x128xi8>, %norms: memref<100x1xf16>,
                                        %cb: memref<16xf16>, %rotation_t: memref<128x128xf16>,
                                        %isr: memref<128xf16>, %ids: memref<?xi64>,
                                        %out: memref<?x128xf32>) {
  // expected-error @+1 {{'cq4p.strategy' on cq4p.decode_embedding expected no tile_rows, super_block_partials or paired_tiles (a panel_matmul's tilings)}}
  cq4p.decode_embedding %panels, %norms, %cb, %rotation_t, %isr, %ids, %out
      {cq4p.strategy = #cq4p.strategy<embedding_rows = 64, embedding_min_rows = 32, super_block_partials = true>}
      : memref<2x1x32x128xi8>, memref<100x1xf16>, memref<16xf16>, memref<128x128xf16>,
        memref<128xf16>, memref<?xi64>, memref<?x128xf32>
  return
}

// -----

func.func @embedding_leaf_without_strategy(%panels: memref<2x1x32x128xi8>, %norms: memref<100x1xf16>,
                                           %cb: memref<16xf16>, %rotation_t: memref<128x128xf16>,
                                           %isr: memref<128xf16>, %ids: memref<?xi64>,
                                           %out: memref<?x128xf32>) {
  // expected-error @+1 {{'cq4p.sme_embedding_mopa' expected a cq4p.strategy with embedding_rows}}
  cq4p.decode_embedding %panels, %norms, %cb, %rotation_t, %isr, %ids, %out
      {cq4p.sme_embedding_mopa = @leaf}
      : memref<2x1x32x128xi8>, memref<100x1xf16>, memref<16xf16>, memref<128x128xf16>,
        memref<128xf16>, memref<?xi64>, memref<?x128xf32>
  return
}

// RUN: cq4p-opt %s -split-input-file | FileCheck %s
// Round trip: what cq4p-opt prints, it parses back to the same IR.
// RUN: cq4p-opt %s -split-input-file | cq4p-opt -split-input-file | FileCheck %s

// A kernel of the kernel table: fields at their default are left out, the
// rest printed in a fixed order.
// CHECK-LABEL: func.func @cq4p_gemv_64x128_gs128
// CHECK-SAME: attributes {cq4p.kernel = #cq4p.kernel<matmul, n = 64, k = 128, group_size = 128, max_rows = 1, params = ["weight.panels": memref<1x1x32x128xi8>, "act": memref<1x128xi8>, "y": memref<1x64xf32>, "sb_begin": index, "sb_end": index]>}
func.func @cq4p_gemv_64x128_gs128(%p: memref<1x1x32x128xi8>, %a: memref<1x128xi8>,
                                  %y: memref<1x64xf32>, %b: index, %e: index)
    attributes {cq4p.kernel = #cq4p.kernel<matmul, max_rows = 1, min_rows = 1, group_size = 128,
                                           k = 128, n = 64, window = 0,
                                           params = ["weight.panels": memref<1x1x32x128xi8>,
                                                     "act": memref<1x128xi8>, "y": memref<1x64xf32>,
                                                     "sb_begin": index, "sb_end": index]>} {
  return
}

// -----

// A model kernel whose cache buffers are sized by the context, not the rows.
// CHECK-LABEL: func.func @cq4p_cached_attention
// CHECK-SAME: cq4p.kernel = #cq4p.kernel<cached_attention, n = 2, k = 64, window = 4, orthogonal, params = ["q": memref<?x128xf32>, "keys": memref<?x64xf16> sized_by "context", "rows": index, "context": index]>
func.func @cq4p_cached_attention(%q: memref<?x128xf32>, %keys: memref<?x64xf16>,
                                 %rows: index, %context: index)
    attributes {cq4p.kernel = #cq4p.kernel<cached_attention, n = 2, k = 64, orthogonal, window = 4,
                                           params = ["q": memref<?x128xf32>,
                                                     "keys": memref<?x64xf16> sized_by "context",
                                                     "rows": index, "context": index]>} {
  return
}

// -----

// CHECK: module attributes {cq4p.model_plan = #cq4p.model_plan<prefill_chunk = 128, kv_dtype = f16, workspace_bytes = 4096, kv_position_bytes = 512, kv_width = 64, state_bytes = 1024, bindings = ["model.embed_tokens.weight": cq4<256x128, gs = 128, orthogonal>, "l0.ln": fp16<128>, "l0.q": cq4<128x128, gs = 128>, "l0.scalar": fp32<1>]>}
module attributes {cq4p.model_plan = #cq4p.model_plan<prefill_chunk = 128, kv_dtype = f16,
    workspace_bytes = 4096, kv_position_bytes = 512, kv_width = 64, state_bytes = 1024,
    bindings = ["model.embed_tokens.weight": cq4<256x128, gs = 128, orthogonal>,
                "l0.ln": fp16<128>, "l0.q": cq4<128x128, gs = 128>, "l0.scalar": fp32<1>]>} {
}

// -----

// A model without bound tensors.
// CHECK: cq4p.model_plan = #cq4p.model_plan<prefill_chunk = 8, kv_dtype = f32, workspace_bytes = 0, kv_position_bytes = 0, kv_width = 0, state_bytes = 0, bindings = []>
module attributes {cq4p.model_plan = #cq4p.model_plan<prefill_chunk = 8, kv_dtype = f32,
    workspace_bytes = 0, kv_position_bytes = 0, kv_width = 0, state_bytes = 0, bindings = []>} {
}

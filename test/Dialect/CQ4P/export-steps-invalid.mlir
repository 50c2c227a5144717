// RUN: cq4p-opt %s -split-input-file -cq4p-export-steps -verify-diagnostics

// expected-error @+1 {{cq4p.step ops need the cq4p.model and cq4p.model_plan attributes (run cq4p-lower-model)}}
module {
  cq4p.step @decode attributes {max_rows = 1 : i64} {
  }
}

// -----

module attributes {cq4p.model = {vocab = 256 : i64, hidden = 128 : i64, layers = 1 : i64},
                   cq4p.model_plan = #cq4p.model_plan<prefill_chunk = 8, kv_dtype = f32, workspace_bytes = 64,
                                      kv_position_bytes = 512, kv_width = 64, state_bytes = 0, bindings = []>} {
  cq4p.step @decode attributes {max_rows = 1 : i64} {
    // expected-error @+1 {{'cq4p.dispatch' op no C-ABI entry @missing (run cq4p-export-kernels first)}}
    cq4p.dispatch @missing <rows> work [1, 0] pointers [] scalars []
  }
}

// -----

module attributes {cq4p.model = {vocab = 256 : i64, hidden = 128 : i64, layers = 1 : i64},
                   cq4p.model_plan = #cq4p.model_plan<prefill_chunk = 8, kv_dtype = f32, workspace_bytes = 64,
                                      kv_position_bytes = 512, kv_width = 64, state_bytes = 0, bindings = []>} {
  llvm.func @add(!llvm.ptr, !llvm.ptr, i64)
  cq4p.step @decode attributes {max_rows = 1 : i64} {
    // expected-error @+1 {{'cq4p.dispatch' op @add takes 3 parameters, the dispatch gives 2}}
    cq4p.dispatch @add <rows> work [1, 0] pointers [#cq4p.place<workspace>] scalars [rows]
  }
}

// -----

// expected-error @+1 {{a model needs the steps @decode and @prefill}}
module attributes {cq4p.model = {vocab = 256 : i64, hidden = 128 : i64, layers = 1 : i64},
                   cq4p.model_plan = #cq4p.model_plan<prefill_chunk = 8, kv_dtype = f32, workspace_bytes = 64,
                                      kv_position_bytes = 512, kv_width = 64, state_bytes = 0, bindings = []>} {
  cq4p.step @decode attributes {max_rows = 1 : i64} {
  }
}

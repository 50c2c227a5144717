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

// expected-error @+1 {{'cq4p.model_plan' expected a dictionary on a module}}
module attributes {cq4p.model_plan = [1]} {
}

// -----

// expected-error @+1 {{'cq4p.model_plan' expected an integer 'state_bytes'}}
module attributes {cq4p.model_plan = {bindings = [], prefill_chunk = 8 : i64, kv_dtype = #cq4p.kv_dtype<f32>, workspace_bytes = 64 : i64, kv_position_bytes = 512 : i64, kv_width = 64 : i64}} {
}

// -----

// expected-error @+1 {{'cq4p.model_plan' expected a #cq4p.kv_dtype 'kv_dtype'}}
module attributes {cq4p.model_plan = {bindings = [], prefill_chunk = 8 : i64, kv_dtype = 1 : i64, workspace_bytes = 64 : i64, kv_position_bytes = 512 : i64, kv_width = 64 : i64, state_bytes = 0 : i64}} {
}

// -----

// expected-error @+1 {{'cq4p.model_plan' expected an array 'bindings'}}
module attributes {cq4p.model_plan = {prefill_chunk = 8 : i64, kv_dtype = #cq4p.kv_dtype<f16>, workspace_bytes = 64 : i64, kv_position_bytes = 512 : i64, kv_width = 64 : i64, state_bytes = 0 : i64}} {
}

// -----

// expected-error @+1 {{'cq4p.model_plan' expected each binding to be a dictionary with a tensor name and a kind, got {tensor = "w"}}}
module attributes {cq4p.model_plan = {bindings = [{tensor = "w"}], prefill_chunk = 8 : i64, kv_dtype = #cq4p.kv_dtype<f16>, workspace_bytes = 64 : i64, kv_position_bytes = 512 : i64, kv_width = 64 : i64, state_bytes = 0 : i64}} {
}

// -----

// expected-error @+1 {{'cq4p.kernel' expected a dictionary on a function}}
func.func @kernel() attributes {cq4p.kernel = "add"} {
  return
}

// -----

// expected-error @+1 {{'cq4p.kernel' expected a string 'op', 'params' (strings) and 'param_types' (types), got {op = "add", params = ["a"]}}}
func.func @kernel() attributes {cq4p.kernel = {op = "add", params = ["a"]}} {
  return
}

// -----

// expected-error @+1 {{'cq4p.kernel' has 2 params, 1 param_types and 0 dynamic_sizes (expected one of each per param, dynamic_sizes optional)}}
func.func @kernel() attributes {cq4p.kernel = {op = "add", params = ["a", "rows"], param_types = [index]}} {
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

// RUN: cq4p-opt %s -split-input-file -cq4p-lower-model -verify-diagnostics
// RUN: not cq4p-opt %s -split-input-file -cq4p-lower-model=prefill-chunk=1 2>&1 | FileCheck %s --check-prefix=CHUNK

// CHUNK: prefill chunk 1 is out of range (2 to 65536)

// expected-error @+1 {{a model graph needs the module attribute cq4p.model}}
func.func @forward(%ids: tensor<?xi64>, %pos: index) {
  return
}

// -----

module attributes {cq4p.model = {architecture = "llama", digest = "d", vocab = 256 : i64, hidden = 128 : i64, layers = 1 : i64, num_kv_heads = 1 : i64, head_dim = 64 : i64}} {
  func.func @forward(%ids: tensor<?xi64>, %pos: index,
      %embed: !cq4p.weight<256x128, gs = 128, orthogonal, panels> {cq4p.tensor = "e"}) -> tensor<1x128xf32> {
    %h = cq4p.embedding %ids, %embed : tensor<?xi64>, !cq4p.weight<256x128, gs = 128, orthogonal, panels> -> tensor<?x128xf32>
    %t = tensor.extract_slice %h[0, 0] [1, 128] [1, 1] : tensor<?x128xf32> to tensor<1x128xf32>
    // expected-error @+1 {{expected @forward to return the logits of one row ([1, vocab = 256]) computed by a cq4p.linear (optionally soft-capped)}}
    return %t : tensor<1x128xf32>
  }
}

// -----

module attributes {cq4p.model = {architecture = "llama", digest = "d", vocab = 256 : i64, hidden = 128 : i64, layers = 1 : i64, num_kv_heads = 1 : i64, head_dim = 64 : i64}} {
  func.func @forward(%ids: tensor<?xi64>, %pos: index,
      %embed: !cq4p.weight<256x128, gs = 128, orthogonal, panels> {cq4p.tensor = "e"}) -> tensor<1x256xf32> {
    %h = cq4p.embedding %ids, %embed : tensor<?xi64>, !cq4p.weight<256x128, gs = 128, orthogonal, panels> -> tensor<?x128xf32>
    // expected-error @+1 {{only the last row of an activation can be sliced (offsets [dim(x, 0) - 1, 0], sizes [1, width])}}
    %t = tensor.extract_slice %h[0, 0] [1, 128] [1, 1] : tensor<?x128xf32> to tensor<1x128xf32>
    %l = cq4p.linear %t, %embed : tensor<1x128xf32>, !cq4p.weight<256x128, gs = 128, orthogonal, panels> -> tensor<1x256xf32>
    return %l : tensor<1x256xf32>
  }
}

// -----

module attributes {cq4p.model = {architecture = "llama", digest = "d", vocab = 256 : i64, hidden = 128 : i64, layers = 1 : i64, num_kv_heads = 1 : i64, head_dim = 64 : i64}} {
  func.func @forward(%ids: tensor<?xi64>, %pos: index,
      %embed: !cq4p.weight<256x128, gs = 128, orthogonal, panels> {cq4p.tensor = "e"},
      %wk: !cq4p.weight<64x128, gs = 128, hadamard, panels> {cq4p.tensor = "k"}) -> tensor<1x256xf32> {
    %h = cq4p.embedding %ids, %embed : tensor<?xi64>, !cq4p.weight<256x128, gs = 128, orthogonal, panels> -> tensor<?x128xf32>
    %k = cq4p.linear %h, %wk : tensor<?x128xf32>, !cq4p.weight<64x128, gs = 128, hadamard, panels> -> tensor<?x64xf32>
    %q = arith.addf %h, %h : tensor<?x128xf32>
    // expected-error @+1 {{expected the keys to be computed for this attention alone (they are written straight into the KV cache)}}
    %a = cq4p.cached_attention %q, %k, %k, %pos {layer = 0 : i64, num_heads = 2 : i64, num_kv_heads = 1 : i64, head_dim = 64 : i64, window = 0 : i64, scale = 0.125 : f32} : tensor<?x128xf32>, tensor<?x64xf32>, tensor<?x64xf32>, index -> tensor<?x128xf32>
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %n = tensor.dim %a, %c0 : tensor<?x128xf32>
    %last = arith.subi %n, %c1 : index
    %t = tensor.extract_slice %a[%last, 0] [1, 128] [1, 1] : tensor<?x128xf32> to tensor<1x128xf32>
    %l = cq4p.linear %t, %embed : tensor<1x128xf32>, !cq4p.weight<256x128, gs = 128, orthogonal, panels> -> tensor<1x256xf32>
    return %l : tensor<1x256xf32>
  }
}

// -----

module attributes {cq4p.model = {architecture = "llama", digest = "d", vocab = 256 : i64, hidden = 128 : i64, layers = 1 : i64, num_kv_heads = 1 : i64, head_dim = 64 : i64}} {
  func.func @forward(%ids: tensor<?xi64>, %pos: index,
      %embed: !cq4p.weight<256x128, gs = 128, orthogonal, panels> {cq4p.tensor = "e"}) -> tensor<1x256xf32> {
    %h = cq4p.embedding %ids, %embed : tensor<?xi64>, !cq4p.weight<256x128, gs = 128, orthogonal, panels> -> tensor<?x128xf32>
    // expected-error @+1 {{'arith.mulf' op is not supported in a model graph}}
    %m = arith.mulf %h, %h : tensor<?x128xf32>
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %n = tensor.dim %m, %c0 : tensor<?x128xf32>
    %last = arith.subi %n, %c1 : index
    %t = tensor.extract_slice %m[%last, 0] [1, 128] [1, 1] : tensor<?x128xf32> to tensor<1x128xf32>
    %l = cq4p.linear %t, %embed : tensor<1x128xf32>, !cq4p.weight<256x128, gs = 128, orthogonal, panels> -> tensor<1x256xf32>
    return %l : tensor<1x256xf32>
  }
}

// -----

module attributes {cq4p.model = {architecture = "llama", digest = "d", vocab = 256 : i64, hidden = 128 : i64, layers = 1 : i64, num_kv_heads = 1 : i64, head_dim = 64 : i64}} {
  // expected-error @+1 {{argument 2 has no cq4p.tensor name}}
  func.func @forward(%ids: tensor<?xi64>, %pos: index,
      %embed: !cq4p.weight<256x128, gs = 128, orthogonal, panels>) -> tensor<1x256xf32> {
    %h = cq4p.embedding %ids, %embed : tensor<?xi64>, !cq4p.weight<256x128, gs = 128, orthogonal, panels> -> tensor<?x128xf32>
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %n = tensor.dim %h, %c0 : tensor<?x128xf32>
    %last = arith.subi %n, %c1 : index
    %t = tensor.extract_slice %h[%last, 0] [1, 128] [1, 1] : tensor<?x128xf32> to tensor<1x128xf32>
    %l = cq4p.linear %t, %embed : tensor<1x128xf32>, !cq4p.weight<256x128, gs = 128, orthogonal, panels> -> tensor<1x256xf32>
    return %l : tensor<1x256xf32>
  }
}

// -----

// Two attentions may not write one layer's cache.
module attributes {cq4p.model = {architecture = "llama", digest = "d", vocab = 256 : i64, hidden = 128 : i64, layers = 2 : i64}} {
  func.func @forward(%ids: tensor<?xi64>, %pos: index,
      %embed: !cq4p.weight<256x128, gs = 128, orthogonal, panels> {cq4p.tensor = "e"}) -> tensor<1x256xf32> {
    %h = cq4p.embedding %ids, %embed : tensor<?xi64>, !cq4p.weight<256x128, gs = 128, orthogonal, panels> -> tensor<?x128xf32>
    %k = arith.addf %h, %h : tensor<?x128xf32>
    %v = arith.addf %h, %h : tensor<?x128xf32>
    %a = cq4p.cached_attention %h, %k, %v, %pos {layer = 0 : i64, num_heads = 2 : i64, num_kv_heads = 2 : i64, head_dim = 64 : i64, window = 0 : i64, scale = 0.125 : f32} : tensor<?x128xf32>, tensor<?x128xf32>, tensor<?x128xf32>, index -> tensor<?x128xf32>
    %k2 = arith.addf %a, %h : tensor<?x128xf32>
    %v2 = arith.addf %a, %h : tensor<?x128xf32>
    // expected-error @+1 {{writes layer 0's KV cache, which an earlier cq4p.cached_attention writes}}
    %b = cq4p.cached_attention %a, %k2, %v2, %pos {layer = 0 : i64, num_heads = 2 : i64, num_kv_heads = 2 : i64, head_dim = 64 : i64, window = 0 : i64, scale = 0.125 : f32} : tensor<?x128xf32>, tensor<?x128xf32>, tensor<?x128xf32>, index -> tensor<?x128xf32>
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %rows = tensor.dim %b, %c0 : tensor<?x128xf32>
    %last = arith.subi %rows, %c1 : index
    %t = tensor.extract_slice %b[%last, 0] [1, 128] [1, 1] : tensor<?x128xf32> to tensor<1x128xf32>
    %l = cq4p.linear %t, %embed : tensor<1x128xf32>, !cq4p.weight<256x128, gs = 128, orthogonal, panels> -> tensor<1x256xf32>
    return %l : tensor<1x256xf32>
  }
}

// -----

// A shared attention reads a cache that an earlier attention writes.
module attributes {cq4p.model = {architecture = "gemma4", digest = "d", vocab = 256 : i64, hidden = 128 : i64, layers = 2 : i64}} {
  func.func @forward(%ids: tensor<?xi64>, %pos: index,
      %embed: !cq4p.weight<256x128, gs = 128, orthogonal, panels> {cq4p.tensor = "e"}) -> tensor<1x256xf32> {
    %h = cq4p.embedding %ids, %embed : tensor<?xi64>, !cq4p.weight<256x128, gs = 128, orthogonal, panels> -> tensor<?x128xf32>
    // expected-error @+1 {{reads layer 1's KV cache, which no earlier cq4p.cached_attention writes}}
    %a = cq4p.cached_attention %h, %pos {layer = 1 : i64, num_heads = 2 : i64, num_kv_heads = 2 : i64, head_dim = 64 : i64, window = 0 : i64, scale = 1.0 : f32} : tensor<?x128xf32>, index -> tensor<?x128xf32>
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %rows = tensor.dim %a, %c0 : tensor<?x128xf32>
    %last = arith.subi %rows, %c1 : index
    %t = tensor.extract_slice %a[%last, 0] [1, 128] [1, 1] : tensor<?x128xf32> to tensor<1x128xf32>
    %l = cq4p.linear %t, %embed : tensor<1x128xf32>, !cq4p.weight<256x128, gs = 128, orthogonal, panels> -> tensor<1x256xf32>
    return %l : tensor<1x256xf32>
  }
}

// -----

// A shared attention has the writer's cache shape.
module attributes {cq4p.model = {architecture = "gemma4", digest = "d", vocab = 256 : i64, hidden = 128 : i64, layers = 2 : i64}} {
  func.func @forward(%ids: tensor<?xi64>, %pos: index,
      %embed: !cq4p.weight<256x128, gs = 128, orthogonal, panels> {cq4p.tensor = "e"}) -> tensor<1x256xf32> {
    %h = cq4p.embedding %ids, %embed : tensor<?xi64>, !cq4p.weight<256x128, gs = 128, orthogonal, panels> -> tensor<?x128xf32>
    %k = arith.addf %h, %h : tensor<?x128xf32>
    %v = arith.addf %h, %h : tensor<?x128xf32>
    %a = cq4p.cached_attention %h, %k, %v, %pos {layer = 0 : i64, num_heads = 2 : i64, num_kv_heads = 2 : i64, head_dim = 64 : i64, window = 0 : i64, scale = 1.0 : f32} : tensor<?x128xf32>, tensor<?x128xf32>, tensor<?x128xf32>, index -> tensor<?x128xf32>
    // expected-error @+1 {{expected layer 0's cache shape (2 kv heads of 64), got 1 kv heads of 64}}
    %b = cq4p.cached_attention %a, %pos {layer = 0 : i64, num_heads = 2 : i64, num_kv_heads = 1 : i64, head_dim = 64 : i64, window = 0 : i64, scale = 1.0 : f32} : tensor<?x128xf32>, index -> tensor<?x128xf32>
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %rows = tensor.dim %b, %c0 : tensor<?x128xf32>
    %last = arith.subi %rows, %c1 : index
    %t = tensor.extract_slice %b[%last, 0] [1, 128] [1, 1] : tensor<?x128xf32> to tensor<1x128xf32>
    %l = cq4p.linear %t, %embed : tensor<1x128xf32>, !cq4p.weight<256x128, gs = 128, orthogonal, panels> -> tensor<1x256xf32>
    return %l : tensor<1x256xf32>
  }
}

// -----

// One convolution per layer's state.
module attributes {cq4p.model = {architecture = "lfm2", digest = "d", vocab = 256 : i64, hidden = 128 : i64, layers = 2 : i64}} {
  func.func @forward(%ids: tensor<?xi64>, %pos: index,
      %embed: !cq4p.weight<256x384, gs = 128, orthogonal, panels> {cq4p.tensor = "e"},
      %w: tensor<384xf16> {cq4p.tensor = "w"},
      %head: !cq4p.weight<256x128, gs = 128, orthogonal, panels> {cq4p.tensor = "h"}) -> tensor<1x256xf32> {
    %h = cq4p.embedding %ids, %embed : tensor<?xi64>, !cq4p.weight<256x384, gs = 128, orthogonal, panels> -> tensor<?x384xf32>
    %a = cq4p.short_conv %h, %w, %pos {layer = 1 : i64} : tensor<?x384xf32>, tensor<384xf16>, index -> tensor<?x128xf32>
    // expected-error @+1 {{layer 1's convolution state already belongs to an earlier cq4p.short_conv}}
    %b = cq4p.short_conv %h, %w, %pos {layer = 1 : i64} : tensor<?x384xf32>, tensor<384xf16>, index -> tensor<?x128xf32>
    %s = arith.addf %a, %b : tensor<?x128xf32>
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %rows = tensor.dim %s, %c0 : tensor<?x128xf32>
    %last = arith.subi %rows, %c1 : index
    %t = tensor.extract_slice %s[%last, 0] [1, 128] [1, 1] : tensor<?x128xf32> to tensor<1x128xf32>
    %l = cq4p.linear %t, %head : tensor<1x128xf32>, !cq4p.weight<256x128, gs = 128, orthogonal, panels> -> tensor<1x256xf32>
    return %l : tensor<1x256xf32>
  }
}

// -----

// An embedding table with fewer rows than the vocab the runtime checks ids
// against.
module attributes {cq4p.model = {architecture = "llama", digest = "d", vocab = 4096 : i64, hidden = 128 : i64, layers = 1 : i64}} {
  func.func @forward(%ids: tensor<?xi64>, %pos: index,
      %embed: !cq4p.weight<128x128, gs = 128, orthogonal, panels> {cq4p.tensor = "e"},
      %head: !cq4p.weight<4096x128, gs = 128, orthogonal, panels> {cq4p.tensor = "h"}) -> tensor<1x4096xf32> {
    // expected-error @+1 {{expected the table's rows (128) to cover the model's vocab (4096): ids up to 4095 would read past it}}
    %h = cq4p.embedding %ids, %embed : tensor<?xi64>, !cq4p.weight<128x128, gs = 128, orthogonal, panels> -> tensor<?x128xf32>
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %rows = tensor.dim %h, %c0 : tensor<?x128xf32>
    %last = arith.subi %rows, %c1 : index
    %t = tensor.extract_slice %h[%last, 0] [1, 128] [1, 1] : tensor<?x128xf32> to tensor<1x128xf32>
    %l = cq4p.linear %t, %head : tensor<1x128xf32>, !cq4p.weight<4096x128, gs = 128, orthogonal, panels> -> tensor<1x4096xf32>
    return %l : tensor<1x4096xf32>
  }
}

// -----

// The module's hidden against the token embedding's width.
module attributes {cq4p.model = {architecture = "llama", digest = "d", vocab = 256 : i64, hidden = 256 : i64, layers = 1 : i64, num_kv_heads = 1 : i64, head_dim = 64 : i64}} {
  func.func @forward(%ids: tensor<?xi64>, %pos: index,
      %embed: !cq4p.weight<256x128, gs = 128, orthogonal, panels> {cq4p.tensor = "e"}) -> tensor<1x256xf32> {
    // expected-error @+1 {{expected the token embedding's width (128) to be the model's hidden (256), or hidden zero-padded to the group size (256)}}
    %h = cq4p.embedding %ids, %embed : tensor<?xi64>, !cq4p.weight<256x128, gs = 128, orthogonal, panels> -> tensor<?x128xf32>
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %n = tensor.dim %h, %c0 : tensor<?x128xf32>
    %last = arith.subi %n, %c1 : index
    %t = tensor.extract_slice %h[%last, 0] [1, 128] [1, 1] : tensor<?x128xf32> to tensor<1x128xf32>
    %l = cq4p.linear %t, %embed : tensor<1x128xf32>, !cq4p.weight<256x128, gs = 128, orthogonal, panels> -> tensor<1x256xf32>
    return %l : tensor<1x256xf32>
  }
}

// -----

// The module's layers against the graph's attentions and convolutions.
module attributes {cq4p.model = {architecture = "llama", digest = "d", vocab = 256 : i64, hidden = 128 : i64, layers = 2 : i64, num_kv_heads = 1 : i64, head_dim = 64 : i64}} {
  // expected-error @+1 {{has 1 cq4p.cached_attention and cq4p.short_conv ops, expected one per layer of the model's 2 layers}}
  func.func @forward(%ids: tensor<?xi64>, %pos: index,
      %embed: !cq4p.weight<256x128, gs = 128, orthogonal, panels> {cq4p.tensor = "e"},
      %wk: !cq4p.weight<64x128, gs = 128, hadamard, panels> {cq4p.tensor = "k"},
      %wv: !cq4p.weight<64x128, gs = 128, hadamard, panels> {cq4p.tensor = "v"}) -> tensor<1x256xf32> {
    %h = cq4p.embedding %ids, %embed : tensor<?xi64>, !cq4p.weight<256x128, gs = 128, orthogonal, panels> -> tensor<?x128xf32>
    %k = cq4p.linear %h, %wk : tensor<?x128xf32>, !cq4p.weight<64x128, gs = 128, hadamard, panels> -> tensor<?x64xf32>
    %v = cq4p.linear %h, %wv : tensor<?x128xf32>, !cq4p.weight<64x128, gs = 128, hadamard, panels> -> tensor<?x64xf32>
    %a = cq4p.cached_attention %h, %k, %v, %pos {layer = 0 : i64, num_heads = 2 : i64, num_kv_heads = 1 : i64, head_dim = 64 : i64, window = 0 : i64, scale = 0.125 : f32} : tensor<?x128xf32>, tensor<?x64xf32>, tensor<?x64xf32>, index -> tensor<?x128xf32>
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %n = tensor.dim %a, %c0 : tensor<?x128xf32>
    %last = arith.subi %n, %c1 : index
    %t = tensor.extract_slice %a[%last, 0] [1, 128] [1, 1] : tensor<?x128xf32> to tensor<1x128xf32>
    %l = cq4p.linear %t, %embed : tensor<1x128xf32>, !cq4p.weight<256x128, gs = 128, orthogonal, panels> -> tensor<1x256xf32>
    return %l : tensor<1x256xf32>
  }
}

// -----

// Gemma 4's per-layer table as one row per token (the layout converters
// wrote before it was stored as rows of one layer each).
module attributes {cq4p.model = {architecture = "gemma4", digest = "d", vocab = 256 : i64, hidden = 128 : i64, layers = 1 : i64}} {
  func.func @forward(%ids: tensor<?xi64>, %pos: index,
      %embed: !cq4p.weight<256x128, gs = 128, orthogonal, panels> {cq4p.tensor = "model.language_model.embed_tokens.weight"},
      %ple: !cq4p.weight<256x256, gs = 128, orthogonal, panels> {cq4p.tensor = "model.language_model.embed_tokens_per_layer.weight"}) -> tensor<1x256xf32> {
    %h = cq4p.embedding %ids, %embed : tensor<?xi64>, !cq4p.weight<256x128, gs = 128, orthogonal, panels> -> tensor<?x128xf32>
    // expected-error @+1 {{the per-layer embedding table 'model.language_model.embed_tokens_per_layer.weight' is stored as one [256 x 256] orthogonal tensor, a layout this cq4p no longer compiles (a 256 x 256 rotation read for every token); reconvert the checkpoint with `python -m cq4p convert`, which stores it as rows of one layer each}}
    %p = cq4p.embedding %ids, %ple : tensor<?xi64>, !cq4p.weight<256x256, gs = 128, orthogonal, panels> -> tensor<?x256xf32>
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %rows = tensor.dim %h, %c0 : tensor<?x128xf32>
    %last = arith.subi %rows, %c1 : index
    %t = tensor.extract_slice %h[%last, 0] [1, 128] [1, 1] : tensor<?x128xf32> to tensor<1x128xf32>
    %l = cq4p.linear %t, %embed : tensor<1x128xf32>, !cq4p.weight<256x128, gs = 128, orthogonal, panels> -> tensor<1x256xf32>
    return %l : tensor<1x256xf32>
  }
}

// -----

// A table with rows per id must hold that many rows for every id of the vocab.
module attributes {cq4p.model = {architecture = "gemma4", digest = "d", vocab = 256 : i64, hidden = 128 : i64, layers = 1 : i64}} {
  func.func @forward(%ids: tensor<?xi64>, %pos: index,
      %embed: !cq4p.weight<256x128, gs = 128, orthogonal, panels> {cq4p.tensor = "e"},
      %ple: !cq4p.weight<512x128, gs = 128, orthogonal, panels> {cq4p.tensor = "p"}) -> tensor<1x256xf32> {
    %h = cq4p.embedding %ids, %embed : tensor<?xi64>, !cq4p.weight<256x128, gs = 128, orthogonal, panels> -> tensor<?x128xf32>
    // expected-error @+1 {{expected the table's rows (512, 4 per id) to cover the model's vocab (256): ids up to 255 would read past it}}
    %p = cq4p.embedding %ids, %ple {rows_per_id = 4 : i64} : tensor<?xi64>, !cq4p.weight<512x128, gs = 128, orthogonal, panels> -> tensor<?x512xf32>
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %rows = tensor.dim %h, %c0 : tensor<?x128xf32>
    %last = arith.subi %rows, %c1 : index
    %t = tensor.extract_slice %h[%last, 0] [1, 128] [1, 1] : tensor<?x128xf32> to tensor<1x128xf32>
    %l = cq4p.linear %t, %embed : tensor<1x128xf32>, !cq4p.weight<256x128, gs = 128, orthogonal, panels> -> tensor<1x256xf32>
    return %l : tensor<1x256xf32>
  }
}

// -----

// The planner compiles a norm in chunks of 16 lanes.
module attributes {cq4p.model = {architecture = "llama", digest = "d", vocab = 256 : i64, hidden = 128 : i64, layers = 1 : i64, num_kv_heads = 1 : i64, head_dim = 64 : i64}} {
  func.func @forward(%ids: tensor<?xi64>, %pos: index,
      %embed: !cq4p.weight<256x128, gs = 128, orthogonal, panels> {cq4p.tensor = "e"}) -> tensor<1x256xf32> {
    %h = cq4p.embedding %ids, %embed : tensor<?xi64>, !cq4p.weight<256x128, gs = 128, orthogonal, panels> -> tensor<?x128xf32>
    // expected-error @+1 {{expected the chunk length (8) to be a multiple of 16 to compile it}}
    %n = cq4p.rms_norm %h {chunk = 8 : i64, epsilon = 1.0e-06 : f32} : tensor<?x128xf32> -> tensor<?x128xf32>
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %rows = tensor.dim %n, %c0 : tensor<?x128xf32>
    %last = arith.subi %rows, %c1 : index
    %t = tensor.extract_slice %n[%last, 0] [1, 128] [1, 1] : tensor<?x128xf32> to tensor<1x128xf32>
    %l = cq4p.linear %t, %embed : tensor<1x128xf32>, !cq4p.weight<256x128, gs = 128, orthogonal, panels> -> tensor<1x256xf32>
    return %l : tensor<1x256xf32>
  }
}

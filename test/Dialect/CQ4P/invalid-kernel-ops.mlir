// RUN: cq4p-opt %s -split-input-file -verify-diagnostics

func.func @panels_not_static(%p: memref<?x2x32x128xi8>, %cb: memref<16xi8>,
                             %a: memref<?x256xi8>, %part: memref<1x64xi32>, %i: index) {
  // expected-error @+1 {{'cq4p.panel_dot' op expected static panels, got 'memref<?x2x32x128xi8>'}}
  cq4p.panel_dot %p, %cb, %a, %part, %i, %i, %i
      : memref<?x2x32x128xi8>, memref<16xi8>, memref<?x256xi8>, memref<1x64xi32>
  return
}

// -----

func.func @kg_block(%p: memref<2x2x32x64xi8>, %cb: memref<16xi8>,
                    %a: memref<?x256xi8>, %part: memref<1x64xi32>, %i: index) {
  // expected-error @+1 {{'cq4p.panel_dot' op expected 128-byte kg-blocks in the panels (dimension 3), got 64}}
  cq4p.panel_dot %p, %cb, %a, %part, %i, %i, %i
      : memref<2x2x32x64xi8>, memref<16xi8>, memref<?x256xi8>, memref<1x64xi32>
  return
}

// -----

func.func @act_k(%p: memref<2x2x32x128xi8>, %cb: memref<16xi8>,
                 %a: memref<?x200xi8>, %part: memref<1x64xi32>, %i: index) {
  // expected-error @+1 {{'cq4p.panel_dot' op expected dimension 1 of the activations to be 256, got 200}}
  cq4p.panel_dot %p, %cb, %a, %part, %i, %i, %i
      : memref<2x2x32x128xi8>, memref<16xi8>, memref<?x200xi8>, memref<1x64xi32>
  return
}

// -----

func.func @partials(%p: memref<2x2x32x128xi8>, %cb: memref<16xi8>,
                    %a: memref<?x256xi8>, %part: memref<?x64xi32>, %i: index) {
  // expected-error @+1 {{'cq4p.panel_dot' op expected dimension 0 of the partials to be static}}
  cq4p.panel_dot %p, %cb, %a, %part, %i, %i, %i
      : memref<2x2x32x128xi8>, memref<16xi8>, memref<?x256xi8>, memref<?x64xi32>
  return
}

// -----

func.func @codebook(%p: memref<2x2x32x128xi8>, %cb: memref<15xi8>,
                    %a: memref<?x256xi8>, %part: memref<1x64xi32>, %i: index) {
  // expected-error @+1 {{'cq4p.panel_dot' op expected dimension 0 of the int8 codebook to be 16, got 15}}
  cq4p.panel_dot %p, %cb, %a, %part, %i, %i, %i
      : memref<2x2x32x128xi8>, memref<15xi8>, memref<?x256xi8>, memref<1x64xi32>
  return
}

// -----

func.func @super_blocks(%p: memref<3x2x32x128xi8>, %np: memref<3x2x64xf32>,
                        %cb: memref<16xi8>, %a: memref<1x256xi8>, %s: memref<1x2xf32>,
                        %y: memref<1x100xf32>, %i: index) {
  // expected-error @+1 {{'cq4p.panel_matmul' op expected 2 super-blocks for N = 100, got 3}}
  cq4p.panel_matmul %p, %np, %cb, %a, %s, %y, %i, %i
      : memref<3x2x32x128xi8>, memref<3x2x64xf32>, memref<16xi8>, memref<1x256xi8>,
        memref<1x2xf32>, memref<1x100xf32>
  return
}

// -----

func.func @matmul_rows(%p: memref<2x2x32x128xi8>, %np: memref<2x2x64xf32>,
                       %cb: memref<16xi8>, %a: memref<1x256xi8>, %s: memref<1x2xf32>,
                       %y: memref<2x100xf32>, %i: index) {
  // expected-error @+1 {{'cq4p.panel_matmul' op expected the activations and the output to have the same rows, got 1 and 2}}
  cq4p.panel_matmul %p, %np, %cb, %a, %s, %y, %i, %i
      : memref<2x2x32x128xi8>, memref<2x2x64xf32>, memref<16xi8>, memref<1x256xi8>,
        memref<1x2xf32>, memref<2x100xf32>
  return
}

// -----

func.func @quantize_gs(%x: memref<?x96xf32>, %isr: memref<96xf16>, %l: memref<48xi8>,
                       %r: memref<48xi8>, %p: memref<48xi32>, %a: memref<?x96xi8>,
                       %s: memref<?x2xf32>, %i: index) {
  // expected-error @+1 {{'cq4p.quantize_activations' op expected the group size (48) to be a power of two}}
  cq4p.quantize_activations %x, %isr, %l, %r, %p, %a, %s, %i, %i {group_size = 48 : i64}
      : memref<?x96xf32>, memref<96xf16>, memref<48xi8>, memref<48xi8>, memref<48xi32>,
        memref<?x96xi8>, memref<?x2xf32>
  return
}

// -----

func.func @quantize_signs(%x: memref<?x64xf32>, %isr: memref<64xf16>, %l: memref<16xi8>,
                          %r: memref<32xi8>, %p: memref<32xi32>, %a: memref<?x64xi8>,
                          %s: memref<?x2xf32>, %i: index) {
  // expected-error @+1 {{'cq4p.quantize_activations' op expected dimension 0 of the left signs to be 32, got 16}}
  cq4p.quantize_activations %x, %isr, %l, %r, %p, %a, %s, %i, %i {group_size = 32 : i64}
      : memref<?x64xf32>, memref<64xf16>, memref<16xi8>, memref<32xi8>, memref<32xi32>,
        memref<?x64xi8>, memref<?x2xf32>
  return
}

// -----

func.func @quantize_up_alone(%x: memref<?x64xf32>, %u: memref<?x64xf32>, %isr: memref<64xf16>,
                             %l: memref<32xi8>, %r: memref<32xi8>, %p: memref<32xi32>,
                             %a: memref<?x64xi8>, %s: memref<?x2xf32>, %i: index) {
  // expected-error @+1 {{'cq4p.quantize_activations' op expected the up rows and the gating activation together (got up rows alone)}}
  cq4p.quantize_activations %x gated by %u : memref<?x64xf32>, %isr, %l, %r, %p, %a, %s, %i, %i
      {group_size = 32 : i64}
      : memref<?x64xf32>, memref<64xf16>, memref<32xi8>, memref<32xi8>, memref<32xi32>,
        memref<?x64xi8>, memref<?x2xf32>
  return
}

// -----

func.func @quantize_up_shape(%x: memref<?x64xf32>, %u: memref<?x128xf32>, %isr: memref<64xf16>,
                             %l: memref<32xi8>, %r: memref<32xi8>, %p: memref<32xi32>,
                             %a: memref<?x64xi8>, %s: memref<?x2xf32>, %i: index) {
  // expected-error @+1 {{'cq4p.quantize_activations' op expected dimension 1 of the up rows to be 64, got 128}}
  cq4p.quantize_activations %x gated by %u : memref<?x128xf32>, %isr, %l, %r, %p, %a, %s, %i, %i
      {gating = #cq4p.activation<silu>, group_size = 32 : i64}
      : memref<?x64xf32>, memref<64xf16>, memref<32xi8>, memref<32xi8>, memref<32xi32>,
        memref<?x64xi8>, memref<?x2xf32>
  return
}

// -----

func.func @rotation(%x: memref<?x256xf32>, %isr: memref<256xf16>, %rt: memref<256x128xf16>,
                    %a: memref<?x256xi8>, %s: memref<?x2xf32>, %i: index) {
  // expected-error @+1 {{'cq4p.rotate_quantize_activations' op expected dimension 1 of the rotation to be 256, got 128}}
  cq4p.rotate_quantize_activations %x, %isr, %rt, %a, %s, %i, %i {group_size = 128 : i64}
      : memref<?x256xf32>, memref<256xf16>, memref<256x128xf16>, memref<?x256xi8>,
        memref<?x2xf32>
  return
}

// -----

func.func @rescale_accum(%p: memref<4x64xi32>, %s: memref<?x2xf32>, %np: memref<2x2x64xf32>,
                         %acc: memref<1x64xf32>, %i: index) {
  // expected-error @+1 {{'cq4p.rescale' op expected dimension 0 of the accumulator to be 4, got 1}}
  cq4p.rescale %p, %s, %np, %acc, %i, %i, %i
      : memref<4x64xi32>, memref<?x2xf32>, memref<2x2x64xf32>, memref<1x64xf32>
  return
}

// -----

func.func @embedding_rotation(%ids: tensor<?xi64>,
                              %w: !cq4p.weight<64x256, gs = 128, hadamard, panels>) {
  // expected-error @+1 {{'cq4p.embedding' op expected an orthogonal weight (a token embedding), got a hadamard one}}
  %r = cq4p.embedding %ids, %w : tensor<?xi64>,
      !cq4p.weight<64x256, gs = 128, hadamard, panels> -> tensor<?x256xf32>
  return
}

// -----

func.func @embedding_width(%ids: tensor<?xi64>,
                           %w: !cq4p.weight<64x256, gs = 128, orthogonal, panels>) {
  // expected-error @+1 {{'cq4p.embedding' op expected the result's width (128) to equal the weight's K (256)}}
  %r = cq4p.embedding %ids, %w : tensor<?xi64>,
      !cq4p.weight<64x256, gs = 128, orthogonal, panels> -> tensor<?x128xf32>
  return
}

// -----

func.func @embedding_rows_width(%ids: tensor<?xi64>,
                                %w: !cq4p.weight<192x128, gs = 128, orthogonal, panels>) {
  // expected-error @+1 {{'cq4p.embedding' op expected the result's width (256) to equal the weight's K (128) times rows_per_id (3)}}
  %r = cq4p.embedding %ids, %w {rows_per_id = 3 : i64} : tensor<?xi64>,
      !cq4p.weight<192x128, gs = 128, orthogonal, panels> -> tensor<?x256xf32>
  return
}

// -----

func.func @embedding_rows_divide(%ids: tensor<?xi64>,
                                 %w: !cq4p.weight<64x128, gs = 128, orthogonal, panels>) {
  // expected-error @+1 {{'cq4p.embedding' op expected rows_per_id (3) to be at least 1 and to divide the table's rows (64)}}
  %r = cq4p.embedding %ids, %w {rows_per_id = 3 : i64} : tensor<?xi64>,
      !cq4p.weight<64x128, gs = 128, orthogonal, panels> -> tensor<?x384xf32>
  return
}

// -----

func.func @embedding_rows_zero(%ids: tensor<?xi64>,
                               %w: !cq4p.weight<64x128, gs = 128, orthogonal, panels>) {
  // expected-error @+1 {{'cq4p.embedding' op expected rows_per_id (0) to be at least 1 and to divide the table's rows (64)}}
  %r = cq4p.embedding %ids, %w {rows_per_id = 0 : i64} : tensor<?xi64>,
      !cq4p.weight<64x128, gs = 128, orthogonal, panels> -> tensor<?x0xf32>
  return
}

// -----

func.func @decode_embedding_norms(%p: memref<1x2x32x128xi8>, %n: memref<64x1xf16>,
                                  %cb: memref<16xf16>, %r: memref<256x256xf16>,
                                  %isr: memref<256xf16>, %ids: memref<?xi64>,
                                  %out: memref<?x256xf32>) {
  // expected-error @+1 {{'cq4p.decode_embedding' op expected dimension 1 of the norms to be 2, got 1}}
  cq4p.decode_embedding %p, %n, %cb, %r, %isr, %ids, %out
      : memref<1x2x32x128xi8>, memref<64x1xf16>, memref<16xf16>, memref<256x256xf16>,
        memref<256xf16>, memref<?xi64>, memref<?x256xf32>
  return
}

// -----

func.func @paired_rows(%panels: memref<2x2x32x128xi8>, %cb: memref<16xi8>,
                       %act: memref<4x256xi8>, %partials: memref<8x64xi32>,
                       %sb: index, %g: index, %row: index) {
  // expected-error @+1 {{expected dimension 0 of the paired activations to be 8, got 4}}
  cq4p.panel_dot %panels, %cb, %act, %partials, %sb, %g, %row {paired_activations}
      : memref<2x2x32x128xi8>, memref<16xi8>, memref<4x256xi8>, memref<8x64xi32>
  return
}

// -----

func.func @embedding_scale_inf(%ids: tensor<?xi64>,
                               %w: !cq4p.weight<64x256, gs = 128, orthogonal, panels>) {
  // expected-error @+1 {{'cq4p.embedding' op expected a finite scale, got inf}}
  %r = cq4p.embedding %ids, %w {scale = 0x7F800000 : f32} : tensor<?xi64>,
      !cq4p.weight<64x256, gs = 128, orthogonal, panels> -> tensor<?x256xf32>
  return
}

// -----

func.func @prefill_attention_scale_nan(%q: tensor<?x256xf32>, %k: tensor<?x64xf32>, %v: tensor<?x64xf32>) {
  // expected-error @+1 {{'cq4p.prefill_attention' op expected a finite scale, got nan}}
  %o = cq4p.prefill_attention %q, %k, %v {num_heads = 4 : i64, num_kv_heads = 1 : i64, head_dim = 64 : i64, window = 0 : i64, scale = 0x7FC00000 : f32} : tensor<?x256xf32>, tensor<?x64xf32>, tensor<?x64xf32> -> tensor<?x256xf32>
  return
}

// -----

func.func @attention_scale_inf(%q: memref<?x256xf32>, %k: memref<?x64xf32>, %v: memref<?x64xf32>, %o: memref<?x256xf32>, %h0: index, %h1: index) {
  // expected-error @+1 {{'cq4p.attention' op expected a finite scale, got -inf}}
  cq4p.attention %q, %k, %v, %o, %h0, %h1 {num_heads = 4 : i64, num_kv_heads = 1 : i64, head_dim = 64 : i64, window = 0 : i64, scale = 0xFF800000 : f32} : memref<?x256xf32>, memref<?x64xf32>, memref<?x64xf32>, memref<?x256xf32>
  return
}

// -----

// Without `at`, the keys are the queries' own rows.
func.func @attention_keys_length(%q: memref<16x256xf32>, %k: memref<32x64xf32>, %v: memref<32x64xf32>, %o: memref<16x256xf32>, %h0: index, %h1: index) {
  // expected-error @+1 {{'cq4p.attention' op expected k to have q's sequence length (16), got 32}}
  cq4p.attention %q, %k, %v, %o, %h0, %h1 {num_heads = 4 : i64, num_kv_heads = 1 : i64, head_dim = 64 : i64, window = 0 : i64, scale = 0.125 : f32} : memref<16x256xf32>, memref<32x64xf32>, memref<32x64xf32>, memref<16x256xf32>
  return
}

// -----

// Over a cache, the output still has q's rows.
func.func @attention_cached_out_length(%q: memref<16x256xf32>, %k: memref<32x64xf32>, %v: memref<32x64xf32>, %o: memref<8x256xf32>, %h0: index, %h1: index, %p: index) {
  // expected-error @+1 {{'cq4p.attention' op expected the output to have q's sequence length (16), got 8}}
  cq4p.attention %q, %k, %v, %o, %h0, %h1 at %p {num_heads = 4 : i64, num_kv_heads = 1 : i64, head_dim = 64 : i64, window = 0 : i64, scale = 0.125 : f32} : memref<16x256xf32>, memref<32x64xf32>, memref<32x64xf32>, memref<8x256xf32>
  return
}

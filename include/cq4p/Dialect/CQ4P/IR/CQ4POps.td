//===- CQ4POps.td - cq4p operations ------------------------*- tablegen -*-===//

#ifndef CQ4P_DIALECT_CQ4P_IR_CQ4POPS_TD
#define CQ4P_DIALECT_CQ4P_IR_CQ4POPS_TD

include "mlir/IR/SymbolInterfaces.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "cq4p/Dialect/CQ4P/IR/CQ4PTypes.td"

def CQ4P_LinearOp : CQ4P_Op<"linear", [Pure]> {
  let summary = "y[M, N] = x[M, K] times a CQ4 weight";
  let description = [{
    The graph-level linear map of a model: every activation row of `input`
    (`[M, K]`, fp32) is multiplied by the transpose of the CQ4 weight
    (`[N, K]`), giving `result` (`[M, N]`, fp32). Its meaning is the
    dequantized weight's (docs/FORMAT.md section 2); kernels compute it by the
    compute contract of section 5 (activation transform and int8
    quantization, an exact int32 dot into partials, an fp32 rescale).

    M may be dynamic (the number of tokens of a prefill); K and N must be
    static and agree with the weight.

    An optional `bias` (`[N]`, fp16 or fp32 as the bundle stores it) is
    added to every row after the rescale, in the matmul's epilogue (the
    same dispatch, while the output is in cache): `y = (x W^T) + b`
    (Qwen2's q/k/v projections).

    Examples:

    ```mlir
    // 1) decode: one token through a 1536 -> 2048 projection.
    %y = cq4p.linear %x, %w : tensor<1x1536xf32>,
        !cq4p.weight<2048x1536, gs = 128, hadamard, panels> -> tensor<1x2048xf32>
    // 2) prefill: any number of tokens.
    %y = cq4p.linear %x, %w : tensor<?x1536xf32>,
        !cq4p.weight<512x1536, gs = 128, hadamard, panels> -> tensor<?x512xf32>
    // 3) with a bias.
    %y = cq4p.linear %x, %w bias %b : tensor<?x896xf32>,
        !cq4p.weight<128x896, gs = 128, hadamard, panels>, tensor<128xf16>
        -> tensor<?x128xf32>
    ```
  }];
  let arguments = (ins RankedTensorOf<[F32]>:$input, CQ4P_WeightType:$weight,
                       Optional<RankedTensorOf<[F16, F32]>>:$bias);
  let results = (outs RankedTensorOf<[F32]>:$result);
  let assemblyFormat = [{
    $input `,` $weight (`bias` $bias^)? attr-dict `:` type($input) `,`
    qualified(type($weight)) (`,` type($bias)^)? `->` type($result)
  }];
  let hasVerifier = 1;
}

def CQ4P_EmbeddingOp : CQ4P_Op<"embedding", [Pure]> {
  let summary = "rows of an orthogonal CQ4 embedding, decoded";
  let description = [{
    Decodes the rows `ids` of an orthogonal CQ4 weight (a token embedding,
    `[vocab, hidden]`) to fp32: `out[i, j] = sum_c R[j][c] * cb[idx(ids[i], c)]
    * norm[ids[i]] * isr[j]` (docs/FORMAT.md section 5), with the file's rotation,
    raw codebook and unfolded fp16 norms.

    With `rows_per_id = R`, each id names R consecutive rows of the table,
    laid side by side: `out[i, l*K + j]` is row `ids[i] * R + l`'s value j,
    so the result is R * K wide. A table whose checkpoint rows are R slices
    of K (Gemma 4's per-layer embeddings: 35 layers of 256 per token) is
    stored as R times as many rows of K, each with its own norm, one K x K
    rotation for all of them, and a token's R rows in one or two panels.

    Example:

    ```mlir
    %rows = cq4p.embedding %ids, %table : tensor<?xi64>,
        !cq4p.weight<262144x1536, gs = 128, orthogonal, panels> -> tensor<?x1536xf32>
    %ple = cq4p.embedding %ids, %per_layer {rows_per_id = 35 : i64} : tensor<?xi64>,
        !cq4p.weight<9175040x256, gs = 128, orthogonal, panels> -> tensor<?x8960xf32>
    ```
  }];
  let arguments = (ins RankedTensorOf<[I64]>:$ids, CQ4P_WeightType:$weight,
                       OptionalAttr<F32Attr>:$scale,
                       OptionalAttr<I64Attr>:$rows_per_id);
  let extraClassDeclaration = [{
    /// Rows of the table per id (1 without `rows_per_id`).
    int64_t getRowsPerIdOrOne() {
      std::optional<uint64_t> rows = getRowsPerId();
      return rows ? int64_t(*rows) : 1;
    }
  }];
  let results = (outs RankedTensorOf<[F32]>:$result);
  let assemblyFormat = [{
    $ids `,` $weight attr-dict `:` type($ids) `,` qualified(type($weight))
    `->` type($result)
  }];
  let hasVerifier = 1;
}

def CQ4P_PrefillAttentionOp : CQ4P_Op<"prefill_attention", [Pure]> {
  let summary = "causal grouped-query attention over a prefill";
  let description = [{
    For query head h and token i: `out[i, h] = sum_j p_j v[j, h / (H /
    Hkv)]`, `p = softmax_j(scale * q[i, h] . k[j, h / (H / Hkv)])` over the
    keys j <= i (and j > i - window when `window` > 0). q and the result are
    `[S, H * D]`, k and v `[S, Hkv * D]`, fp32.

    Example:

    ```mlir
    %o = cq4p.prefill_attention %q, %k, %v {num_heads = 8 : i64,
        num_kv_heads = 4 : i64, head_dim = 64 : i64, window = 0 : i64,
        scale = 0.125 : f32}
        : tensor<?x512xf32>, tensor<?x256xf32>, tensor<?x256xf32> -> tensor<?x512xf32>
    ```
  }];
  let arguments = (ins
    RankedTensorOf<[F32]>:$q, RankedTensorOf<[F32]>:$k, RankedTensorOf<[F32]>:$v,
    I64Attr:$num_heads, I64Attr:$num_kv_heads, I64Attr:$head_dim,
    I64Attr:$window, F32Attr:$scale);
  let results = (outs RankedTensorOf<[F32]>:$result);
  let assemblyFormat = [{
    $q `,` $k `,` $v attr-dict `:` type($q) `,` type($k) `,` type($v) `->`
    type($result)
  }];
  let hasVerifier = 1;
}

def CQ4P_RmsNormOp : CQ4P_Op<"rms_norm", [Pure]> {
  let summary = "RMS normalization of each row, or of each head of a row";
  let description = [{
    With D the weight's length and the rows of `input` `[M, W]` (W a
    multiple of D) cut into chunks of D: `out = x * rsqrt(mean(x^2) +
    epsilon) * w` per chunk, in fp32, or `* (1 + w)` with `unit_offset`
    (Gemma 3). D = W normalizes whole rows; D = head_dim normalizes each
    head (Qwen3's and Gemma's q/k norms). The weight is fp16 or fp32, as the
    bundle stores it. Without a weight the chunk length is the `chunk`
    attribute and nothing multiplies the normalized values (Gemma 4's value
    norm).

    Example:

    ```mlir
    %y = cq4p.rms_norm %x, %w {epsilon = 1.0e-06 : f32}
        : tensor<?x2048xf32>, tensor<2048xf16> -> tensor<?x2048xf32>
    %qn = cq4p.rms_norm %q, %qw {epsilon = 1.0e-06 : f32, unit_offset}
        : tensor<?x1024xf32>, tensor<256xf16> -> tensor<?x1024xf32>
    %vn = cq4p.rms_norm %v {chunk = 256 : i64, epsilon = 1.0e-06 : f32}
        : tensor<?x256xf32> -> tensor<?x256xf32>
    ```
  }];
  let arguments = (ins RankedTensorOf<[F32]>:$input,
                       Optional<RankedTensorOf<[F16, F32]>>:$weight,
                       F32Attr:$epsilon, UnitAttr:$unit_offset,
                       OptionalAttr<I64Attr>:$chunk);
  let results = (outs RankedTensorOf<[F32]>:$result);
  let assemblyFormat = [{
    $input (`,` $weight^)? attr-dict `:` type($input) (`,` type($weight)^)?
    `->` type($result)
  }];
  let extraClassDeclaration = [{
    /// D: the weight's length, or the chunk attribute without a weight.
    int64_t getChunkLength();
  }];
  let hasVerifier = 1;
}

def CQ4P_RopeOp : CQ4P_Op<"rope", [Pure]> {
  let summary = "rotary position embedding of every head of a row";
  let description = [{
    Row r of `input` (`[M, heads * head_dim]`) is the token at position
    `position + r`. Per head, pairs (i, i + head_dim/2) rotate by the angle
    `(position + r) * inv_freq[i]` (rotate-half pairing), in fp32. The
    frequencies are either `inv_freq[i] = theta^(-2i/head_dim) / scaling`
    (`scaling` is linear position scaling), or given one by one in
    `inv_freq` (head_dim / 2 finite values >= 0), computed when the graph
    is written: Llama 3's frequency bands, and Gemma 4's proportional
    rotary embedding, whose pairs past the rotated fraction have frequency
    0 and pass through unchanged.

    Examples:

    ```mlir
    %qr = cq4p.rope %q, %pos {head_dim = 128 : i64, theta = 1.0e+06 : f32,
        scaling = 1.0 : f32} : tensor<?x2048xf32>, index -> tensor<?x2048xf32>
    %kr = cq4p.rope %k, %pos {head_dim = 4 : i64,
        inv_freq = array<f32: 1.0, 0.0>} : tensor<?x8xf32>, index -> tensor<?x8xf32>
    ```
  }];
  let arguments = (ins RankedTensorOf<[F32]>:$input, Index:$position,
                       I64Attr:$head_dim, OptionalAttr<F32Attr>:$theta,
                       OptionalAttr<F32Attr>:$scaling,
                       OptionalAttr<DenseF32ArrayAttr>:$inv_freq);
  let results = (outs RankedTensorOf<[F32]>:$result);
  let assemblyFormat = [{
    $input `,` $position attr-dict `:` type($input) `,` type($position) `->`
    type($result)
  }];
  let extraClassDeclaration = [{
    /// The head_dim / 2 frequencies, in fp32, from whichever form the op has.
    SmallVector<float> getFrequencies();
  }];
  let hasVerifier = 1;
}

def CQ4P_CachedAttentionOp : CQ4P_Op<"cached_attention", [AttrSizedOperandSegments]> {
  let summary = "grouped-query attention of new tokens over a layer's KV cache";
  let description = [{
    Appends `keys` and `values` (`[M, num_kv_heads * head_dim]`, the tokens
    at positions `position + r`) to the KV cache of `layer`, then for query
    row r and head h: `out[r, h] = sum_j p_j v[j, h / (H / Hkv)]`, `p =
    softmax_j(scale * q[r, h] . k[j, h / (H / Hkv)])` over the cached
    positions j <= position + r (and j > position + r - window when
    `window` > 0). The cache is state owned by the runtime and sized for a
    context length chosen at run time; this op reads and writes it, so it
    is not pure.

    Without keys and values the op only reads: it attends over the cache
    that the attention of `layer` (an earlier op) writes, with its own
    window (Gemma 4's KV-shared layers, which compute queries alone). The
    cache's heads and head dim are the writer's.

    Examples:

    ```mlir
    %o = cq4p.cached_attention %q, %k, %v, %pos {layer = 3 : i64,
        num_heads = 16 : i64, num_kv_heads = 8 : i64, head_dim = 64 : i64,
        window = 0 : i64, scale = 0.125 : f32}
        : tensor<?x1024xf32>, tensor<?x512xf32>, tensor<?x512xf32>, index
        -> tensor<?x1024xf32>
    // Over the cache layer 3 wrote.
    %s = cq4p.cached_attention %q2, %pos {layer = 3 : i64,
        num_heads = 16 : i64, num_kv_heads = 8 : i64, head_dim = 64 : i64,
        window = 0 : i64, scale = 0.125 : f32}
        : tensor<?x1024xf32>, index -> tensor<?x1024xf32>
    ```
  }];
  let arguments = (ins RankedTensorOf<[F32]>:$queries,
                       Optional<RankedTensorOf<[F32]>>:$keys,
                       Optional<RankedTensorOf<[F32]>>:$values, Index:$position,
                       I64Attr:$layer, I64Attr:$num_heads,
                       I64Attr:$num_kv_heads, I64Attr:$head_dim,
                       I64Attr:$window, F32Attr:$scale);
  let results = (outs RankedTensorOf<[F32]>:$result);
  // `%q, %k, %v, %pos` or `%q, %pos`: the operand count tells them apart.
  let hasCustomAssemblyFormat = 1;
  let hasVerifier = 1;
}

def CQ4P_GluOp : CQ4P_Op<"glu", [Pure]> {
  let summary = "gated activation: act(gate) * up";
  let description = [{
    `out = act(gate) * up` element by element, `act` = `silu` (`x /
    (1 + exp(-x))`) or `gelu_tanh` (`0.5 x (1 + tanh(sqrt(2/pi) (x +
    0.044715 x^3)))`): the gating of a dense MLP.

    Example:

    ```mlir
    %m = cq4p.glu <silu> %g, %u
        : tensor<?x6144xf32>, tensor<?x6144xf32> -> tensor<?x6144xf32>
    ```
  }];
  let arguments = (ins RankedTensorOf<[F32]>:$gate, RankedTensorOf<[F32]>:$up,
                       CQ4P_ActivationAttr:$activation);
  let results = (outs RankedTensorOf<[F32]>:$result);
  let assemblyFormat = [{
    $activation $gate `,` $up attr-dict `:` type($gate) `,` type($up) `->`
    type($result)
  }];
  let hasVerifier = 1;
}


def CQ4P_ColumnsOp : CQ4P_Op<"columns", [Pure]> {
  let summary = "a range of columns of each row, zero past the input's width";
  let description = [{
    `out[r, j] = input[r, offset + j]` when `offset + j` is below the
    input's width, else 0. A narrower result takes a slice of each row (one
    of the three parts of LFM2's in_proj output, one layer's slice of
    Gemma 4's per-layer inputs, the true width of a padded embedding row);
    a wider one pads rows with zeros (activations of a projection whose K
    the converter padded to a multiple of 128).

    Example:

    ```mlir
    %p = cq4p.columns %x {offset = 0 : i64} : tensor<?x576xf32> -> tensor<?x640xf32>
    %b = cq4p.columns %bcx {offset = 1024 : i64} : tensor<?x3072xf32> -> tensor<?x1024xf32>
    ```
  }];
  let arguments = (ins RankedTensorOf<[F32]>:$input, I64Attr:$offset);
  let results = (outs RankedTensorOf<[F32]>:$result);
  let assemblyFormat = [{
    $input attr-dict `:` type($input) `->` type($result)
  }];
  let hasVerifier = 1;
}

def CQ4P_ScaleOp : CQ4P_Op<"scale", [Pure]> {
  let summary = "every element times one factor";
  let description = [{
    `out = input * s`, with `s` the `factor` attribute or the single
    element of `scalar`, a bound tensor (Gemma 4's per-layer
    `layer_scalar`), one of the two.

    Example:

    ```mlir
    %y = cq4p.scale %x {factor = 0.0625 : f32} : tensor<?x256xf32> -> tensor<?x256xf32>
    %z = cq4p.scale %x by %s : tensor<?x1536xf32>, tensor<1xf16> -> tensor<?x1536xf32>
    ```
  }];
  let arguments = (ins RankedTensorOf<[F32]>:$input,
                       Optional<RankedTensorOf<[F16, F32]>>:$scalar,
                       OptionalAttr<F32Attr>:$factor);
  let results = (outs RankedTensorOf<[F32]>:$result);
  let assemblyFormat = [{
    $input (`by` $scalar^)? attr-dict `:` type($input) (`,` type($scalar)^)?
    `->` type($result)
  }];
  let hasVerifier = 1;
}

def CQ4P_SoftcapOp : CQ4P_Op<"softcap", [Pure]> {
  let summary = "logit soft-capping: cap * tanh(x / cap)";
  let description = [{
    `out = cap * tanh(input / cap)`, element by element (Gemma 4's final
    logit soft-capping, cap 30).

    Example:

    ```mlir
    %l = cq4p.softcap %logits {cap = 3.0e+01 : f32} : tensor<1x262144xf32> -> tensor<1x262144xf32>
    ```
  }];
  let arguments = (ins RankedTensorOf<[F32]>:$input, F32Attr:$cap);
  let results = (outs RankedTensorOf<[F32]>:$result);
  let assemblyFormat = [{
    $input attr-dict `:` type($input) `->` type($result)
  }];
  let hasVerifier = 1;
}

def CQ4P_ShortConvOp : CQ4P_Op<"short_conv"> {
  let summary = "LFM2's gated short convolution, carrying its state across steps";
  let description = [{
    `input` is the in_proj output `[M, 3H]`: B, C and x, H columns each,
    in that order. For the token at position `position + r`:

    - `Bx[r] = B[r] * x[r]`;
    - `y[r, c] = sum_{j < L} w[c * L + j] * Bx[r - (L - 1) + j, c]`, a
      depthwise causal convolution of width L (`weight` is the checkpoint's
      `[H, 1, L]` kernel, row-major), where rows before the step come from
      the layer's convolution state and rows before position 0 are zero;
    - `out[r] = C[r] * y[r]`.

    The state of `layer` (the last L - 1 rows of Bx, fp32) is owned by the
    runtime like the KV cache: a step reads it (not at position 0, where
    the history is empty) and leaves its last L - 1 rows there, so a prompt
    run in chunks of any size leaves the state one token at a time would.

    Example:

    ```mlir
    %o = cq4p.short_conv %bcx, %w, %pos {layer = 0 : i64}
        : tensor<?x3072xf32>, tensor<3072xf16>, index -> tensor<?x1024xf32>
    ```
  }];
  let arguments = (ins RankedTensorOf<[F32]>:$input,
                       RankedTensorOf<[F16, F32]>:$weight, Index:$position,
                       I64Attr:$layer);
  let results = (outs RankedTensorOf<[F32]>:$result);
  let assemblyFormat = [{
    $input `,` $weight `,` $position attr-dict `:` type($input) `,`
    type($weight) `,` type($position) `->` type($result)
  }];
  let extraClassDeclaration = [{
    /// L: the kernel width.
    int64_t getKernelWidth();
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Model steps: the compiler's schedule of kernel calls.
//===----------------------------------------------------------------------===//

def CQ4P_StepOp : CQ4P_Op<"step", [NoTerminator, SingleBlock, Symbol]> {
  let summary = "a model step: the sequence of dispatches it runs";
  let description = [{
    A compiled step of the model (`prefill` or `decode`, kernel_abi.h): its
    dispatches in order. `cq4p-export-steps` turns it into a C-ABI function
    over `cq4p_step_args` that hands each dispatch to the runtime's
    parallel-for. `max_rows` is the most rows the step takes (1 for
    decode); a step with `single_row` names the step that runs it when a
    call has one row.

    Example:

    ```mlir
    cq4p.step @decode attributes {max_rows = 1 : i64} {
      cq4p.dispatch @cq4p_gemv_512x512_gs128 {...}
    }
    ```
  }];
  let arguments = (ins SymbolNameAttr:$sym_name, I64Attr:$max_rows,
                       OptionalAttr<FlatSymbolRefAttr>:$single_row);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = "$sym_name attr-dict-with-keyword $body";
}

def CQ4P_DispatchOp : CQ4P_Op<"dispatch", [HasParent<"StepOp">]> {
  let summary = "one kernel call of a step, over a range of work items";
  let description = [{
    Calls the C-ABI entry of `kernel` (`cq4p-export-kernels`) over
    `count = work[0] * rows + work[1]` work items, which the runtime's
    parallel-for splits into ranges (`serial`: one call on the step's
    thread), as `split` says: by `rows`, or by a `range` the kernel takes
    as its `begin` and `end`. Each of the entry's pointer parameters is a
    `#cq4p.place` in `pointers`; each of its integer parameters a scalar
    in `scalars`: `rows` (the rows of this call: the step's, 1 with
    `single_row`, or the range's for a `rows` split), `position` (plus the
    range's first row for a `rows` split), `begin`, `end` (the range, for a
    `range` split) or `context`. With `grain`, every range but the last
    holds a multiple of `grain` work items: a kernel that works on blocks
    of rows (SME2's embedding outer products take 64) or of a range (the
    query heads that share a KV head, which attention walks the cache
    with together) gets whole blocks however many threads share the call.

    Example:

    ```mlir
    cq4p.dispatch @cq4p_gemv_512x512_gs128 <range> work [0, 8]
        pointers [#cq4p.place<binding, index = 3>,
                  #cq4p.place<workspace>,
                  #cq4p.place<workspace, offset = 1024>,
                  #cq4p.place<workspace, offset = 2048>]
        scalars [rows, begin, end]
    ```
  }];
  let arguments = (ins FlatSymbolRefAttr:$kernel,
                       CQ4P_DispatchSplitAttr:$split,
                       DenseI64ArrayAttr:$work, CQ4P_PlaceArrayAttr:$pointers,
                       CQ4P_DispatchScalarArrayAttr:$scalars, UnitAttr:$serial,
                       UnitAttr:$single_row, OptionalAttr<I64Attr>:$grain);
  let assemblyFormat = [{
    $kernel $split `work` $work `pointers` $pointers
    `scalars` custom<Scalars>($scalars) attr-dict
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Kernel-level ops: the compute contract, step by step, on buffers.
//===----------------------------------------------------------------------===//

def CQ4P_QuantizeActivationsOp : CQ4P_Op<"quantize_activations"> {
  let summary = "Hadamard activation transform and per-group int8 quantization";
  let description = [{
    Steps 1-2 of the compute contract (docs/FORMAT.md section 5) for the rows of
    `x` and the groups `[group_begin, group_end)`: per group, `w = x * isr *
    left` in fp32, the natural-order fast Walsh-Hadamard transform, one
    multiply by `1/sqrt(gs)`, `w *= right`, `z[j] = w[perm[j]]`; then
    `act_scales[row, g] = max(max|z| / 127, 1e-10)` and `act[row, k] =
    round_half_even(z / act_scale)` saturated to int8.

    Every backend runs this same op, so all of them see the same int8
    activations and produce identical int32 partials.

    Gated (`gated by %up` with a `gating` activation): the input is
    `act(x) * up` element by element, `x` the gate, formed as each group is
    loaded with `cq4p.glu`'s formula and rounding order, so the quantized
    bytes are those of a `cq4p.glu` row quantized afterwards (the gating
    of a dense MLP fused into its down projection's transform).

    Example:

    ```mlir
    cq4p.quantize_activations %x, %isr, %left, %right, %perm, %act, %scales,
        %g0, %g1 {group_size = 128 : i64}
        : memref<?x1536xf32>, memref<1536xf16>, memref<128xi8>, memref<128xi8>,
          memref<128xi32>, memref<?x1536xi8>, memref<?x12xf32>
    ```
  }];
  let arguments = (ins
    Arg<MemRefRankOf<[F32], [2]>, "", [MemRead]>:$x,
    Arg<Optional<MemRefRankOf<[F32], [2]>>, "", [MemRead]>:$up,
    Arg<MemRefRankOf<[F16], [1]>, "", [MemRead]>:$input_scale_recip,
    Arg<MemRefRankOf<[I8], [1]>, "", [MemRead]>:$left_signs,
    Arg<MemRefRankOf<[I8], [1]>, "", [MemRead]>:$right_signs,
    Arg<MemRefRankOf<[I32], [1]>, "", [MemRead]>:$permutation,
    Arg<MemRefRankOf<[I8], [2]>, "", [MemWrite]>:$act,
    Arg<MemRefRankOf<[F32], [2]>, "", [MemWrite]>:$act_scales,
    Index:$group_begin,
    Index:$group_end,
    I64Attr:$group_size,
    OptionalAttr<CQ4P_ActivationAttr>:$gating
  );
  let assemblyFormat = [{
    $x (`gated` `by` $up^ `:` type($up))? `,` $input_scale_recip `,` $left_signs `,` $right_signs `,`
    $permutation `,` $act `,` $act_scales `,` $group_begin `,` $group_end
    attr-dict `:` type($x) `,` type($input_scale_recip) `,` type($left_signs)
    `,` type($right_signs) `,` type($permutation) `,` type($act) `,`
    type($act_scales)
  }];
  let hasVerifier = 1;
}

def CQ4P_RotateQuantizeActivationsOp : CQ4P_Op<"rotate_quantize_activations"> {
  let summary = "orthogonal activation transform and per-group int8 quantization";
  let description = [{
    The orthogonal lm_head's activation transform (docs/FORMAT.md section 5):
    `a = x * isr`, `basis[j] = sum_k a[k] * rotation[k][j]` in fp32 (the
    file's `rotation_t[j][k]`, the same fp16 value: the runtime checks that
    rotation_t is rotation's transpose bit for bit; rotation's rows run
    along the outputs, so a vector of outputs reads one row), then
    the per-group int8 quantization of `cq4p.quantize_activations` over the
    virtual groups of 128, for the groups `[group_begin, group_end)`.

    Example:

    ```mlir
    cq4p.rotate_quantize_activations %x, %isr, %rotation, %act, %scales,
        %g0, %g1 {group_size = 128 : i64}
        : memref<?x1536xf32>, memref<1536xf16>, memref<1536x1536xf16>,
          memref<?x1536xi8>, memref<?x12xf32>
    ```
  }];
  let arguments = (ins
    Arg<MemRefRankOf<[F32], [2]>, "", [MemRead]>:$x,
    Arg<MemRefRankOf<[F16], [1]>, "", [MemRead]>:$input_scale_recip,
    Arg<MemRefRankOf<[F16], [2]>, "", [MemRead]>:$rotation,
    Arg<MemRefRankOf<[I8], [2]>, "", [MemWrite]>:$act,
    Arg<MemRefRankOf<[F32], [2]>, "", [MemWrite]>:$act_scales,
    Index:$group_begin,
    Index:$group_end,
    I64Attr:$group_size
  );
  let assemblyFormat = [{
    $x `,` $input_scale_recip `,` $rotation `,` $act `,` $act_scales `,`
    $group_begin `,` $group_end attr-dict `:` type($x) `,`
    type($input_scale_recip) `,` type($rotation) `,` type($act) `,`
    type($act_scales)
  }];
  let hasVerifier = 1;
}

def CQ4P_PanelMatmulOp : CQ4P_Op<"panel_matmul"> {
  let summary = "int32 panel partials then the fp32 rescale, over super-blocks";
  let description = [{
    Steps 3-4 of the compute contract for the super-blocks `[sb_begin,
    sb_end)` (64 output channels each) and every row of `act`: `y[row, n] =
    sum_g float(P[row, n, g]) * act_scales[row, g] * norm_panels[n, g]` with
    the exact int32 partials `P = sum_k act[row, g*gs + k] * cb_i8[idx(n,
    g*gs + k)]` read from the panel bytes. Channels past N are not written.

    `cq4p-tile-super-blocks` splits it into explicit `cq4p.panel_dot`
    (int32 partials) and `cq4p.rescale` (fp32) per super-block and group.

    Example:

    ```mlir
    cq4p.panel_matmul %panels, %norm_panels, %cb, %act, %scales, %y, %sb0, %sb1
        : memref<32x12x32x128xi8>, memref<32x12x64xf32>, memref<16xi8>,
          memref<1x1536xi8>, memref<1x12xf32>, memref<1x2048xf32>
    ```
  }];
  let arguments = (ins
    Arg<MemRefRankOf<[I8], [4]>, "", [MemRead]>:$panels,
    Arg<MemRefRankOf<[F32], [3]>, "", [MemRead]>:$norm_panels,
    Arg<MemRefRankOf<[I8], [1]>, "", [MemRead]>:$cb_i8,
    Arg<MemRefRankOf<[I8], [2]>, "", [MemRead]>:$act,
    Arg<MemRefRankOf<[F32], [2]>, "", [MemRead]>:$act_scales,
    Arg<MemRefRankOf<[F32], [2]>, "", [MemWrite]>:$y,
    Index:$sb_begin,
    Index:$sb_end
  );
  let assemblyFormat = [{
    $panels `,` $norm_panels `,` $cb_i8 `,` $act `,` $act_scales `,` $y `,`
    $sb_begin `,` $sb_end attr-dict `:` type($panels) `,` type($norm_panels)
    `,` type($cb_i8) `,` type($act) `,` type($act_scales) `,` type($y)
  }];
  let hasVerifier = 1;
}

def CQ4P_PanelDotOp : CQ4P_Op<"panel_dot"> {
  let summary = "exact int32 partials of a row tile over one super-block and group";
  let description = [{
    `partials[r, c] = sum_k act[row + r, g*gs + k] * cb_i8[idx(64*sb + c,
    g*gs + k)]` for the `R` rows of the tile (the static first dimension of
    `partials`) and the 64 channels of super-block `sb`, over group `g`:
    the integer dot of the compute contract, read straight from the panel
    bytes. Backends lower it to SDOT (NEON), SMOPA or multi-vector SDOT
    (SME2), or generic vector code (host).

    With `paired_activations`, `act` is a row tile packed for the NEON pair
    loop: its R rows hold, per 8 K values, their 4 even-indexed bytes and
    then their 4 odd-indexed ones, and `row` is 0.

    Example:

    ```mlir
    cq4p.panel_dot %panels, %cb, %act, %partials, %sb, %g, %row
        : memref<32x12x32x128xi8>, memref<16xi8>, memref<?x1536xi8>,
          memref<4x64xi32>
    ```
  }];
  let arguments = (ins
    Arg<MemRefRankOf<[I8], [4]>, "", [MemRead]>:$panels,
    Arg<MemRefRankOf<[I8], [1]>, "", [MemRead]>:$cb_i8,
    Arg<MemRefRankOf<[I8], [2]>, "", [MemRead]>:$act,
    Arg<MemRefRankOf<[I32], [2]>, "", [MemWrite]>:$partials,
    Index:$super_block,
    Index:$group,
    Index:$row,
    UnitAttr:$paired_activations
  );
  let assemblyFormat = [{
    $panels `,` $cb_i8 `,` $act `,` $partials `,` $super_block `,` $group `,`
    $row attr-dict `:` type($panels) `,` type($cb_i8) `,` type($act) `,`
    type($partials)
  }];
  let hasVerifier = 1;
}

def CQ4P_PanelPartialsOp : CQ4P_Op<"panel_partials"> {
  let summary = "exact int32 partials of a row tile over consecutive groups of a super-block";
  let description = [{
    `partials[j, r, c] = sum_k A[r, (group_begin + j)*gs + k] *
    cb_i8[idx(64*sb + c, (group_begin + j)*gs + k)]` for the G groups of
    `partials` (`[G][R][64]`) from `group_begin`: the int32 partials of
    `cq4p.panel_dot`, several groups at once, for a backend that computes
    them in a unit of its own and leaves the rescale to its caller (SME2:
    one streaming call, partials stored from ZA).

    The activations are either rows of `act` (`[rows][K]`, the R rows from
    `row`) or a packed tile (`[ng][gs/4][R][4]`, the SMOPA operand order,
    `row` unused).

    `rescale` records how `cq4p-tile-super-blocks` consumes the partials:
    `group_loop` when the op is followed by the loop over its groups that
    rescales each in order (`convert-cq4p-to-arm-sme` then rescales them
    straight out of ZA and erases the loop); without it they are stored.

    Example:

    ```mlir
    cq4p.panel_partials %panels, %cb, %act, %partials, %sb, %row, %g0
        {rescale = #cq4p.partials_rescale<group_loop>}
        : memref<32x12x32x128xi8>, memref<16xi8>, memref<1x1536xi8>,
          memref<12x1x64xi32>
    ```
  }];
  let arguments = (ins
    Arg<MemRefRankOf<[I8], [4]>, "", [MemRead]>:$panels,
    Arg<MemRefRankOf<[I8], [1]>, "", [MemRead]>:$cb_i8,
    Arg<MemRefRankOf<[I8], [2, 4]>, "", [MemRead]>:$act,
    Arg<MemRefRankOf<[I32], [3]>, "", [MemWrite]>:$partials,
    Index:$super_block,
    Index:$row,
    Index:$group_begin,
    OptionalAttr<CQ4P_PartialsRescaleAttr>:$rescale
  );
  let assemblyFormat = [{
    $panels `,` $cb_i8 `,` $act `,` $partials `,` $super_block `,` $row `,`
    $group_begin attr-dict `:` type($panels) `,` type($cb_i8) `,` type($act)
    `,` type($partials)
  }];
  let hasVerifier = 1;
}

def CQ4P_PackActivationTileOp : CQ4P_Op<"pack_activation_tile"> {
  let summary = "packs a row tile of int8 activations for outer products";
  let description = [{
    `packed[g, kg, r, kc] = act[row + r, g*gs + 4*kg + kc]` and
    `packed_scales[r, g] = act_scales[row + r, g]` for the R rows of the
    tile, zeros for rows past the end of `act`: the operand order of a
    4-way outer product (one load per kg-block gives the tile's 4 K values of
    every row), padded so that a partial tile needs no special case.

    Example:

    ```mlir
    cq4p.pack_activation_tile %act, %scales, %packed, %packed_scales, %row
        : memref<?x1536xi8>, memref<?x12xf32>, memref<12x32x16x4xi8>,
          memref<16x12xf32>
    ```
  }];
  let arguments = (ins
    Arg<MemRefRankOf<[I8], [2]>, "", [MemRead]>:$act,
    Arg<MemRefRankOf<[F32], [2]>, "", [MemRead]>:$act_scales,
    Arg<MemRefRankOf<[I8], [4]>, "", [MemWrite]>:$packed,
    Arg<MemRefRankOf<[F32], [2]>, "", [MemWrite]>:$packed_scales,
    Index:$row
  );
  let assemblyFormat = [{
    $act `,` $act_scales `,` $packed `,` $packed_scales `,` $row attr-dict `:`
    type($act) `,` type($act_scales) `,` type($packed) `,` type($packed_scales)
  }];
  let hasVerifier = 1;
}

def CQ4P_RescaleOp : CQ4P_Op<"rescale"> {
  let summary = "fp32 rescale of int32 partials, accumulated over groups";
  let description = [{
    `accum[r, c] += float(partials[r, c]) * act_scales[row + r, g] *
    norm_panels[sb, g, c]`: step 4 of the compute contract for one group,
    applied in group order so that every backend sums in the same order.

    Example:

    ```mlir
    cq4p.rescale %partials, %scales, %norm_panels, %accum, %sb, %g, %row
        : memref<4x64xi32>, memref<?x12xf32>, memref<32x12x64xf32>,
          memref<4x64xf32>
    ```
  }];
  let arguments = (ins
    Arg<MemRefRankOf<[I32], [2]>, "", [MemRead]>:$partials,
    Arg<MemRefRankOf<[F32], [2]>, "", [MemRead]>:$act_scales,
    Arg<MemRefRankOf<[F32], [3]>, "", [MemRead]>:$norm_panels,
    Arg<MemRefRankOf<[F32], [2]>, "", [MemRead, MemWrite]>:$accum,
    Index:$super_block,
    Index:$group,
    Index:$row
  );
  let assemblyFormat = [{
    $partials `,` $act_scales `,` $norm_panels `,` $accum `,` $super_block `,`
    $group `,` $row attr-dict `:` type($partials) `,` type($act_scales) `,`
    type($norm_panels) `,` type($accum)
  }];
  let hasVerifier = 1;
}

def CQ4P_DecodeEmbeddingOp : CQ4P_Op<"decode_embedding"> {
  let summary = "decodes embedding rows from orthogonal panels";
  let description = [{
    `out[i, j] = ((sum_c R[j][c] * cb[idx(ids[i], c)]) * norm[ids[i]]) * isr[j]`
    for every id (the sum a chain of fused multiply-adds in c order, whose
    fp16 x fp16 products are exact), from the panel bytes, the fp16 rotation (read as the
    file's rotation_t, `R[j][c] = rotation_t[c][j]`, whose rows run along
    the outputs), the raw fp16 codebook and the unfolded fp16 norms
    (docs/FORMAT.md section 5).

    Example:

    ```mlir
    cq4p.decode_embedding %panels, %norms, %codebook, %rotation_t, %isr, %ids, %out
        : memref<4096x12x32x128xi8>, memref<262144x12xf16>, memref<16xf16>,
          memref<1536x1536xf16>, memref<1536xf16>, memref<?xi64>,
          memref<?x1536xf32>
    ```
  }];
  let arguments = (ins
    Arg<MemRefRankOf<[I8], [4]>, "", [MemRead]>:$panels,
    Arg<MemRefRankOf<[F16], [2]>, "", [MemRead]>:$norms,
    Arg<MemRefRankOf<[F16], [1]>, "", [MemRead]>:$codebook,
    Arg<MemRefRankOf<[F16], [2]>, "", [MemRead]>:$rotation_t,
    Arg<MemRefRankOf<[F16], [1]>, "", [MemRead]>:$input_scale_recip,
    Arg<MemRefRankOf<[I64], [1]>, "", [MemRead]>:$ids,
    Arg<MemRefRankOf<[F32], [2]>, "", [MemWrite]>:$out
  );
  let assemblyFormat = [{
    $panels `,` $norms `,` $codebook `,` $rotation_t `,` $input_scale_recip `,`
    $ids `,` $out attr-dict `:` type($panels) `,` type($norms) `,`
    type($codebook) `,` type($rotation_t) `,` type($input_scale_recip) `,`
    type($ids) `,` type($out)
  }];
  let hasVerifier = 1;
}

def CQ4P_AttentionOp : CQ4P_Op<"attention"> {
  let summary = "causal grouped-query attention of query heads [head_begin, head_end)";
  let description = [{
    The one attention kernel of models and single tensors, on buffers, for
    the query heads `[head_begin, head_end)` (the unit the runtime's threads
    share): scores in fp32, a max-subtracted softmax, then the weighted sum
    of the values. Query row `i` sits at position `position + i` (0 without
    `at`: the keys are the queries' own) and sees the keys `j` with
    `j <= position + i` and, for a window W > 0, `j > position + i - W`;
    the keys and values have at least `position + rows(q)` rows (a layer's
    KV cache, fp32 or fp16, in a model). Each target lowers it its own way:
    SME2 prefill as FMOPA tiles, the rest as 16-lane vector code.

    Example:

    ```mlir
    cq4p.attention %q, %k, %v, %out, %h0, %h1 {num_heads = 8 : i64,
        num_kv_heads = 4 : i64, head_dim = 64 : i64, window = 0 : i64,
        scale = 0.125 : f32}
        : memref<?x512xf32>, memref<?x256xf32>, memref<?x256xf32>, memref<?x512xf32>
    // Over a KV cache: the new rows at %pos.
    cq4p.attention %q, %kc, %vc, %out, %h0, %h1 at %pos {num_heads = 8 : i64,
        num_kv_heads = 4 : i64, head_dim = 64 : i64, window = 0 : i64,
        scale = 0.125 : f32}
        : memref<?x512xf32>, memref<?x256xf16>, memref<?x256xf16>, memref<?x512xf32>
    ```
  }];
  let arguments = (ins
    Arg<MemRefRankOf<[F32], [2]>, "", [MemRead]>:$q,
    Arg<MemRefRankOf<[F32, F16], [2]>, "", [MemRead]>:$k,
    Arg<MemRefRankOf<[F32, F16], [2]>, "", [MemRead]>:$v,
    Arg<MemRefRankOf<[F32], [2]>, "", [MemWrite]>:$out,
    Index:$head_begin, Index:$head_end, Optional<Index>:$position,
    I64Attr:$num_heads, I64Attr:$num_kv_heads, I64Attr:$head_dim,
    I64Attr:$window, F32Attr:$scale);
  let assemblyFormat = [{
    $q `,` $k `,` $v `,` $out `,` $head_begin `,` $head_end (`at` $position^)?
    attr-dict `:` type($q) `,` type($k) `,` type($v) `,` type($out)
  }];
  let hasVerifier = 1;
}

#endif // CQ4P_DIALECT_CQ4P_IR_CQ4POPS_TD

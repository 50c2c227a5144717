/*===- cq4p/kernel_abi.h - the ABI of compiled kernel libraries -----------===*
 *
 * A kernel library (cq4p-compile's output) exports one symbol,
 * `cq4p_kernel_table`, describing every kernel in it. Kernels are plain
 * C-ABI functions over bare pointers and sizes: reentrant, no global state,
 * no allocation. The runtime checks the table (ABI version, op, shapes,
 * target features) against the bundle and the CPU before calling anything.
 *
 * A linear layer y[M, N] = x[M, K] * W^T runs as two kernels:
 *   1. quantize: the activation transform and per-group int8 quantization
 *      (docs/FORMAT.md section 5, steps 1-2) of rows x groups [group_begin,
 *      group_end); shared by every backend, so all backends see the same
 *      int8 activations;
 *   2. matmul: int32 partials over the panels, then the fp32 rescale
 *      (steps 3-4), for super-blocks [sb_begin, sb_end) of 64 channels.
 * The runtime's threads split the groups of (1), then the super-blocks of
 * (2); results do not depend on how the ranges are split.
 *
 *===----------------------------------------------------------------------===*/

#ifndef CQ4P_KERNEL_ABI_H
#define CQ4P_KERNEL_ABI_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Version 3 added the model steps (cq4p_model_desc below); version 4 lays
 * the KV cache out per layer (each layer's own width, layers that share
 * another's cache have none) and adds the step state (LFM2's convolution
 * state). A library of another version is refused with a message naming
 * both versions. */
#define CQ4P_KERNEL_ABI_VERSION 4u

typedef enum cq4p_kernel_op {
  CQ4P_KERNEL_QUANTIZE_HADAMARD = 1,   /* cq4p_quantize_fn */
  CQ4P_KERNEL_QUANTIZE_ORTHOGONAL = 2, /* cq4p_quantize_fn (via rotation_t) */
  CQ4P_KERNEL_MATMUL = 3,              /* cq4p_matmul_fn */
  CQ4P_KERNEL_EMBEDDING = 4,           /* cq4p_embedding_fn */
  CQ4P_KERNEL_ATTENTION = 5            /* cq4p_attention_fn */
} cq4p_kernel_op;

typedef enum cq4p_target {
  CQ4P_TARGET_HOST = 1,
  CQ4P_TARGET_AARCH64_NEON = 2,
  CQ4P_TARGET_AARCH64_SME2 = 3
} cq4p_target;

/* CPU features a kernel needs (cq4p_kernel_desc.features). */
#define CQ4P_FEATURE_AARCH64_DOTPROD (1ull << 0)
#define CQ4P_FEATURE_AARCH64_I8MM (1ull << 1)
#define CQ4P_FEATURE_AARCH64_SME2 (1ull << 2)
#define CQ4P_FEATURE_X86_SSSE3 (1ull << 8)
#define CQ4P_FEATURE_X86_AVX2 (1ull << 9)
#define CQ4P_FEATURE_X86_AVX512BW (1ull << 10)
#define CQ4P_FEATURE_X86_AVX512VNNI (1ull << 11)
#define CQ4P_FEATURE_X86_AVX512VBMI (1ull << 12)
/* The x86-64 micro-architecture levels, each a whole instruction set the
 * code generator may use anywhere: v2 (SSE4.2, POPCNT, CX16), v3 (AVX2,
 * FMA, F16C, BMI1/2, LZCNT, MOVBE), v4 (AVX-512 F, BW, CD, DQ, VL). */
#define CQ4P_FEATURE_X86_64_V2 (1ull << 13)
#define CQ4P_FEATURE_X86_64_V3 (1ull << 14)
#define CQ4P_FEATURE_X86_64_V4 (1ull << 15)
#define CQ4P_FEATURE_X86_AVXVNNI (1ull << 16)

/* Every feature bit with the name messages, cq4p-compile and the runtime
 * give it: X(bit, name). The x86 names are also those the compilers' CPU
 * checks (__builtin_cpu_supports) take. */
#define CQ4P_AARCH64_FEATURES(X)                                              \
  X(CQ4P_FEATURE_AARCH64_DOTPROD, "dotprod")                                  \
  X(CQ4P_FEATURE_AARCH64_I8MM, "i8mm")                                        \
  X(CQ4P_FEATURE_AARCH64_SME2, "sme2")
#define CQ4P_X86_FEATURES(X)                                                  \
  X(CQ4P_FEATURE_X86_SSSE3, "ssse3")                                          \
  X(CQ4P_FEATURE_X86_AVX2, "avx2")                                            \
  X(CQ4P_FEATURE_X86_AVX512BW, "avx512bw")                                    \
  X(CQ4P_FEATURE_X86_AVX512VNNI, "avx512vnni")                                \
  X(CQ4P_FEATURE_X86_AVX512VBMI, "avx512vbmi")                                \
  X(CQ4P_FEATURE_X86_64_V2, "x86-64-v2")                                      \
  X(CQ4P_FEATURE_X86_64_V3, "x86-64-v3")                                      \
  X(CQ4P_FEATURE_X86_64_V4, "x86-64-v4")                                      \
  X(CQ4P_FEATURE_X86_AVXVNNI, "avxvnni")
#define CQ4P_FEATURES(X) CQ4P_AARCH64_FEATURES(X) CQ4P_X86_FEATURES(X)

/* The bits each x86-64 level implies (a level includes the ones below). */
#define CQ4P_X86_64_V2_FEATURES                                               \
  (CQ4P_FEATURE_X86_64_V2 | CQ4P_FEATURE_X86_SSSE3)
#define CQ4P_X86_64_V3_FEATURES                                               \
  (CQ4P_X86_64_V2_FEATURES | CQ4P_FEATURE_X86_64_V3 | CQ4P_FEATURE_X86_AVX2)
#define CQ4P_X86_64_V4_FEATURES                                               \
  (CQ4P_X86_64_V3_FEATURES | CQ4P_FEATURE_X86_64_V4 |                         \
   CQ4P_FEATURE_X86_AVX512BW)

/* The x86-64 instruction set levels a host library's code variants are
 * compiled for (cq4p-compile --host-cpu, cq4p_kernel_variant.name,
 * CQ4P_HOST_LEVEL), narrowest first: X(name, LLVM CPU, LLVM features added
 * to the CPU's, CQ4P_FEATURE_* bits the code needs, in the default set of
 * levels of a library compiled without --host-cpu). */
#define CQ4P_X86_LEVELS(X)                                                    \
  X("x86-64", "x86-64", "", 0, 0)                                             \
  X("x86-64-v2", "x86-64-v2", "", CQ4P_X86_64_V2_FEATURES, 0)                 \
  X("x86-64-v3", "x86-64-v3", "", CQ4P_X86_64_V3_FEATURES, 1)                 \
  X("x86-64-v3+avxvnni", "x86-64-v3", "+avxvnni",                             \
    CQ4P_X86_64_V3_FEATURES | CQ4P_FEATURE_X86_AVXVNNI, 1)                    \
  X("x86-64-v4+avx512vnni", "x86-64-v4", "+avx512vnni",                       \
    CQ4P_X86_64_V4_FEATURES | CQ4P_FEATURE_X86_AVX512VNNI, 1)

/*===----------------------------------------------------------------------===*
 * The structs the compiled library and the runtime share, each field stated
 * once: X(C type, name, LLVM kind), in order, the kind (PTR, I32, I64) being
 * the field's type in the compiler's identified LLVM struct
 * (include/cq4p/Codegen/KernelAbi.h builds those types from these lists and
 * checks every offset against the C layout with static_assert).
 *===----------------------------------------------------------------------===*/

#define CQ4P_ABI_DECLARE_FIELD(type, name, kind) type name;

/* The regions of one tensor file a kernel reads, filled by the runtime from
 * the mapping (zero-copy). cb_i8 is the int8 codebook the runtime derives
 * once from the stored fp16 codebook (docs/FORMAT.md section 4): 16 bytes. */
#define CQ4P_WEIGHT_VIEW_FIELDS(X)                                            \
  X(const uint8_t *, panels, PTR)            /* [SB][ng][gs/4][128] */        \
  X(const float *, norm_panels, PTR)         /* [SB][ng][64] */               \
  X(const int8_t *, cb_i8, PTR)              /* [16] */                       \
  X(const uint16_t *, codebook, PTR)         /* fp16 [16] */                  \
  X(const uint16_t *, input_scale_recip, PTR) /* fp16 [K] */                  \
  X(const int8_t *, left_signs, PTR)         /* [gs] (Hadamard) */            \
  X(const int8_t *, right_signs, PTR)        /* [gs] (Hadamard) */            \
  X(const uint32_t *, permutation, PTR)      /* [gs] (Hadamard) */            \
  X(const uint16_t *, rotation, PTR)         /* fp16 [K][K] (orthogonal) */   \
  X(const uint16_t *, rotation_t, PTR)       /* fp16 [K][K] (orthogonal) */   \
  X(const uint16_t *, norms, PTR)            /* fp16 [N][ng], unfolded */

typedef struct cq4p_weight_view {
  CQ4P_WEIGHT_VIEW_FIELDS(CQ4P_ABI_DECLARE_FIELD)
} cq4p_weight_view;

/* x: [rows][K] fp32; act: [rows][K] int8; act_scales: [rows][ng] fp32. */
typedef void (*cq4p_quantize_fn)(const cq4p_weight_view *weight,
                                 const float *x, int8_t *act,
                                 float *act_scales, int64_t rows,
                                 int64_t group_begin, int64_t group_end);

/* act, act_scales as above; y: [rows][N] fp32 (channels of the given
 * super-blocks written, others untouched). */
typedef void (*cq4p_matmul_fn)(const cq4p_weight_view *weight,
                               const int8_t *act, const float *act_scales,
                               float *y, int64_t rows, int64_t sb_begin,
                               int64_t sb_end);

/* Decodes embedding rows `ids[i]` (orthogonal panels) into out[i][K]. */
typedef void (*cq4p_embedding_fn)(const cq4p_weight_view *weight,
                                  const int64_t *ids, float *out,
                                  int64_t count);

/* Causal prefill attention with grouped-query heads (FORMAT-independent):
 * q, out: [seq][heads * head_dim]; k, v: [seq][kv_heads * head_dim], fp32.
 * Query head h attends with kv head h / (heads / kv_heads) to keys
 * j <= i (and j > i - window when window > 0). Heads [head_begin,
 * head_end) are computed. */
typedef void (*cq4p_attention_fn)(const float *q, const float *k,
                                  const float *v, float *out, int64_t seq,
                                  int64_t head_begin, int64_t head_end);

/* For MATMUL kernels `orthogonal` is ignored (panel bytes mean the same
 * whatever rotated the weights); quantize kernels record n = 1 (they do not
 * depend on N); ATTENTION kernels record n = heads, k = head_dim,
 * group_size = kv_heads and window. */
#define CQ4P_KERNEL_DESC_FIELDS(X)                                            \
  X(const char *, name, PTR)                                                  \
  X(uint32_t, op, I32)         /* cq4p_kernel_op */                           \
  X(uint32_t, target, I32)     /* cq4p_target */                              \
  X(uint64_t, features, I64)   /* CQ4P_FEATURE_* the code needs */            \
  X(uint64_t, n, I64)          /* output channels (N) */                      \
  X(uint64_t, k, I64)          /* input features (K) */                       \
  X(uint32_t, group_size, I32)                                                \
  X(uint32_t, orthogonal, I32)                                                \
  X(uint32_t, min_rows, I32)   /* rows the kernel accepts: [min, max] */      \
  X(uint32_t, max_rows, I32)   /* 0: no upper bound */                        \
  X(const void *, entry, PTR)  /* the function, of the op's type */           \
  X(uint32_t, window, I32)     /* ATTENTION: sliding window (0: none) */      \
  X(uint32_t, reserved, I32)   /* 0 */

typedef struct cq4p_kernel_desc {
  CQ4P_KERNEL_DESC_FIELDS(CQ4P_ABI_DECLARE_FIELD)
} cq4p_kernel_desc;

#define CQ4P_KERNEL_TABLE_FIELDS(X)                                           \
  X(uint32_t, abi_version, I32) /* CQ4P_KERNEL_ABI_VERSION */                 \
  X(uint32_t, count, I32)                                                     \
  X(const cq4p_kernel_desc *, kernels, PTR)

typedef struct cq4p_kernel_table {
  CQ4P_KERNEL_TABLE_FIELDS(CQ4P_ABI_DECLARE_FIELD)
} cq4p_kernel_table;

#define CQ4P_KERNEL_TABLE_SYMBOL "cq4p_kernel_table"

/* Optional, in a library of any ABI version from 3 on: the model_digest
 * (manifest.json) of the bundle the library was compiled for, as a
 * NUL-terminated array `const char cq4p_bundle_digest[]`. cq4p-compile
 * records it when it knows the bundle (a model.mlir carries its digest;
 * --bundle DIR names one), and the runtime then refuses the library for a
 * bundle of another digest. A library without it (compiled for no bundle in
 * particular, or by an older cq4p-compile) serves any bundle whose tensors
 * have its kernels' shapes. Optional so that the table's layout, and with it
 * every existing library, stays valid. */
#define CQ4P_BUNDLE_DIGEST_SYMBOL "cq4p_bundle_digest"
/* A longer digest is refused (convert writes a sha256: 64 hex digits). */
#define CQ4P_MAX_BUNDLE_DIGEST_BYTES 256

/*===----------------------------------------------------------------------===*
 * Code variants (optional, in a library of ABI version 4).
 *
 * An x86-64 host library holds the same kernels and model steps compiled
 * for one or several instruction set levels ("x86-64-v3",
 * "x86-64-v3+avxvnni", "x86-64-v4+avx512vnni"; cq4p-compile --target=host
 * compiles these three unless --host-cpu pins one). It then exports
 * `cq4p_kernel_variants` (a cq4p_kernel_variants), listing each variant's
 * level, the CQ4P_FEATURE_* bits it needs, and its kernel table and model
 * steps, narrowest first. The runtime runs the last variant whose features
 * the CPU has (or the one the caller names: CQ4P_HOST_LEVEL), and checks
 * its table and steps exactly as it checks the unvaried symbols.
 *
 * The first variant is also exported under the names above
 * (`cq4p_kernel_table`, `cq4p_model_steps`), so a runtime that knows no
 * variants loads it; the others' symbols are hidden, reached through the
 * variant table only. A library without `cq4p_kernel_variants` (older,
 * AArch64) is one variant, its table and steps those names. The variant
 * table has a version of its own: a runtime refuses a table of another.
 *===----------------------------------------------------------------------===*/

#define CQ4P_KERNEL_VARIANTS_SYMBOL "cq4p_kernel_variants"
#define CQ4P_KERNEL_VARIANTS_VERSION 1u
/* More variants than any library holds: a count above this is corrupt. */
#define CQ4P_MAX_KERNEL_VARIANTS 16u

struct cq4p_model_desc;

#define CQ4P_KERNEL_VARIANT_FIELDS(X)                                         \
  X(const char *, name, PTR)   /* the level (CQ4P_X86_LEVELS' name) */        \
  X(uint64_t, features, I64)   /* CQ4P_FEATURE_* all of it needs */           \
  X(const cq4p_kernel_table *, kernels, PTR)                                  \
  X(const struct cq4p_model_desc *, model, PTR) /* null: kernels only */

typedef struct cq4p_kernel_variant {
  CQ4P_KERNEL_VARIANT_FIELDS(CQ4P_ABI_DECLARE_FIELD)
} cq4p_kernel_variant;

#define CQ4P_KERNEL_VARIANTS_FIELDS(X)                                        \
  X(uint32_t, version, I32)    /* CQ4P_KERNEL_VARIANTS_VERSION */             \
  X(uint32_t, count, I32)      /* 1..CQ4P_MAX_KERNEL_VARIANTS */              \
  X(const cq4p_kernel_variant *, variants, PTR) /* narrowest first */

typedef struct cq4p_kernel_variants {
  CQ4P_KERNEL_VARIANTS_FIELDS(CQ4P_ABI_DECLARE_FIELD)
} cq4p_kernel_variants;

/*===----------------------------------------------------------------------===*
 * Model steps (ABI version 4).
 *
 * A library compiled from a bundle's model graph (model.mlir with a
 * `@forward` function) also exports `cq4p_model_steps` (a cq4p_model_desc;
 * not `cq4p_model`, the C API's handle type in cq4p.h), describing two compiled
 * step functions:
 *   - prefill: `rows` tokens (1 <= rows <= prefill_chunk) at positions
 *     [position, position + rows): appends their keys and values to the KV
 *     cache and writes the logits of the last of them;
 *   - decode: the same for rows == 1 (GEMV kernels throughout).
 * The compiler decides the sequence of kernel calls. Each parallel region of
 * a step is a task function over a range of work items (super-blocks,
 * groups, heads or rows) that the step hands to the runtime's parallel-for;
 * the runtime splits [0, count) into ranges over its threads as it likes
 * (results do not depend on the split) and returns when all have run.
 *===----------------------------------------------------------------------===*/

#define CQ4P_MODEL_SYMBOL "cq4p_model_steps"

/* What a binding is: the runtime fills cq4p_step_args.bindings[i] with a
 * `const cq4p_weight_view *` for a CQ4 binding and with the tensor file's
 * data region (its elements, row-major) for a dense one. */
typedef enum cq4p_binding_kind {
  CQ4P_BINDING_CQ4 = 1,  /* packed-panel CQ4 tensor file */
  CQ4P_BINDING_FP16 = 2, /* dense FP16 tensor file */
  CQ4P_BINDING_FP32 = 3  /* dense FP32 tensor file */
} cq4p_binding_kind;

#define CQ4P_MODEL_BINDING_FIELDS(X)                                          \
  X(const char *, tensor, PTR) /* the bundle tensor's name (manifest) */      \
  X(uint32_t, kind, I32)       /* cq4p_binding_kind */                        \
  X(uint32_t, orthogonal, I32) /* CQ4: 1 for an orthogonal rotation */        \
  X(uint64_t, n, I64)          /* CQ4: N; dense: element count */             \
  X(uint64_t, k, I64)          /* CQ4: K; dense: 0 */                         \
  X(uint32_t, group_size, I32) /* CQ4 */                                      \
  X(uint32_t, reserved, I32)   /* 0 */

typedef struct cq4p_model_binding {
  CQ4P_MODEL_BINDING_FIELDS(CQ4P_ABI_DECLARE_FIELD)
} cq4p_model_binding;

struct cq4p_step_args;

/* One parallel region's work items [begin, end). */
typedef void (*cq4p_task_fn)(const struct cq4p_step_args *args, int64_t begin,
                             int64_t end);

/* Supplied by the runtime: runs task over [0, count), split into ranges
 * across threads, and returns when every range has finished (their writes
 * visible to the caller). `pool` is cq4p_step_args.pool. */
typedef void (*cq4p_parallel_for_fn)(void *pool, cq4p_task_fn task,
                                     const struct cq4p_step_args *args,
                                     int64_t count);

/* kv_cache: context * kv_position_bytes bytes, zeroed: the keys then the
 * values of each layer with a cache, each [context][its width] of kv_dtype
 * elements, in the order the library's steps lay them out. state:
 * state_bytes, zeroed when the model is created: what steps carry besides
 * the KV cache (LFM2's convolution rows); a step at position 0 does not
 * read it. */
#define CQ4P_STEP_ARGS_FIELDS(X)                                              \
  X(const void *const *, bindings, PTR) /* see cq4p_binding_kind */           \
  X(void *, kv_cache, PTR)                                                    \
  X(void *, workspace, PTR)    /* workspace_bytes, 64-byte aligned */         \
  X(const int64_t *, ids, PTR) /* [rows] token ids, each < vocab */           \
  X(float *, logits, PTR)      /* [vocab]: the last row's logits */           \
  X(int64_t, rows, I64)        /* tokens in this step */                      \
  X(int64_t, position, I64)    /* sequence position of ids[0] */              \
  X(int64_t, context, I64)     /* KV capacity; position + rows <= context */  \
  X(cq4p_parallel_for_fn, parallel_for, PTR)                                  \
  X(void *, pool, PTR)                                                        \
  X(void *, state, PTR)

typedef struct cq4p_step_args {
  CQ4P_STEP_ARGS_FIELDS(CQ4P_ABI_DECLARE_FIELD)
} cq4p_step_args;

typedef void (*cq4p_step_fn)(const cq4p_step_args *args);

typedef enum cq4p_kv_dtype {
  CQ4P_KV_F32 = 1,
  CQ4P_KV_F16 = 2
} cq4p_kv_dtype;

#define CQ4P_MODEL_DESC_FIELDS(X)                                             \
  X(uint32_t, abi_version, I32)   /* CQ4P_KERNEL_ABI_VERSION */               \
  X(uint32_t, binding_count, I32)                                             \
  X(const cq4p_model_binding *, bindings, PTR)                                \
  X(const char *, architecture, PTR) /* "llama", "qwen3", "gemma3" */         \
  X(const char *, digest, PTR)    /* the bundle's model_digest */             \
  X(uint64_t, vocab, I64)                                                     \
  X(uint64_t, hidden, I64)                                                    \
  X(uint64_t, layers, I64)                                                    \
  X(uint64_t, kv_width, I64)      /* the widest layer's kv_heads*head_dim */  \
  X(uint32_t, kv_dtype, I32)      /* cq4p_kv_dtype */                         \
  X(uint32_t, target, I32)        /* cq4p_target */                           \
  X(uint64_t, features, I64)      /* CQ4P_FEATURE_* the steps need */         \
  X(uint64_t, prefill_chunk, I64) /* most rows one prefill call takes */      \
  X(uint64_t, workspace_bytes, I64) /* workspace one step call needs */       \
  X(cq4p_step_fn, prefill, PTR)   /* 1 <= rows <= prefill_chunk */            \
  X(cq4p_step_fn, decode, PTR)    /* rows == 1 */                             \
  X(uint64_t, kv_position_bytes, I64) /* KV bytes per position */             \
  X(uint64_t, state_bytes, I64)   /* cq4p_step_args.state's size (0: none) */

typedef struct cq4p_model_desc {
  CQ4P_MODEL_DESC_FIELDS(CQ4P_ABI_DECLARE_FIELD)
} cq4p_model_desc;

/* Every shared struct, for the layout checks: X(struct, its field list). */
#define CQ4P_ABI_STRUCTS(X)                                                   \
  X(cq4p_weight_view, CQ4P_WEIGHT_VIEW_FIELDS)                                \
  X(cq4p_kernel_desc, CQ4P_KERNEL_DESC_FIELDS)                                \
  X(cq4p_kernel_table, CQ4P_KERNEL_TABLE_FIELDS)                              \
  X(cq4p_kernel_variant, CQ4P_KERNEL_VARIANT_FIELDS)                          \
  X(cq4p_kernel_variants, CQ4P_KERNEL_VARIANTS_FIELDS)                        \
  X(cq4p_model_binding, CQ4P_MODEL_BINDING_FIELDS)                            \
  X(cq4p_step_args, CQ4P_STEP_ARGS_FIELDS)                                    \
  X(cq4p_model_desc, CQ4P_MODEL_DESC_FIELDS)

#ifdef __cplusplus
}
#endif

#endif /* CQ4P_KERNEL_ABI_H */

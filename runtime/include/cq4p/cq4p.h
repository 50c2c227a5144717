/*===- cq4p/cq4p.h - the runtime's C API -----------------------------------===*
 *
 * The C ABI of the cq4p runtime: opening and validating CQ4 tensor files
 * (zero-copy views of every region), the reference panel encoder, and whole
 * models (a bundle run by a model library's compiled steps).
 * Used from C, from other languages, and from Python through ctypes
 * (python/cq4p/native/runtime.py). Errors are values: every call that can fail
 * returns a cq4p_code and writes a message naming the file, the field, what
 * was expected and what was found into the caller's buffer.
 *
 * The runtime is three libraries (runtime/CMakeLists.txt), and each section
 * below names the one its functions are in:
 *   cq4p_core     tensor files, bundles, the panel encoder, models and
 *                 sampling, the layout table: a program that runs token ids
 *                 links this one alone (no tokenizer code, no PCRE2);
 *   cq4p_text     tokenizers, text generation and chat (links cq4p_core,
 *                 PCRE2, utf8proc);
 *   cq4p_convert  the converter's native quantizer and rotation.
 * libcq4p_runtime.so (and libcq4p_runtime.a) holds all three.
 *
 *===----------------------------------------------------------------------===*/

#ifndef CQ4P_CQ4P_H
#define CQ4P_CQ4P_H

#include <stddef.h>
#include <stdint.h>

#include "cq4p/format.h"

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define CQ4P_API __declspec(dllexport)
#else
#define CQ4P_API __attribute__((visibility("default")))
#endif

/* Status codes. */
typedef enum cq4p_code {
  CQ4P_OK = 0,
  CQ4P_ERROR_IO = 1,          /* cannot open, stat or map the file */
  CQ4P_ERROR_FORMAT = 2,      /* the bytes do not follow docs/FORMAT.md */
  CQ4P_ERROR_ARGUMENT = 3,    /* a caller's argument is invalid */
  CQ4P_ERROR_UNSUPPORTED = 4, /* valid, but not a layout this call handles */
  CQ4P_ERROR_NOT_FOUND = 5,   /* a bundle's tensor or file is missing */
  CQ4P_ERROR_BUSY = 6         /* the model is in another call (see below) */
} cq4p_code;

/* Data layouts of a CQ4 tensor file. */
typedef enum cq4p_layout {
  CQ4P_LAYOUT_ROW_MAJOR = 0,       /* legacy: [N][num_groups][gs/2] nibbles */
  CQ4P_LAYOUT_INTERLEAVED_4ROW = 1, /* legacy: [N/4][num_groups][gs/8][4][4] */
  CQ4P_LAYOUT_PANELS = 2,          /* [SB][num_groups][gs/4][128] */
  CQ4P_LAYOUT_DENSE = 3            /* not CQ: INT8/FP16/FP32 elements */
} cq4p_layout;

/* The regions of a tensor file (docs/FORMAT.md section 4). */
typedef enum cq4p_region {
  CQ4P_REGION_DATA = 0,              /* panels, legacy indices or dense elements */
  CQ4P_REGION_CODEBOOK = 1,          /* fp16[16] */
  CQ4P_REGION_INPUT_SCALE = 2,       /* fp16[K] */
  CQ4P_REGION_INPUT_SCALE_RECIP = 3, /* fp16[K] */
  CQ4P_REGION_NORMS = 4,             /* fp16, unfolded (layout as stored) */
  CQ4P_REGION_NORM_PANELS = 5,       /* fp32[SB][num_groups][64] (panels only) */
  CQ4P_REGION_LEFT_SIGNS = 6,        /* int8[gs] (Hadamard) */
  CQ4P_REGION_RIGHT_SIGNS = 7,       /* int8[gs] (Hadamard) */
  CQ4P_REGION_PERMUTATION = 8,       /* u32[gs] (Hadamard) */
  CQ4P_REGION_ROTATION = 9,          /* fp16[K][K] (orthogonal) */
  CQ4P_REGION_ROTATION_T = 10,       /* fp16[K][K] (orthogonal panels) */
  CQ4P_REGION_COUNT = 11
} cq4p_region;

/* What a validated header says. */
typedef struct cq4p_tensor_info {
  uint32_t flags;
  uint32_t alignment;
  uint32_t precision; /* enum cq4p_precision */
  uint32_t ndim;
  uint64_t dims[8];
  uint32_t group_size;
  uint32_t num_groups;
  uint32_t layout;    /* enum cq4p_layout */
  uint32_t orthogonal;
  uint64_t header_bytes;
  uint64_t scales_offset;
  uint64_t scales_bytes;
  uint64_t data_offset;
  uint64_t data_bytes;
  uint64_t file_bytes;
} cq4p_tensor_info;

/* ---- cq4p_core: tensor files, bundles and the panel encoder ---- */

typedef struct cq4p_tensor cq4p_tensor;

/* Maps and validates a tensor file read-only. On success *out owns the
 * mapping until cq4p_tensor_close. */
CQ4P_API int cq4p_tensor_open(const char *path, cq4p_tensor **out, char *error,
                              size_t error_size);
CQ4P_API void cq4p_tensor_close(cq4p_tensor *tensor);
CQ4P_API void cq4p_tensor_get_info(const cq4p_tensor *tensor,
                                   cq4p_tensor_info *info);
/* The bytes of a region inside the mapping (NULL and 0 when the file has
 * no such region). */
CQ4P_API const void *cq4p_tensor_region(const cq4p_tensor *tensor,
                                        int region, uint64_t *bytes);
/* Whether the mapping is still the file's: an error naming the file and
 * both sizes when it was truncated while mapped (a read of a region past the
 * file's new end then finds zeros instead of killing the process with
 * SIGBUS, docs/TRUST.md) or its size changed since it was opened. Call it
 * after reading regions to know the bytes read were the file's. */
CQ4P_API int cq4p_tensor_check(const cq4p_tensor *tensor, char *error,
                               size_t error_size);

/* Checks every content rule of docs/FORMAT.md (sections 1, 3 and 4) that
 * opening leaves out (zero
 * padding, finite values, norm_panels, index 0 past N, canonical indices,
 * rotation_t): one full pass over the file, where opening reads only what it
 * must. CQ4P_OK, or an error with its message in `error`. */
CQ4P_API int cq4p_tensor_verify(const cq4p_tensor *tensor, char *error,
                                size_t error_size);
/* Opens the bundle in bundle_dir (manifest.json and every tensor, as
 * cq4p_model_open does) and verifies every tensor's content likewise, then
 * its integrity: each file's sha256 against its manifest entry's, and the
 * model_digest recomputed from the manifest's config and tensor list
 * against the recorded one (docs/TRUST.md). A file swapped for another,
 * even of the same shape, or a config edited after conversion fails,
 * naming the tensor or the digest and both values. A full pass over every
 * file: opening (cq4p_model_open) checks headers and sizes only. File by
 * file: each file's pages leave the process once it is checked, so the
 * resident memory it adds is the largest file's, not the bundle's. */
CQ4P_API int cq4p_bundle_verify(const char *bundle_dir, char *error,
                                size_t error_size);
/* Reads bundle_dir/manifest.json and checks it as cq4p_model_open does (its
 * size, JSON, format, version and every entry's fields), opening no tensor
 * file: the one manifest validator, which the Python package calls when the
 * runtime is built. */
CQ4P_API int cq4p_manifest_check(const char *bundle_dir, char *error,
                                 size_t error_size);

/* The reference panel encoder (docs/FORMAT.md section 3).
 *
 * source: the indices in `source_layout` (CQ4P_LAYOUT_ROW_MAJOR or
 *   CQ4P_LAYOUT_INTERLEAVED_4ROW) with `source_group_size`, exactly as the
 *   data region of a legacy file holds them.
 * norms_f16: the stored fp16 norms, [N][K / source_group_size] row-major
 *   (already de-interleaved for an interleaved source).
 * codebook_f16: the 16 stored fp16 levels.
 * panel_group_size: the panel file's group size; source_group_size must be a
 *   multiple of it (orthogonal tensors: source K, panels 128), the norm of
 *   each source group repeated over its panel groups.
 * panels_out: ceil64(N) * K / 2 bytes. norm_panels_out: ceil(N/64) *
 *   (K / panel_group_size) * 64 floats.
 * Indices are canonicalised (lowest index with the same int8 level), channels
 * past N are zero. */
CQ4P_API int cq4p_encode_panels(int source_layout, const uint8_t *source,
                                uint64_t n, uint64_t k,
                                uint32_t source_group_size,
                                const uint16_t *norms_f16,
                                const uint16_t *codebook_f16,
                                uint32_t panel_group_size, uint8_t *panels_out,
                                float *norm_panels_out, char *error,
                                size_t error_size);

/* cb_scale and cb_i8 of a stored codebook (docs/FORMAT.md sections 4 and 6). */
CQ4P_API int cq4p_codebook_int8(const uint16_t *codebook_f16, int8_t *cb_i8,
                                float *cb_scale, char *error,
                                size_t error_size);

/* ---- cq4p_convert: the converter's quantizer and rotation ---- */

/* The native quantizer (the converter's, python/cq4p/quant/quantize.py being its
 * oracle): weights w [N][K] (enum cq4p_source_dtype) -> packed panels and float64 norms, bit
 * for bit the indices and norms of the numpy implementation (the operation
 * order is spelled out in runtime/src/Quantize.cpp). K is zero-padded to
 * k_padded; scale: the stored input scale as float64 [k_padded]; bounds: the
 * 15 float64 midpoints of the ascending float64 levels (index = bounds
 * strictly below the rotated value); canonical: the index map applied
 * before packing (docs/FORMAT.md section 3). threads <= 0: one per CPU.
 * panels_out: ceil64(N) * k_padded / 2 bytes; a non-finite weight is
 * CQ4P_ERROR_ARGUMENT. */
/* The element types of w: a checkpoint's own bytes (little-endian). */
typedef enum cq4p_source_dtype {
  CQ4P_SOURCE_F32 = 0,
  CQ4P_SOURCE_BF16 = 1,
  CQ4P_SOURCE_F16 = 2
} cq4p_source_dtype;

/* Hadamard: groups of group_size, norms_out [N][k_padded / group_size]. */
CQ4P_API int cq4p_quantize_hadamard_panels(
    const void *w, int w_dtype, uint64_t n, uint64_t k, uint64_t k_padded,
    uint32_t group_size, const double *scale, const int8_t *left,
    const int8_t *right, const uint32_t *permutation, const double *bounds,
    const uint8_t *canonical, int threads, uint8_t *panels_out,
    double *norms_out, char *error, size_t error_size);
/* Orthogonal: rotation float32 [k_padded][k_padded] (the stored fp16 R),
 * panels of virtual 128-wide groups, norms_out [N] (one per row). */
CQ4P_API int cq4p_quantize_orthogonal_panels(
    const void *w, int w_dtype, uint64_t n, uint64_t k, uint64_t k_padded,
    const double *scale, const float *rotation, const double *bounds,
    const uint8_t *canonical, int threads, uint8_t *panels_out,
    double *norms_out, char *error, size_t error_size);
/* The converter's K x K orthogonal rotation for a seed (runtime/src/
 * OrthogonalRotation.cpp defines it by its operations: the same bits on any
 * machine and thread count): rotation_out [k][k] float64, R[i][c]; K from 1
 * to 65536. threads <= 0: one per CPU. */
CQ4P_API int cq4p_orthogonal_rotation(uint64_t k, uint64_t seed, int threads,
                                      double *rotation_out, char *error,
                                      size_t error_size);

/* ---- cq4p_core: whole models and sampling ---- */

/* Whole models (runtime/include/cq4p/runtime/Model.h): a bundle bound to
 * the steps of a model library compiled from its model.mlir.
 *
 * One call at a time, enforced: a model is a sequence's state (its KV
 * cache and position). Each call that uses it (prefill, decode, reset,
 * generate, generate_text, chat_send) takes the model with an atomic
 * compare-exchange and gives it back when it returns; a call that finds it
 * taken returns CQ4P_ERROR_BUSY at once, with a message saying whether the
 * holder is this thread (a callback calling into the model whose call
 * delivered it) or another thread. It is a guard, not a lock: nothing
 * waits, so misuse is reported rather than serialised. Threads that share
 * work give each thread its own model.
 *
 * Stack: the calling thread runs kernels too, which keep row tiles on its
 * stack. A call that runs steps needs max(prefill_chunk, 128) x the
 * library's widest K + 64 KiB of stack left on the calling thread (about
 * 1.1 MiB for K = 8192; docs/MODEL.md, "Stack") and refuses
 * (CQ4P_ERROR_ARGUMENT, naming both sizes) a thread with less; the model's
 * own threads get twice that, at least 8 MiB. */
typedef struct cq4p_model cq4p_model;

typedef struct cq4p_model_options {
  int32_t threads;       /* >= 1 */
  int64_t context;       /* KV cache positions; 0: default */
  int64_t prefill_chunk; /* expected chunk; 0: accept the library's */
} cq4p_model_options;

typedef struct cq4p_model_info {
  uint64_t vocab, hidden, layers, context, prefill_chunk, position;
  uint32_t kv_dtype, target; /* cq4p_kv_dtype, cq4p_target (kernel_abi.h) */
  char architecture[32];     /* NUL-terminated, truncated to 31 bytes */
} cq4p_model_info;

/* A zero-filled struct is greedy. temperature must be finite; top_p is
 * read only when sampling (temperature > 0 and top_k != 1), where it must
 * be > 0; NaN or negative is refused either way. */
typedef struct cq4p_sampling {
  float temperature; /* <= 0: greedy */
  int32_t top_k;     /* 0: off */
  float top_p;       /* >= 1: off */
  uint64_t seed;
} cq4p_sampling;

typedef struct cq4p_generate_stats {
  int64_t prompt_tokens, generated_tokens;
  double prefill_seconds, decode_seconds, time_to_first_token_seconds;
} cq4p_generate_stats;

/* Opens the bundle in bundle_dir and the model library at library_path
 * (checked against this CPU; of a library holding several x86-64 levels'
 * code, the widest this CPU runs, or the one the environment variable
 * CQ4P_HOST_LEVEL names, refused where the CPU lacks what it needs), binds the library's tensors and allocates the
 * KV cache, workspace and threads. options may be NULL (1 thread, the
 * defaults). On success *out owns all of it until cq4p_model_close.
 * Before any step runs, the library is refused (naming both values) when
 * it records another bundle's digest, when a bound tensor's shape, kind,
 * group size or rotation is not the bundle's, or when its vocab, layers or
 * hidden size is not the config's. What opening checks is cheap (headers,
 * sizes); cq4p_model_verify is the full check. */
CQ4P_API int cq4p_model_open(const char *bundle_dir, const char *library_path,
                             const cq4p_model_options *options,
                             cq4p_model **out, char *error, size_t error_size);
CQ4P_API void cq4p_model_close(cq4p_model *model);
CQ4P_API void cq4p_model_get_info(const cq4p_model *model,
                                  cq4p_model_info *info);
/* The code variant the model runs: its x86-64 level ("x86-64-v3",
 * "x86-64-v3+avxvnni", "x86-64-v4+avx512vnni"), or "" for a library that
 * records none (AArch64, or compiled before libraries held variants).
 * *variant_count, when not NULL, receives how many the library holds (0:
 * none recorded). The string lives as long as the model. */
CQ4P_API const char *cq4p_model_kernel_variant(const cq4p_model *model,
                                               uint32_t *variant_count);
/* cq4p_bundle_verify over the model's bundle, then the library's recorded
 * bundle digest (if any) against the digest recomputed from the bundle's
 * content. CQ4P_OK, or the first failure. */
CQ4P_API int cq4p_model_verify(const cq4p_model *model, char *error,
                               size_t error_size);
/* Position 0: a new sequence. CQ4P_OK, CQ4P_ERROR_BUSY while a call uses
 * the model (e.g. from a generate callback), CQ4P_ERROR_ARGUMENT for NULL. */
CQ4P_API int cq4p_model_reset(cq4p_model *model);
/* Appends count tokens at the current position; logits ([vocab]) receives
 * the last one's when not NULL. Refused calls change nothing. Every step is
 * checked against the context before it runs. A step whose logits are not
 * all finite fails (CQ4P_ERROR_FORMAT, naming the position and the id),
 * never CQ4P_OK with NaN or Inf logits; its tokens stay in the cache. */
CQ4P_API int cq4p_model_prefill(cq4p_model *model, const int64_t *ids,
                                int64_t count, float *logits, char *error,
                                size_t error_size);
CQ4P_API int cq4p_model_decode(cq4p_model *model, int64_t id, float *logits,
                               char *error, size_t error_size);
/* Resets, prefills the prompt, then samples and decodes until
 * max_new_tokens ids are in out_ids (the last one is not decoded). sampling
 * NULL is greedy; stats may be NULL. The prompt and max_new_tokens are
 * checked against the context before anything runs. */
CQ4P_API int cq4p_model_generate(cq4p_model *model, const int64_t *prompt,
                                 int64_t prompt_count, int64_t max_new_tokens,
                                 const cq4p_sampling *sampling,
                                 int64_t *out_ids, cq4p_generate_stats *stats,
                                 char *error, size_t error_size);

/* ---- cq4p_text: tokenizers, text generation and chat ---- */

/* Text (runtime/include/cq4p/runtime/Tokenizer.h, docs/TOKENIZER.md): a
 * Hugging Face tokenizer.json (byte-level BPE: Qwen, Llama 3, LFM2,
 * SmolLM2; SentencePiece-style BPE with byte fallback: Gemma) with its
 * tokenizer_config.json, generation_config.json and chat template. A file
 * using a normalizer, pre-tokenizer, model or option cq4p does not
 * implement is refused at open, naming the member and the value. */
typedef struct cq4p_tokenizer cq4p_tokenizer;

/* The tokenizer's limits (docs/TOKENIZER.md, "Limits"). Its JSON files
 * (tokenizer.json, tokenizer_config.json, generation_config.json) nest at
 * most this many levels of [] and {}: */
#define CQ4P_TOKENIZER_MAX_NESTING 64
/* Normalizer, pre-tokenizer and decoder steps, each (Sequences flattened): */
#define CQ4P_TOKENIZER_MAX_STEPS 32
/* Bytes of text one encode takes (cq4p_tokenizer_encode refuses more): */
#define CQ4P_TOKENIZER_MAX_TEXT_BYTES 33554432u /* 32 MiB */
/* Bytes of a pre-token merged as one word; a longer one (no ordinary text
 * has one) is merged in pieces of at most this many bytes: */
#define CQ4P_TOKENIZER_MAX_WORD_BYTES 65536u
/* The work a split pattern may do in one encode, in PCRE2's match-limit
 * steps: the base plus this much a byte it scans (real patterns take about
 * one a byte): */
#define CQ4P_TOKENIZER_MATCH_STEPS_BASE 1048576u
#define CQ4P_TOKENIZER_MATCH_STEPS_PER_BYTE 128u

typedef enum cq4p_tokenizer_kind {
  CQ4P_TOKENIZER_BYTE_LEVEL_BPE = 0,
  CQ4P_TOKENIZER_SENTENCEPIECE_BPE = 1
} cq4p_tokenizer_kind;

typedef struct cq4p_tokenizer_info {
  uint32_t kind;         /* cq4p_tokenizer_kind */
  int64_t vocab;         /* largest id + 1 */
  int64_t bos;           /* -1: none */
  uint32_t stop_count;   /* ids generation stops at (EOS, end of turn) */
  int64_t stop_ids[16];  /* the first 16 of them */
  uint32_t prefix_count; /* ids added before the text (add_special) */
  int64_t prefix_ids[4];
  char chat_format[48];  /* "ChatML", "Llama 3", "Gemma", "Gemma 4"...; "none" */
} cq4p_tokenizer_info;

/* Opens tokenizer_json; tokenizer_config, generation_config and
 * chat_template (a chat_template.jinja) may be NULL. */
CQ4P_API int cq4p_tokenizer_open(const char *tokenizer_json,
                                 const char *tokenizer_config,
                                 const char *generation_config,
                                 const char *chat_template,
                                 cq4p_tokenizer **out, char *error,
                                 size_t error_size);
/* The tokenizer files of a directory (a bundle, or a model directory). */
CQ4P_API int cq4p_tokenizer_open_dir(const char *directory,
                                     cq4p_tokenizer **out, char *error,
                                     size_t error_size);
CQ4P_API void cq4p_tokenizer_close(cq4p_tokenizer *tokenizer);
CQ4P_API void cq4p_tokenizer_get_info(const cq4p_tokenizer *tokenizer,
                                      cq4p_tokenizer_info *info);
/* The ids of the added tokens marked special; returns how many there are,
 * writing at most capacity of them. */
CQ4P_API size_t cq4p_tokenizer_special_ids(const cq4p_tokenizer *tokenizer,
                                           int64_t *ids, size_t capacity);
/* The bundle's tokenizer, opened at the first call and owned by the model
 * (valid until cq4p_model_close). Any thread may call this, also while
 * another generates from text: the first opens it, every caller gets the
 * same one, and it may be used (encode, decode) beside a generation. */
CQ4P_API int cq4p_model_tokenizer(cq4p_model *model,
                                  const cq4p_tokenizer **out, char *error,
                                  size_t error_size);

/* Encodes length bytes of UTF-8 (invalid UTF-8 is refused, naming the byte
 * offset; more than CQ4P_TOKENIZER_MAX_TEXT_BYTES is refused). add_special: the post-processor's ids too (Gemma's BOS). *count
 * receives the number of ids; when it is more than capacity, nothing is
 * written and the call fails with CQ4P_ERROR_ARGUMENT (call again with
 * room for *count). */
CQ4P_API int cq4p_tokenizer_encode(const cq4p_tokenizer *tokenizer,
                                   const char *text, size_t length,
                                   int add_special, int64_t *ids,
                                   size_t capacity, size_t *count,
                                   char *error, size_t error_size);
/* Decodes ids to UTF-8, NUL-terminated; *length receives the text's length
 * (without the NUL). Invalid byte sequences become U+FFFD. When the text
 * and its NUL do not fit in capacity, the call fails with
 * CQ4P_ERROR_ARGUMENT and *length says how much is needed. */
CQ4P_API int cq4p_tokenizer_decode(const cq4p_tokenizer *tokenizer,
                                   const int64_t *ids, size_t count,
                                   char *text, size_t capacity,
                                   size_t *length, char *error,
                                   size_t error_size);

/* The text of a conversation in the tokenizer's chat format (the prompt a
 * chat's first turn encodes, without the post-processor's ids): count
 * messages of roles "system" (first only), "user" and "assistant", then
 * the opening of the assistant's turn when add_generation_prompt. A chat
 * template cq4p does not know is refused by name. NUL-terminated; the
 * capacity rule of cq4p_tokenizer_decode. */
CQ4P_API int cq4p_tokenizer_render_chat(const cq4p_tokenizer *tokenizer,
                                        const char *const *roles,
                                        const char *const *contents,
                                        size_t count,
                                        int add_generation_prompt,
                                        char *text, size_t capacity,
                                        size_t *length, char *error,
                                        size_t error_size);

/* A chat's options beyond its messages. Versioned by its size: the caller
 * sets `size` to sizeof(cq4p_chat_options) as its header declares it; the
 * runtime reads the fields that size covers (later ones keep their
 * defaults, zero) and refuses a larger struct whose bytes past the fields
 * it knows are not all zero (an option it cannot honour). Fields are only
 * ever appended. A NULL pointer is the defaults.
 *
 * Gemma 4 (docs/TOKENIZER.md): with enable_thinking the system turn opens
 * with <|think|> and the model reasons in its thought channel
 * (<|channel>thought\n...<channel|>) before it answers; other formats
 * refuse it. The thought channel is held back from the streamed text
 * unless show_thinking (then delivered as the model wrote it, markers
 * included); no callback ever receives part of a marker. */
typedef struct cq4p_chat_options {
  uint32_t size;           /* sizeof(cq4p_chat_options) */
  int32_t enable_thinking; /* nonzero: Gemma 4's thinking */
  int32_t show_thinking;   /* nonzero: deliver the thought channel too */
} cq4p_chat_options;

/* cq4p_tokenizer_render_chat with options (enable_thinking; a "developer"
 * first message is Gemma 4's system turn too). */
CQ4P_API int cq4p_tokenizer_render_chat_with(const cq4p_tokenizer *tokenizer,
                                             const char *const *roles,
                                             const char *const *contents,
                                             size_t count,
                                             int add_generation_prompt,
                                             const cq4p_chat_options *options,
                                             char *text, size_t capacity,
                                             size_t *length, char *error,
                                             size_t error_size);

/* Called with each generated id and the text it completes (length may be
 * 0: the bytes of a character still to be finished, or text that may be
 * the start of a stop string, are held). At the end, text still held is
 * delivered with id -1. Return nonzero to continue, 0 to stop. */
typedef int (*cq4p_text_fn)(void *context, int64_t id, const char *text,
                            size_t length);

/* Stop strings must be non-empty valid UTF-8 (refused otherwise). */
typedef struct cq4p_text_options {
  int64_t max_new_tokens;
  cq4p_sampling sampling;
  const char *const *stop_strings; /* may be NULL */
  size_t stop_string_count;
  int add_special;    /* the post-processor's ids (BOS) before a prompt */
  int ignore_stop_ids; /* nonzero: do not stop at EOS / end of turn */
} cq4p_text_options;

/* A new sequence from a text prompt (tokenized by `tokenizer`, or the
 * bundle's when NULL): prefill, then sample and decode until
 * max_new_tokens, a stop id (EOS, end of turn; not delivered) or a stop
 * string (the text before it delivered). options NULL: 128 tokens, greedy,
 * add_special. */
CQ4P_API int cq4p_model_generate_text(cq4p_model *model,
                                      const cq4p_tokenizer *tokenizer,
                                      const char *prompt,
                                      const cq4p_text_options *options,
                                      cq4p_text_fn callback, void *context,
                                      cq4p_generate_stats *stats, char *error,
                                      size_t error_size);

/* A conversation in the tokenizer's chat format (recognised from its chat
 * template; a template cq4p does not know is refused by name). Each turn
 * prefills only what is new after the KV cache of the previous turn; when
 * the model was used in between (a reset, a prefill, a generation, another
 * chat), the turn prefills the whole conversation again first. Closed
 * before the model. system_prompt may be NULL. */
typedef struct cq4p_chat cq4p_chat;
CQ4P_API int cq4p_chat_open(cq4p_model *model, const cq4p_tokenizer *tokenizer,
                            const char *system_prompt, cq4p_chat **out,
                            char *error, size_t error_size);
/* cq4p_chat_open with options (above); options the chat format does not
 * take (thinking outside Gemma 4) are refused here, by name. */
CQ4P_API int cq4p_chat_open_with(cq4p_model *model,
                                 const cq4p_tokenizer *tokenizer,
                                 const char *system_prompt,
                                 const cq4p_chat_options *options,
                                 cq4p_chat **out, char *error,
                                 size_t error_size);
CQ4P_API int cq4p_chat_send(cq4p_chat *chat, const char *user_text,
                            const cq4p_text_options *options,
                            cq4p_text_fn callback, void *context,
                            cq4p_generate_stats *stats, char *error,
                            size_t error_size);
/* One turn at a time per chat: a cq4p_chat_send while another is under way
 * (on another thread, or from the turn's own callback) is refused with
 * CQ4P_ERROR_BUSY before it touches the conversation. */
/* The conversation's ids so far (prefilled and sampled) as of the last
 * finished turn; returns how many there are, writing at most capacity of
 * them. Safe from any thread at any time, during a turn too (then the
 * conversation before it). */
CQ4P_API size_t cq4p_chat_history(const cq4p_chat *chat, int64_t *ids,
                                  size_t capacity);
CQ4P_API void cq4p_chat_close(cq4p_chat *chat);

/* ---- cq4p_core: the structures' layout ---- */

/* The structures of this header as this library lays them out (this one
 * included, which bindings read the table through): one entry per field
 * (its offset and size in bytes) and one per structure (field NULL, offset
 * 0, its size), for bindings that mirror them. The Python package checks
 * every ctypes mirror against this table when it loads the library, so a
 * package and a library that disagree are refused by name, never read
 * wrongly. */
typedef struct cq4p_layout_entry {
  const char *structure; /* "cq4p_model_info" */
  const char *field;     /* "context"; NULL: the whole structure */
  uint64_t offset;
  uint64_t size;
} cq4p_layout_entry;

/* The table (static storage); *count receives its length. */
CQ4P_API const cq4p_layout_entry *cq4p_struct_layout(size_t *count);

#ifdef __cplusplus
}
#endif

#endif /* CQ4P_CQ4P_H */

/*===- FakeModel.c - a model library for the runtime's Model tests --------===*
 *
 * Stands in for a library cq4p-compile builds from a model.mlir: it
 * exports an (empty) cq4p_kernel_table and a cq4p_model whose two steps run
 * a toy model over the ABI, exactly the way compiled steps do: reading
 * bindings (a dense FP32 embedding, a dense FP16 scale, a CQ4 weight view),
 * appending keys and values to the KV cache at position + r, using the
 * workspace between parallel regions, and handing every region to the
 * runtime's parallel_for.
 *
 * The toy, for tokens at positions p = position + r:
 *   key[l][p][w]   = embed[id][w] * scale[w] + (l + 1) * p
 *   value[l][p][w] = key[l][p][w] + w + 1
 *   acc[v] = sum over l, j <= last, w of key[l][j][w] * cb_i8[idx(v, w)] *
 *            (j + 1) + value[l][j][w]         (int64: keys are integers)
 *   logits[v] = (acc[v] mod 1009) / 64,        last = position + rows - 1
 * so the logits depend on every token so far, its position and order, and
 * on nothing else: prefill in any chunks and decode token by token give
 * the same logits bit for bit, whatever the ranges parallel_for chose.
 * A NaN in the last token's embedding row makes every logit NaN (as it
 * would in a real model); NaN keys count as 0 in acc.
 *
 * Every way a step's arguments or a task's range can break the contract is
 * counted (cq4p_fake_model_violations), as are steps and ranges, so tests
 * can see what the runtime did. Compile definitions make the variants:
 *
 *   CQ4P_FAKE_MODEL_ANY_DIGEST  an empty digest: any bundle (the default
 *                               is "toy-digest-1")
 *   CQ4P_FAKE_MODEL_SME2        the steps target aarch64-sme2
 *   CQ4P_FAKE_MODEL_OTHER_DIGEST  also records the bundle digest "f00d"
 *                               (cq4p_bundle_digest), not the steps' one
 *
 *===----------------------------------------------------------------------===*/

#include "cq4p/format.h"
#include "cq4p/kernel_abi.h"

#include "fp16.h"

#include <stdint.h>

#define EXPORT __attribute__((visibility("default")))

#define VOCAB 64
#define HIDDEN 16
#define LAYERS 2
#define KV_WIDTH 8
#define STATE_BYTES 256 /* the step state: the last position seen, at its end */
#define CHUNK 4
#define HEAD_K 256
#define HEAD_GS 128
#define HEAD_GROUPS (HEAD_K / HEAD_GS)
#define WORKSPACE_BYTES (VOCAB * 8)

#ifdef CQ4P_FAKE_MODEL_ANY_DIGEST
#define DIGEST ""
#else
#define DIGEST "toy-digest-1"
#endif

EXPORT int64_t cq4p_fake_model_steps[2] = {0, 0}; /* prefill, decode */
/* Prefill steps by their rows. */
EXPORT int64_t cq4p_fake_model_rows[CHUNK + 1] = {0};
EXPORT int64_t cq4p_fake_model_ranges = 0;     /* task calls */
EXPORT int64_t cq4p_fake_model_violations = 0; /* contract breaches */

enum { EMBED, SCALE, HEAD };

static void count(int64_t *counter) {
  __atomic_fetch_add(counter, 1, __ATOMIC_RELAXED);
}

static void expect(int ok) {
  if (!ok)
    count(&cq4p_fake_model_violations);
}

static float *cache(const cq4p_step_args *a, int64_t layer, int64_t kind,
                    int64_t position) {
  return (float *)a->kv_cache +
         ((layer * 2 + kind) * a->context + position) * KV_WIDTH;
}

/* The 4-bit index of weight (n, k) in packed panels (docs/FORMAT.md section 3). */
static unsigned panelIndex(const uint8_t *panels, uint64_t n, uint64_t k) {
  uint64_t s = n / 64, c = n % 64, g = k / HEAD_GS;
  uint64_t kg = (k % HEAD_GS) / 4, kc = k % 4, nibble = c * 4 + kc;
  uint8_t byte =
      panels[((s * HEAD_GROUPS + g) * (HEAD_GS / 4) + kg) * 128 + nibble / 2];
  return nibble % 2 ? byte >> 4 : byte & 0xF;
}

static void checkRange(int64_t begin, int64_t end, int64_t items) {
  count(&cq4p_fake_model_ranges);
  expect(0 <= begin && begin < end && end <= items);
}

/* Items: (row, layer) pairs. */
static void appendKeysAndValues(const cq4p_step_args *a, int64_t begin,
                                int64_t end) {
  checkRange(begin, end, a->rows * LAYERS);
  const float *embed = (const float *)a->bindings[EMBED];
  const uint16_t *scale = (const uint16_t *)a->bindings[SCALE];
  for (int64_t item = begin; item < end; ++item) {
    int64_t r = item / LAYERS, layer = item % LAYERS;
    int64_t position = a->position + r, id = a->ids[r];
    float *key = cache(a, layer, 0, position);
    float *value = cache(a, layer, 1, position);
    for (int w = 0; w < KV_WIDTH; ++w) {
      key[w] = embed[id * KV_WIDTH + w] * cq4p_half_to_float(scale[w]) +
               (float)((layer + 1) * position);
      value[w] = key[w] + (float)(w + 1);
    }
  }
}

/* Items: vocabulary ids; the sums go to the workspace. */
static void accumulate(const cq4p_step_args *a, int64_t begin, int64_t end) {
  checkRange(begin, end, VOCAB);
  const cq4p_weight_view *head = (const cq4p_weight_view *)a->bindings[HEAD];
  int64_t *sums = (int64_t *)a->workspace;
  int64_t last = a->position + a->rows - 1;
  for (int64_t v = begin; v < end; ++v) {
    int64_t acc = 0;
    for (int64_t layer = 0; layer < LAYERS; ++layer)
      for (int64_t j = 0; j <= last; ++j) {
        const float *key = cache(a, layer, 0, j);
        const float *value = cache(a, layer, 1, j);
        for (int w = 0; w < KV_WIDTH; ++w)
          acc += (key[w] == key[w] ? (int64_t)key[w] : 0) *
                     head->cb_i8[panelIndex(head->panels, (uint64_t)v,
                                            (uint64_t)w)] *
                     (j + 1) +
                 (value[w] == value[w] ? (int64_t)value[w] : 0);
      }
    sums[v] = acc;
  }
}

/* Items: vocabulary ids, from the workspace to the logits. */
static void writeLogits(const cq4p_step_args *a, int64_t begin, int64_t end) {
  checkRange(begin, end, VOCAB);
  const int64_t *sums = (const int64_t *)a->workspace;
  const float *lastKey = cache(a, 0, 0, a->position + a->rows - 1);
  int poisoned = 0;
  for (int w = 0; w < KV_WIDTH; ++w)
    poisoned |= lastKey[w] != lastKey[w];
  for (int64_t v = begin; v < end; ++v)
    a->logits[v] = poisoned ? __builtin_nanf("")
                            : (float)((sums[v] % 1009 + 1009) % 1009) / 64.0f;
}

static void step(const cq4p_step_args *a, int decode) {
  expect(a->rows >= 1 && a->rows <= (decode ? 1 : CHUNK));
  expect(a->position >= 0 && a->context >= 1 &&
         a->position + a->rows <= a->context);
  expect(a->bindings != 0 && a->kv_cache != 0 && a->workspace != 0 &&
         a->ids != 0 && a->logits != 0 && a->parallel_for != 0 &&
         a->state != 0);
  expect((uintptr_t)a->workspace % 64 == 0);
  int ok = a->rows >= 1 && a->rows <= CHUNK && a->position >= 0 &&
           a->position + a->rows <= a->context && a->ids != 0;
  for (int64_t r = 0; ok && r < a->rows; ++r)
    if (a->ids[r] < 0 || a->ids[r] >= VOCAB)
      ok = 0;
  expect(ok);
  if (!ok)
    return; /* a step the runtime should never have made: touch nothing */
  /* The state is the model's for as long as it lives: a step after
   * position 0 finds what the one before it left. */
  int64_t *last = (int64_t *)((char *)a->state + STATE_BYTES) - 1;
  expect(a->position == 0 || *last == a->position);
  *last = a->position + a->rows;
  a->parallel_for(a->pool, appendKeysAndValues, a, a->rows * LAYERS);
  a->parallel_for(a->pool, accumulate, a, VOCAB);
  a->parallel_for(a->pool, writeLogits, a, VOCAB);
}

static void prefill(const cq4p_step_args *a) {
  count(&cq4p_fake_model_steps[0]);
  if (a->rows >= 1 && a->rows <= CHUNK)
    count(&cq4p_fake_model_rows[a->rows]);
  step(a, 0);
}

static void decode(const cq4p_step_args *a) {
  count(&cq4p_fake_model_steps[1]);
  step(a, 1);
}

static const cq4p_model_binding kBindings[] = {
    {"toy.embed", CQ4P_BINDING_FP32, 0, VOCAB * KV_WIDTH, 0, 0, 0},
    {"toy.scale", CQ4P_BINDING_FP16, 0, KV_WIDTH, 0, 0, 0},
    {"toy.head", CQ4P_BINDING_CQ4, 0, VOCAB, HEAD_K, HEAD_GS, 0},
};

#if defined(CQ4P_FAKE_MODEL_SME2)
#define TARGET CQ4P_TARGET_AARCH64_SME2
#define FEATURES CQ4P_FEATURE_AARCH64_SME2
#elif defined(__aarch64__)
#define TARGET CQ4P_TARGET_AARCH64_NEON
#define FEATURES CQ4P_FEATURE_AARCH64_DOTPROD
#else
#define TARGET CQ4P_TARGET_HOST
#define FEATURES 0
#endif

EXPORT const cq4p_model_desc cq4p_model_steps = {
    CQ4P_KERNEL_ABI_VERSION,
    sizeof(kBindings) / sizeof(kBindings[0]),
    kBindings,
    "toy",
    DIGEST,
    VOCAB,
    HIDDEN,
    LAYERS,
    KV_WIDTH,
    CQ4P_KV_F32,
    TARGET,
    FEATURES,
    CHUNK,
    WORKSPACE_BYTES,
    prefill,
    decode,
    LAYERS * 2 * KV_WIDTH * sizeof(float),
    STATE_BYTES,
};

#ifdef CQ4P_FAKE_MODEL_OTHER_DIGEST
EXPORT const char cq4p_bundle_digest[] = "f00d";
#endif

/* A model library holds its kernels too; this one calls none through the
 * table. The symbol shares its name with the struct's typedef, which C does
 * not allow for a variable of that type: the asm label gives it the name. */
EXPORT extern const cq4p_kernel_table fakeModelTable
    __asm__("cq4p_kernel_table");
const cq4p_kernel_table fakeModelTable = {CQ4P_KERNEL_ABI_VERSION, 0, 0};

/*===- panel_encoder.c - the reference packed-panel encoder ----------------===*
 *
 * Legacy CQ4 indices (row-major or 4-row interleaved) + stored fp16 norms +
 * stored fp16 codebook -> packed panels and folded fp32 norm_panels
 * (docs/FORMAT.md sections 3, 4 and 6). Written plainly, one weight at a time:
 * it is the reference the Python packer and the compiler's kernels are
 * checked against, not a fast path.
 *
 *===----------------------------------------------------------------------===*/

#include "cq4p/cq4p.h"

#include "fp16.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static int fail(int code, char *error, size_t error_size, const char *format,
                ...) {
  if (error != NULL && error_size > 0) {
    va_list args;
    va_start(args, format);
    vsnprintf(error, error_size, format, args);
    va_end(args);
  }
  return code;
}

int cq4p_codebook_int8(const uint16_t *codebook_f16, int8_t *cb_i8,
                       float *cb_scale, char *error, size_t error_size) {
  float levels[CQ4P_CODEBOOK_LEVELS];
  float max_abs = 0.0f;
  float inv;
  int i;
  if (codebook_f16 == NULL)
    return fail(CQ4P_ERROR_ARGUMENT, error, error_size,
                "codebook: expected 16 fp16 levels, found a null pointer");
  for (i = 0; i < CQ4P_CODEBOOK_LEVELS; ++i) {
    if (!cq4p_half_is_finite(codebook_f16[i]))
      return fail(CQ4P_ERROR_FORMAT, error, error_size,
                  "codebook: expected 16 finite levels, found level %d = 0x%x",
                  i, codebook_f16[i]);
    levels[i] = cq4p_half_to_float(codebook_f16[i]);
    if (fabsf(levels[i]) > max_abs)
      max_abs = fabsf(levels[i]);
  }
  if (max_abs == 0.0f)
    return fail(CQ4P_ERROR_FORMAT, error, error_size,
                "codebook: expected a level other than zero, found all 16 "
                "levels zero");
  /* docs/FORMAT.md section 6, as the format's original engine does it: fp32
     throughout, a multiply by the fp32 reciprocal (not a division) and
     roundf's ties away from zero, so a level at exactly 18.5 gives 19. */
  *cb_scale = fmaxf(max_abs / 127.0f, 1e-10f);
  inv = 1.0f / *cb_scale;
  for (i = 0; i < CQ4P_CODEBOOK_LEVELS; ++i) {
    float scaled = roundf(levels[i] * inv);
    if (scaled > 127.0f)
      scaled = 127.0f;
    if (scaled < -128.0f)
      scaled = -128.0f;
    cb_i8[i] = (int8_t)scaled;
  }
  return CQ4P_OK;
}

/* The index of weight (row, col) in a legacy data region. */
static unsigned source_index(int layout, const uint8_t *source, uint64_t k,
                             uint64_t group_size, uint64_t row, uint64_t col) {
  uint8_t byte;
  int high;
  if (layout == CQ4P_LAYOUT_ROW_MAJOR) {
    /* [N][num_groups][gs/2] is [N][K/2]: nibble col of the row, low first. */
    uint64_t nibble = row * k + col;
    byte = source[nibble / 2];
    high = (int)(nibble & 1);
  } else {
    /* [N/4][num_groups][gs/8][4 rows][4 bytes]: byte (r, j) of a chunk holds
     * K offsets j (low nibble) and j + 4 (high nibble). */
    uint64_t num_groups = k / group_size;
    uint64_t block = row / 4, r = row % 4;
    uint64_t g = col / group_size, within = col % group_size;
    uint64_t chunk = within / 8, j = within % 8;
    uint64_t offset =
        ((block * num_groups + g) * (group_size / 8) + chunk) * 16 + r * 4 +
        (j & 3);
    byte = source[offset];
    high = (j & 4) != 0;
  }
  return high ? (unsigned)(byte >> 4) : (unsigned)(byte & 0xF);
}

int cq4p_encode_panels(int source_layout, const uint8_t *source, uint64_t n,
                       uint64_t k, uint32_t source_group_size,
                       const uint16_t *norms_f16, const uint16_t *codebook_f16,
                       uint32_t panel_group_size, uint8_t *panels_out,
                       float *norm_panels_out, char *error,
                       size_t error_size) {
  int8_t cb_i8[CQ4P_CODEBOOK_LEVELS];
  uint8_t canonical[CQ4P_CODEBOOK_LEVELS];
  float cb_scale;
  uint64_t super_blocks, panel_groups, source_groups, kg_blocks;
  uint64_t row, col, s, g, c;
  int i, j, status;

  if (source == NULL || norms_f16 == NULL || codebook_f16 == NULL ||
      panels_out == NULL || norm_panels_out == NULL)
    return fail(CQ4P_ERROR_ARGUMENT, error, error_size,
                "encode_panels: expected non-null buffers, found a null "
                "pointer");
  if (source_layout != CQ4P_LAYOUT_ROW_MAJOR &&
      source_layout != CQ4P_LAYOUT_INTERLEAVED_4ROW)
    return fail(CQ4P_ERROR_ARGUMENT, error, error_size,
                "source_layout: expected %d (row-major) or %d (interleaved "
                "4-row), found %d",
                CQ4P_LAYOUT_ROW_MAJOR, CQ4P_LAYOUT_INTERLEAVED_4ROW,
                source_layout);
  if (n == 0 || k == 0 || n >= ((uint64_t)1 << 32) || k >= ((uint64_t)1 << 32))
    return fail(CQ4P_ERROR_ARGUMENT, error, error_size,
                "shape: expected 0 < N, K < 2^32, found N = %llu, K = %llu",
                (unsigned long long)n, (unsigned long long)k);
  if (source_group_size == 0 || k % source_group_size != 0)
    return fail(CQ4P_ERROR_ARGUMENT, error, error_size,
                "source_group_size: expected a divisor of K (%llu), found %u",
                (unsigned long long)k, source_group_size);
  if (panel_group_size == 0 || panel_group_size % CQ4P_KG_BLOCK_K != 0 ||
      source_group_size % panel_group_size != 0)
    return fail(CQ4P_ERROR_ARGUMENT, error, error_size,
                "panel_group_size: expected a multiple of 4 dividing the "
                "source group size (%u), found %u",
                source_group_size, panel_group_size);
  if (source_layout == CQ4P_LAYOUT_ROW_MAJOR && (n * k) % 2 != 0)
    return fail(CQ4P_ERROR_ARGUMENT, error, error_size,
                "shape: expected N * K even for row-major nibbles, found N = "
                "%llu, K = %llu",
                (unsigned long long)n, (unsigned long long)k);
  if (source_layout == CQ4P_LAYOUT_INTERLEAVED_4ROW &&
      (n % 4 != 0 || source_group_size % 8 != 0))
    return fail(CQ4P_ERROR_ARGUMENT, error, error_size,
                "shape: expected N a multiple of 4 and a group size a "
                "multiple of 8 for an interleaved source, found N = %llu, "
                "group size %u",
                (unsigned long long)n, source_group_size);

  status = cq4p_codebook_int8(codebook_f16, cb_i8, &cb_scale, error,
                              error_size);
  if (status != CQ4P_OK)
    return status;
  /* Canonical indices: the lowest index with the same int8 level. */
  for (i = 0; i < CQ4P_CODEBOOK_LEVELS; ++i) {
    canonical[i] = (uint8_t)i;
    for (j = 0; j < i; ++j)
      if (cb_i8[j] == cb_i8[i]) {
        canonical[i] = (uint8_t)j;
        break;
      }
  }

  super_blocks = cq4p_num_super_blocks(n);
  panel_groups = k / panel_group_size;
  source_groups = k / source_group_size;
  kg_blocks = panel_group_size / CQ4P_KG_BLOCK_K;
  memset(panels_out, 0, cq4p_panel_data_bytes(n, k));

  for (row = 0; row < n; ++row) {
    uint64_t sb = row / CQ4P_PANEL_CHANNELS, channel = row % CQ4P_PANEL_CHANNELS;
    for (col = 0; col < k; ++col) {
      uint64_t group = col / panel_group_size;
      uint64_t kg = (col % panel_group_size) / CQ4P_KG_BLOCK_K;
      uint64_t kc = col % CQ4P_KG_BLOCK_K;
      uint64_t nibble = channel * CQ4P_KG_BLOCK_K + kc;
      uint64_t address =
          ((sb * panel_groups + group) * kg_blocks + kg) * CQ4P_KG_BLOCK_BYTES +
          nibble / 2;
      unsigned index = canonical[source_index(source_layout, source, k,
                                              source_group_size, row, col)];
      panels_out[address] |= (uint8_t)(index << (4 * (nibble & 1)));
    }
  }

  for (s = 0; s < super_blocks; ++s)
    for (g = 0; g < panel_groups; ++g)
      for (c = 0; c < CQ4P_PANEL_CHANNELS; ++c) {
        uint64_t r = s * CQ4P_PANEL_CHANNELS + c;
        uint64_t source_group = g * panel_group_size / source_group_size;
        float folded = 0.0f;
        if (r < n)
          folded = cq4p_half_to_float(norms_f16[r * source_groups + source_group]) *
                   cb_scale;
        norm_panels_out[(s * panel_groups + g) * CQ4P_PANEL_CHANNELS + c] =
            folded;
      }
  return CQ4P_OK;
}

/*===- cq4p/format.h - the CQ4 packed-panel file format's constants -------===*
 *
 * The one definition of the format's facts (docs/FORMAT.md sections 1, 3
 * and 4): the runtime, the compiler and the Python package all take them
 * from here. Plain C so that every consumer can include it.
 *
 *===----------------------------------------------------------------------===*/

#ifndef CQ4P_FORMAT_H
#define CQ4P_FORMAT_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* File header (all integers little-endian). */
#define CQ4P_MAGIC 0x54434143u /* "CACT" */
#define CQ4P_HEADER_BYTES 84u
#define CQ4P_EXTENDED_HEADER_BYTES 116u
#define CQ4P_WRITER_ALIGNMENT 32u
#define CQ4P_MAX_READER_ALIGNMENT 4096u

/* Header field offsets. */
#define CQ4P_OFFSET_MAGIC 0u
#define CQ4P_OFFSET_FLAGS 4u
#define CQ4P_OFFSET_ALIGNMENT 8u
#define CQ4P_OFFSET_NDIM 12u
#define CQ4P_OFFSET_DIMS 16u
#define CQ4P_OFFSET_PRECISION 48u
#define CQ4P_OFFSET_DATA_BYTES 52u
#define CQ4P_OFFSET_SCALES_BYTES 60u
#define CQ4P_OFFSET_GROUP_SIZE 68u
#define CQ4P_OFFSET_NUM_GROUPS 72u
#define CQ4P_OFFSET_ORIGINAL_N 76u
#define CQ4P_OFFSET_EXTENDED_DIMS 84u

/* Precision codes. */
enum cq4p_precision {
  CQ4P_PRECISION_INT8 = 0,
  CQ4P_PRECISION_FP16 = 1,
  CQ4P_PRECISION_FP32 = 2,
  CQ4P_PRECISION_CQ1 = 3,
  CQ4P_PRECISION_CQ2 = 4,
  CQ4P_PRECISION_CQ3 = 5,
  CQ4P_PRECISION_CQ4 = 6
};

/* Flag bits (CQ precisions). */
#define CQ4P_FLAG_ORTHOGONAL_ROTATION (1u << 1)
#define CQ4P_FLAG_INTERLEAVED_4ROW (1u << 2)
#define CQ4P_FLAG_EXTENDED_SHAPE (1u << 4)
#define CQ4P_FLAG_PACKED_PANELS (1u << 5)

/* Packed panels: [SB][num_groups][gs/4][128 bytes]. */
#define CQ4P_PANEL_CHANNELS 64     /* output channels per super-block */
#define CQ4P_KG_BLOCK_K 4          /* K values per kg-block */
#define CQ4P_KG_BLOCK_BYTES 128    /* 64 channels x 4 K x 4 bits */
#define CQ4P_CODEBOOK_LEVELS 16
#define CQ4P_ORTHOGONAL_VIRTUAL_GROUP 128

/* Group sizes a Hadamard panel file may have: a power of two, a multiple
 * of 32, at most 256. */
#define CQ4P_PANEL_GROUP_MULTIPLE 32
#define CQ4P_PANEL_MAX_GROUP_SIZE 256

/* A bundle's manifest.json (docs/TRUST.md): what every reader (the
 * runtime, cq4p-compile --bundle, python/cq4p) refuses past. */
#define CQ4P_MAX_MANIFEST_BYTES 16777216u /* 16 MiB */
#define CQ4P_MAX_MANIFEST_NESTING 64      /* levels of [] and {} */
#define CQ4P_MAX_SHAPE_DIMS 8             /* a tensor entry's "shape" */

/* Size of a packed-panel data region: ceil64(N) * K / 2 bytes. The caller
 * guarantees that the product fits (the readers check it first). */
static inline uint64_t cq4p_panel_data_bytes(uint64_t n, uint64_t k) {
  return (n + CQ4P_PANEL_CHANNELS - 1) / CQ4P_PANEL_CHANNELS * CQ4P_PANEL_CHANNELS * k / 2;
}

/* Number of 64-channel super-blocks: ceil(N / 64). */
static inline uint64_t cq4p_num_super_blocks(uint64_t n) {
  return (n + CQ4P_PANEL_CHANNELS - 1) / CQ4P_PANEL_CHANNELS;
}

#ifdef __cplusplus
}
#endif

#endif /* CQ4P_FORMAT_H */

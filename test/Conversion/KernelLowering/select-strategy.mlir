// RUN: cq4p-opt %s -split-input-file -cq4p-select-strategy=target=aarch64-sme2 | FileCheck %s --check-prefix=SME2
// RUN: cq4p-opt %s -split-input-file -cq4p-select-strategy=target=aarch64-neon | FileCheck %s --check-prefix=NEON
// RUN: cq4p-opt %s -split-input-file -cq4p-select-strategy=target=host | FileCheck %s --check-prefix=NONE

// What each target records: SME2 tiles a GEMM in 16-row outer-product
// tiles (a padded last tile from 7 rows), and one-row tiles take every
// group's partials of a super-block at once; NEON packs a GEMM's row tiles
// for its pair loop; the host records nothing (the shared tiling is its).
// SME2-LABEL: func.func @gemm
// SME2: cq4p.panel_matmul
// SME2-SAME: {cq4p.strategy = #cq4p.strategy<tile_rows = 16, min_tile_rows = 7, super_block_partials = true>}
// NEON-LABEL: func.func @gemm
// NEON: cq4p.panel_matmul
// NEON-SAME: {cq4p.strategy = #cq4p.strategy<paired_tiles = true>}
// NONE-LABEL: func.func @gemm
// NONE-NOT: cq4p.strategy
func.func @gemm(%panels: memref<1x4x8x128xi8>, %norm_panels: memref<1x4x64xf32>,
                %cb: memref<16xi8>, %act: memref<?x128xi8>, %scales: memref<?x4xf32>,
                %y: memref<?x64xf32>, %sb0: index, %sb1: index) {
  cq4p.panel_matmul %panels, %norm_panels, %cb, %act, %scales, %y, %sb0, %sb1
      : memref<1x4x8x128xi8>, memref<1x4x64xf32>, memref<16xi8>, memref<?x128xi8>,
        memref<?x4xf32>, memref<?x64xf32>
  return
}

// -----

// One row: no GEMM tiles to choose. SME2 records its one-row tiles' partials
// of every group at once; NEON and the host record nothing.
// SME2-LABEL: func.func @gemv
// SME2: cq4p.panel_matmul
// SME2-SAME: {cq4p.strategy = #cq4p.strategy<super_block_partials = true>}
// NEON-LABEL: func.func @gemv
// NEON-NOT: cq4p.strategy
// NONE-LABEL: func.func @gemv
// NONE-NOT: cq4p.strategy
func.func @gemv(%panels: memref<1x4x8x128xi8>, %norm_panels: memref<1x4x64xf32>,
                         %cb: memref<16xi8>, %act: memref<1x128xi8>, %scales: memref<1x4xf32>,
                         %y: memref<1x64xf32>, %sb0: index, %sb1: index) {
  cq4p.panel_matmul %panels, %norm_panels, %cb, %act, %scales, %y, %sb0, %sb1
      : memref<1x4x8x128xi8>, memref<1x4x64xf32>, memref<16xi8>, memref<1x128xi8>,
        memref<1x4xf32>, memref<1x64xf32>
  return
}

// -----

// The embedding: SME2's outer-product leaf over chunks of 64 prompt rows,
// fewer than 32 through the rotation leaf.
// SME2-LABEL: func.func @embedding
// SME2: cq4p.decode_embedding
// SME2-SAME: {cq4p.strategy = #cq4p.strategy<embedding_rows = 64, embedding_min_rows = 32>}
// NEON-LABEL: func.func @embedding
// NEON-NOT: cq4p.strategy
// NONE-LABEL: func.func @embedding
// NONE-NOT: cq4p.strategy
func.func @embedding(%panels: memref<2x1x32x128xi8>, %norms: memref<100x1xf16>,
                     %cb: memref<16xf16>, %rotation_t: memref<128x128xf16>,
                     %isr: memref<128xf16>, %ids: memref<?xi64>,
                     %out: memref<?x128xf32>) {
  cq4p.decode_embedding %panels, %norms, %cb, %rotation_t, %isr, %ids, %out
      : memref<2x1x32x128xi8>, memref<100x1xf16>, memref<16xf16>, memref<128x128xf16>,
        memref<128xf16>, memref<?xi64>, memref<?x128xf32>
  return
}

// -----

// A strategy already recorded is kept.
// SME2-LABEL: func.func @recorded
// NEON-LABEL: func.func @recorded
// NONE-LABEL: func.func @recorded
// SME2: cq4p.panel_matmul
// SME2-SAME: {cq4p.strategy = #cq4p.strategy<tile_rows = 8, min_tile_rows = 8>}
// NEON: cq4p.panel_matmul
// NEON-SAME: {cq4p.strategy = #cq4p.strategy<tile_rows = 8, min_tile_rows = 8>}
func.func @recorded(%panels: memref<1x4x8x128xi8>, %norm_panels: memref<1x4x64xf32>,
                    %cb: memref<16xi8>, %act: memref<?x128xi8>, %scales: memref<?x4xf32>,
                    %y: memref<?x64xf32>, %sb0: index, %sb1: index) {
  cq4p.panel_matmul %panels, %norm_panels, %cb, %act, %scales, %y, %sb0, %sb1
      {cq4p.strategy = #cq4p.strategy<tile_rows = 8, min_tile_rows = 8>}
      : memref<1x4x8x128xi8>, memref<1x4x64xf32>, memref<16xi8>, memref<?x128xi8>,
        memref<?x4xf32>, memref<?x64xf32>
  return
}

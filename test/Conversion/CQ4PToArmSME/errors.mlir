// RUN: cq4p-opt %s -split-input-file -verify-diagnostics -convert-cq4p-to-arm-sme

// The R-row leaf addresses a row's ZA slice as one slice register plus an
// offset of 0-7: at most 8 unpacked rows.
func.func @rows9(%panels: memref<2x2x32x128xi8>, %cb: memref<16xi8>,
                 %act: memref<?x256xi8>, %partials: memref<2x9x64xi32>,
                 %sb: index, %row: index, %g0: index) {
  // expected-error @below {{SME2 partials of unpacked rows need at most 8 rows (a ZA slice register plus offsets 0-7), got 9}}
  cq4p.panel_partials %panels, %cb, %act, %partials, %sb, %row, %g0
      : memref<2x2x32x128xi8>, memref<16xi8>, memref<?x256xi8>, memref<2x9x64xi32>
  return
}

// -----

// A recorded rescale loop must follow the partials.
func.func @missing_rescale_loop(%panels: memref<2x2x32x128xi8>, %cb: memref<16xi8>,
                                %act: memref<1x256xi8>, %partials: memref<2x1x64xi32>,
                                %sb: index, %row: index, %g0: index) {
  // expected-error @below {{'cq4p.panel_partials' op expected the loop rescaling its groups right after it (rescale = group_loop)}}
  cq4p.panel_partials %panels, %cb, %act, %partials, %sb, %row, %g0 {rescale = #cq4p.partials_rescale<group_loop>}
      : memref<2x2x32x128xi8>, memref<16xi8>, memref<1x256xi8>, memref<2x1x64xi32>
  return
}

// -----

// The rotation leaf adds whole blocks of 128 outputs (one four-vector LD1H
// of fp16).
func.func @rotation_k192(%panels: memref<2x1x48x128xi8>, %norms: memref<100x1xf16>,
                         %cb: memref<16xf16>, %rotation_t: memref<192x192xf16>,
                         %isr: memref<192xf16>, %ids: memref<?xi64>,
                         %out: memref<?x192xf32>) {
  // expected-error @below {{SME2 rotations need K a multiple of 128, got 192}}
  cq4p.decode_embedding %panels, %norms, %cb, %rotation_t, %isr, %ids, %out
      : memref<2x1x48x128xi8>, memref<100x1xf16>, memref<16xf16>, memref<192x192xf16>,
        memref<192xf16>, memref<?xi64>, memref<?x192xf32>
  return
}

// -----

// The embedding leaf is built for the chunk rows of SME2's own strategy.
func.func @embedding_strategy(%panels: memref<2x1x32x128xi8>, %norms: memref<100x1xf16>,
                              %cb: memref<16xf16>, %rotation_t: memref<128x128xf16>,
                              %isr: memref<128xf16>, %ids: memref<?xi64>,
                              %out: memref<?x128xf32>) {
  // expected-error @+1 {{SME2's embedding leaf takes chunks of 64 rows and K a multiple of 64, got 32 rows and K 128}}
  cq4p.decode_embedding %panels, %norms, %cb, %rotation_t, %isr, %ids, %out
      {cq4p.strategy = #cq4p.strategy<embedding_rows = 32, embedding_min_rows = 16>}
      : memref<2x1x32x128xi8>, memref<100x1xf16>, memref<16xf16>, memref<128x128xf16>,
        memref<128xf16>, memref<?xi64>, memref<?x128xf32>
  return
}

// RUN: cq4p-opt %s -split-input-file -convert-cq4p-to-arm-sme | FileCheck %s

// A model's RMSNorm, residual add and rotary embedding (16-lane
// fixed-length vector code) run on SME2 as a streaming leaf of the same body, marked for
// the 512-bit vector length (cq4p.sme_fixed_lanes: cq4p-export-kernels
// gives it vscale_range 4); the kernel keeps its signature and attributes
// and calls the leaf once.
// CHECK-LABEL: func.func @cq4p_rms_norm_32
// CHECK-SAME: cq4p.kernel = #cq4p.kernel<rms_norm
// CHECK-NEXT: call @cq4p_rms_norm_32_sme_body(%arg0, %arg1, %arg2) : (memref<?x32xf32>, memref<?x32xf32>, index) -> ()
// CHECK-NEXT: return
// CHECK-LABEL: func.func private @cq4p_rms_norm_32_sme_body
// CHECK-SAME: (%[[X:.*]]: memref<?x32xf32>, %[[OUT:.*]]: memref<?x32xf32>, %[[ROWS:.*]]: index)
// CHECK-SAME: attributes {cq4p.sme_fixed_lanes, cq4p.sme_leaf}
// CHECK: scf.for %{{.*}} = %{{.*}} to %[[ROWS]]
// CHECK: vector.load %[[X]]
// CHECK: vector.store %{{.*}}, %[[OUT]]
func.func @cq4p_rms_norm_32(%x: memref<?x32xf32>, %out: memref<?x32xf32>, %rows: index)
    attributes {cq4p.kernel = #cq4p.kernel<rms_norm, n = 32, params = [
        "x": memref<?x32xf32>, "out": memref<?x32xf32>, "rows": index]>} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  scf.for %r = %c0 to %rows step %c1 {
    %v = vector.load %x[%r, %c0] : memref<?x32xf32>, vector<16xf32>
    %s = arith.mulf %v, %v : vector<16xf32>
    vector.store %s, %out[%r, %c0] : memref<?x32xf32>, vector<16xf32>
  }
  return
}

// -----

// The rotary embedding too: its sine and cosine are vector code
// (sinCosLanes), no libm call that would leave streaming mode per lane.
// CHECK-LABEL: func.func @cq4p_rope_32
// CHECK-NEXT: call @cq4p_rope_32_sme_body(%arg0, %arg1, %arg2)
// CHECK-NEXT: return
// CHECK-LABEL: func.func private @cq4p_rope_32_sme_body
// CHECK-SAME: attributes {cq4p.sme_fixed_lanes, cq4p.sme_leaf}
func.func @cq4p_rope_32(%x: memref<?x32xf32>, %out: memref<?x32xf32>, %rows: index)
    attributes {cq4p.kernel = #cq4p.kernel<rope, n = 32, params = [
        "x": memref<?x32xf32>, "out": memref<?x32xf32>, "rows": index]>} {
  return
}

// -----

// Other model kernels keep their NEON code: here a separate gating pass
// (cq4p-compile --gate-in-transform=false).
// CHECK-LABEL: func.func @cq4p_glu_silu_32
// CHECK-NOT: call
// CHECK-NOT: sme_body
func.func @cq4p_glu_silu_32(%g: memref<?x32xf32>, %u: memref<?x32xf32>, %out: memref<?x32xf32>,
                            %rows: index)
    attributes {cq4p.kernel = #cq4p.kernel<glu, n = 32, params = [
        "gate": memref<?x32xf32>, "up": memref<?x32xf32>, "out": memref<?x32xf32>,
        "rows": index]>} {
  return
}

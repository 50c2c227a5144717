// RUN: cq4p-opt %s -split-input-file -convert-cq4p-to-arm-sme | FileCheck %s
// RUN: cq4p-opt %s -split-input-file -convert-cq4p-to-arm-sme \
// RUN:   | grep -o 'cq4p_intr\.[a-z0-9_.]*' | sort -u \
// RUN:   | FileCheck %s --check-prefix=INTRINSICS

// ZA is zeroed, written by outer products and read by `str za` and MOVA
// through the ArmSME dialect's typed operations; cq4p_intr operations do
// only what the ArmSME and ArmSVE dialects lack: ZT0 (LDR, LUTI4), the
// multi-vector ZA operations (SDOT, MOVA), the predicate-as-counter loads
// and stores with their PTRUE, LD1RQ, multi-vector SCVTF, and the
// softmax's FCVTZS and FSCALE; and
// cq4p_intr.opaque, the decode attention's index bases and row addresses
// kept from LLVM's constant folding. The whole set:
// INTRINSICS: cq4p_intr.aarch64.sme.ldr.zt
// INTRINSICS-NEXT: cq4p_intr.aarch64.sme.luti4.lane.zt.x2
// INTRINSICS-NEXT: cq4p_intr.aarch64.sme.read.hor.vg4
// INTRINSICS-NEXT: cq4p_intr.aarch64.sme.read.ver.vg4
// INTRINSICS-NEXT: cq4p_intr.aarch64.sme.read.vg1x4
// INTRINSICS-NEXT: cq4p_intr.aarch64.sme.sdot.lane.za32.vg1x4
// INTRINSICS-NEXT: cq4p_intr.aarch64.sve.fcvtzs
// INTRINSICS-NEXT: cq4p_intr.aarch64.sve.fscale
// INTRINSICS-NEXT: cq4p_intr.aarch64.sve.ld1.pn.x2
// INTRINSICS-NEXT: cq4p_intr.aarch64.sve.ld1.pn.x4
// INTRINSICS-NEXT: cq4p_intr.aarch64.sve.ld1rq
// INTRINSICS-NEXT: cq4p_intr.aarch64.sve.ptrue.c32
// INTRINSICS-NEXT: cq4p_intr.aarch64.sve.ptrue.c8
// INTRINSICS-NEXT: cq4p_intr.aarch64.sve.scvtf.x4
// INTRINSICS-NEXT: cq4p_intr.aarch64.sve.st1.pn.x4
// INTRINSICS-NEXT: cq4p_intr.opaque
// INTRINSICS-NOT: {{.}}

// GEMV: the partials of every group of a super-block in one streaming leaf:
// ZT0 from the int8 codebook, per kg-block two LUTI4 x2 and one multi-vector
// SDOT (lane = the kg-block's place among 4) into the group's ZA slice,
// 16 groups per ZA fill, stored with `str za`.
// CHECK-LABEL: func.func @cq4p_gemv_100x256_gs128
// CHECK: call @cq4p_gemv_100x256_gs128_sme_row_partials(%{{.*}}) : (memref<2x2x32x128xi8>, memref<16xi8>, memref<1x256xi8>, memref<2x1x64xi32>, index, index, index) -> ()
// CHECK-NOT: cq4p.panel_partials
// CHECK-LABEL: func.func private @cq4p_gemv_100x256_gs128_sme_row_partials
// CHECK-SAME: attributes {cq4p.sme_leaf}
// CHECK: memref.alloca() : memref<16xi32>
// CHECK: arith.extui %{{.*}} : vector<[4]xi8> to vector<[4]xi32>
// CHECK: cq4p_intr.aarch64.sme.ldr.zt
// CHECK: %[[ALL:.*]] = arith.constant dense<true> : vector<[16]xi1>
// CHECK: scf.for
// CHECK: "arm_sme.intr.zero"() <{tile_mask = 255 : i32}>
// CHECK: scf.for %[[J:.*]] = %[[FIRST:.*]] to
// CHECK: %[[SLICE_INDEX:.*]] = arith.subi %[[J]], %[[FIRST]] : index
// CHECK: %[[SLICE:.*]] = arith.index_cast %[[SLICE_INDEX]] : index to i32
// CHECK: scf.for
// CHECK: %[[ACT:.*]] = cq4p_intr.aarch64.sve.ld1rq %[[ALL]],
// CHECK: cq4p_intr.aarch64.sve.ld1.pn.x2
// CHECK-COUNT-2: cq4p_intr.aarch64.sme.luti4.lane.zt.x2
// CHECK: cq4p_intr.aarch64.sme.sdot.lane.za32.vg1x4 %[[SLICE]], %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %[[ACT]] {lane = 0 : i32}
// CHECK-COUNT-2: cq4p_intr.aarch64.sme.luti4.lane.zt.x2
// CHECK: cq4p_intr.aarch64.sme.sdot.lane.za32.vg1x4 %[[SLICE]], %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %[[ACT]] {lane = 1 : i32}
// CHECK-COUNT-4: cq4p_intr.aarch64.sme.luti4.lane.zt.x2
// CHECK: scf.for %[[K:.*]] = %[[FIRST]] to
// CHECK: %[[STORE_SLICE_INDEX:.*]] = arith.subi %[[K]], %[[FIRST]] : index
// CHECK: %[[STORE_SLICE:.*]] = arith.index_cast %[[STORE_SLICE_INDEX]] : index to i32
// CHECK: %[[V0:.*]] = arith.addi %[[STORE_SLICE]], %{{.*}} : i32
// CHECK: %[[P0:.*]] = llvm.getelementptr
// CHECK: %[[NO_OFFSET:.*]] = arith.constant 0 : i32
// CHECK-NEXT: "arm_sme.intr.str"(%[[V0]], %[[P0]], %[[NO_OFFSET]]) : (i32, !llvm.ptr, i32) -> ()
// CHECK: %[[SIXTEEN:.*]] = arith.constant 16 : i32
// CHECK-NEXT: %[[V1:.*]] = arith.addi %[[STORE_SLICE]], %[[SIXTEEN]] : i32
// CHECK: "arm_sme.intr.str"(%[[V1]],
// CHECK-COUNT-2: "arm_sme.intr.str"
// CHECK-NOT: "arm_sme.intr.str"
// CHECK: return
func.func @cq4p_gemv_100x256_gs128(%panels: memref<2x2x32x128xi8>, %cb: memref<16xi8>,
                                   %act: memref<1x256xi8>, %partials: memref<2x1x64xi32>,
                                   %sb: index, %row: index, %g0: index) {
  cq4p.panel_partials %panels, %cb, %act, %partials, %sb, %row, %g0
      : memref<2x2x32x128xi8>, memref<16xi8>, memref<1x256xi8>, memref<2x1x64xi32>
  return
}

// -----

// GEMM: per group and four kg-blocks, one four-vector load of the packed
// activation tile and two of the panels (512 bytes); per kg-block two LUTI4
// x2 and four 4-way SMOPA, one per 32-bit ZA tile (16 channels each); the
// group's [16 rows][64 channels] partials are ZA's 64 array vectors in
// order, stored with `str za`.
// CHECK-LABEL: func.func private @cq4p_gemm_100x256_gs128_sme_tile_partials
// CHECK: cq4p_intr.aarch64.sme.ldr.zt
// CHECK: %[[ALL:.*]] = arith.constant dense<true> : vector<[16]xi1>
// CHECK: scf.for
// CHECK: "arm_sme.intr.zero"() <{tile_mask = 255 : i32}>
// CHECK: scf.for %{{.*}} = %{{.*}} to %{{.*}} step %c4
// CHECK: %[[ACTS:.*]] = cq4p_intr.aarch64.sve.ld1.pn.x4
// CHECK: %[[ACT0:.*]] = llvm.extractvalue %[[ACTS]][0]
// CHECK: %[[ACT1:.*]] = llvm.extractvalue %[[ACTS]][1]
// CHECK: cq4p_intr.aarch64.sve.ld1.pn.x4
// CHECK: %[[LOW:.*]] = cq4p_intr.aarch64.sme.luti4.lane.zt.x2
// CHECK: %[[W0:.*]] = llvm.extractvalue %[[LOW]][0]
// CHECK: %[[W1:.*]] = llvm.extractvalue %[[LOW]][1]
// CHECK: %[[HIGH:.*]] = cq4p_intr.aarch64.sme.luti4.lane.zt.x2
// CHECK: %[[W2:.*]] = llvm.extractvalue %[[HIGH]][0]
// CHECK: %[[W3:.*]] = llvm.extractvalue %[[HIGH]][1]
// CHECK-NEXT: "arm_sme.intr.smopa.wide"(%[[ALL]], %[[ALL]], %[[ACT0]], %[[W0]]) <{tile_id = 0 : i32}> : (vector<[16]xi1>, vector<[16]xi1>, vector<[16]xi8>, vector<[16]xi8>) -> ()
// CHECK-NEXT: "arm_sme.intr.smopa.wide"(%[[ALL]], %[[ALL]], %[[ACT0]], %[[W1]]) <{tile_id = 1 : i32}>
// CHECK-NEXT: "arm_sme.intr.smopa.wide"(%[[ALL]], %[[ALL]], %[[ACT0]], %[[W2]]) <{tile_id = 2 : i32}>
// CHECK-NEXT: "arm_sme.intr.smopa.wide"(%[[ALL]], %[[ALL]], %[[ACT0]], %[[W3]]) <{tile_id = 3 : i32}>
// CHECK-COUNT-2: cq4p_intr.aarch64.sme.luti4.lane.zt.x2
// CHECK-COUNT-4: "arm_sme.intr.smopa.wide"(%[[ALL]], %[[ALL]], %[[ACT1]]
// CHECK: cq4p_intr.aarch64.sve.ld1.pn.x4
// CHECK-COUNT-8: "arm_sme.intr.smopa.wide"
// CHECK-NOT: "arm_sme.intr.smopa.wide"
// CHECK: %[[ROWS0:.*]] = llvm.getelementptr %{{.*}}[0] : (!llvm.ptr) -> !llvm.ptr, vector<[16]xi8>
// CHECK-NEXT: %[[V0:.*]] = arith.constant 0 : i32
// CHECK-NEXT: %[[OFFSET0:.*]] = arith.constant 0 : i32
// CHECK-NEXT: "arm_sme.intr.str"(%[[V0]], %[[ROWS0]], %[[OFFSET0]]) : (i32, !llvm.ptr, i32) -> ()
// CHECK-NEXT: %[[V0_AGAIN:.*]] = arith.constant 0 : i32
// CHECK-NEXT: %[[OFFSET1:.*]] = arith.constant 1 : i32
// CHECK-NEXT: "arm_sme.intr.str"(%[[V0_AGAIN]], %[[ROWS0]], %[[OFFSET1]])
// CHECK-COUNT-14: "arm_sme.intr.str"(%{{.*}}, %[[ROWS0]],
// CHECK-NEXT: %[[ROWS1:.*]] = llvm.getelementptr %{{.*}}[16] : (!llvm.ptr) -> !llvm.ptr, vector<[16]xi8>
// CHECK-NEXT: %[[V16:.*]] = arith.constant 16 : i32
// CHECK-NEXT: %[[OFFSET0_AGAIN:.*]] = arith.constant 0 : i32
// CHECK-NEXT: "arm_sme.intr.str"(%[[V16]], %[[ROWS1]], %[[OFFSET0_AGAIN]])
// CHECK-COUNT-47: "arm_sme.intr.str"
// CHECK-NOT: "arm_sme.intr.str"
func.func @cq4p_gemm_100x256_gs128(%panels: memref<2x2x32x128xi8>, %cb: memref<16xi8>,
                                   %packed: memref<2x32x16x4xi8>, %partials: memref<2x16x64xi32>,
                                   %sb: index, %row: index, %g0: index) {
  cq4p.panel_partials %panels, %cb, %packed, %partials, %sb, %row, %g0
      : memref<2x2x32x128xi8>, memref<16xi8>, memref<2x32x16x4xi8>, memref<2x16x64xi32>
  return
}

// -----

// GEMV with its rescale loop (as cq4p-tile-super-blocks emits it): one leaf
// that rescales each group straight out of ZA: the group's norms, one
// multi-vector read of the group's ZA slice (its 64 partials in channel
// order), SCVTF x4, a multiply by the activation scale, one by the norms,
// then the add to the accumulators (four-vector load and store): the
// contract's order, no fused multiply-add. Nothing is stored from ZA and
// the partials buffer is gone.
// CHECK-LABEL: func.func @cq4p_gemv_fused
// CHECK-NOT: memref.alloca
// CHECK: call @cq4p_gemv_fused_sme_row_matmul(%{{.*}}) : (memref<2x2x32x128xi8>, memref<16xi8>, memref<1x256xi8>, memref<?x2xf32>, memref<2x2x64xf32>, memref<1x64xf32>, index, index, index) -> ()
// CHECK-NOT: cq4p.rescale
// CHECK-LABEL: func.func private @cq4p_gemv_fused_sme_row_matmul
// CHECK: cq4p_intr.aarch64.sme.sdot.lane.za32.vg1x4
// CHECK: scf.for
// CHECK: %[[SLICE:.*]] = arith.index_cast %{{.*}} : index to i32
// CHECK: %[[NORMS:.*]] = cq4p_intr.aarch64.sve.ld1.pn.x4
// CHECK: %[[N0:.*]] = llvm.extractvalue %[[NORMS]][0]
// CHECK: %[[READ:.*]] = cq4p_intr.aarch64.sme.read.vg1x4 %[[SLICE]]
// CHECK: %[[I0:.*]] = llvm.extractvalue %[[READ]][0]
// CHECK: %[[SCALE:.*]] = vector.broadcast %{{.*}} : f32 to vector<[4]xf32>
// CHECK: %[[FLOATS:.*]] = cq4p_intr.aarch64.sve.scvtf.x4 %[[I0]],
// CHECK: %[[F0:.*]] = llvm.extractvalue %[[FLOATS]][0]
// CHECK: %[[ACC:.*]] = cq4p_intr.aarch64.sve.ld1.pn.x4
// CHECK: %[[A0:.*]] = llvm.extractvalue %[[ACC]][0]
// CHECK: %[[S0:.*]] = arith.mulf %[[F0]], %[[SCALE]] : vector<[4]xf32>
// CHECK: %[[T0:.*]] = arith.mulf %[[S0]], %[[N0]] : vector<[4]xf32>
// CHECK: arith.addf %[[A0]], %[[T0]] : vector<[4]xf32>
// CHECK-COUNT-3: arith.addf
// CHECK: cq4p_intr.aarch64.sve.st1.pn.x4
// CHECK-NOT: "arm_sme.intr.str"
// CHECK: return
func.func @cq4p_gemv_fused(%panels: memref<2x2x32x128xi8>, %cb: memref<16xi8>,
                           %act: memref<1x256xi8>, %scales: memref<?x2xf32>,
                           %norms: memref<2x2x64xf32>, %accum: memref<1x64xf32>,
                           %sb: index, %row: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %partials = memref.alloca() : memref<2x1x64xi32>
  cq4p.panel_partials %panels, %cb, %act, %partials, %sb, %row, %c0 {rescale = #cq4p.partials_rescale<group_loop>}
      : memref<2x2x32x128xi8>, memref<16xi8>, memref<1x256xi8>, memref<2x1x64xi32>
  scf.for %g = %c0 to %c2 step %c1 {
    %slice = memref.subview %partials[%g, 0, 0] [1, 1, 64] [1, 1, 1]
        : memref<2x1x64xi32> to memref<1x64xi32, strided<[64, 1], offset: ?>>
    cq4p.rescale %slice, %scales, %norms, %accum, %sb, %g, %row
        : memref<1x64xi32, strided<[64, 1], offset: ?>>, memref<?x2xf32>,
          memref<2x2x64xf32>, memref<1x64xf32>
  }
  return
}

// -----

// Three unpacked rows (the rows of a GEMM past its 16-row tiles) with their
// rescale loop: one leaf in which each kg-block is loaded and expanded once
// (one two-vector load, two LUTI4 x2) and feeds one multi-vector SDOT per
// row, row r of the group in ZA slice 3 (j - first) + r; 8 / 3 = 2 groups
// per ZA fill, so every slice is one register plus an offset below 8. Each
// row's activations are one LD1RQ per four kg-blocks, K bytes apart. The
// rescale loads the group's norms once, then per row one multi-vector read
// of its slice, SCVTF x4 and the row's accumulators, 256 bytes apart.
// CHECK-LABEL: func.func @cq4p_gemm_rows
// CHECK: call @cq4p_gemm_rows_sme_rows3_matmul(%{{.*}}) : (memref<2x2x32x128xi8>, memref<16xi8>, memref<?x256xi8>, memref<?x2xf32>, memref<2x2x64xf32>, memref<3x64xf32>, index, index, index) -> ()
// CHECK-NOT: cq4p.rescale
// CHECK-LABEL: func.func private @cq4p_gemm_rows_sme_rows3_matmul
// CHECK-SAME: attributes {cq4p.sme_leaf}
// CHECK: cq4p_intr.aarch64.sme.ldr.zt
// CHECK: %[[ALL:.*]] = arith.constant dense<true> : vector<[16]xi1>
// CHECK: scf.for %[[CHUNK:[^ ]*]] =
// CHECK-NEXT: %[[FILL:.*]] = arith.constant 2 : index
// CHECK-NEXT: %[[FIRST:.*]] = arith.muli %[[CHUNK]], %[[FILL]] : index
// CHECK: "arm_sme.intr.zero"() <{tile_mask = 255 : i32}>
// CHECK-NEXT: scf.for %[[J:[^ ]*]] = %[[FIRST]] to
// CHECK-NEXT: %[[D:.*]] = arith.subi %[[J]], %[[FIRST]] : index
// CHECK-NEXT: %[[ROWS:.*]] = arith.constant 3 : index
// CHECK-NEXT: %[[S0_INDEX:.*]] = arith.muli %[[D]], %[[ROWS]] : index
// CHECK-NEXT: %[[S0:.*]] = arith.index_cast %[[S0_INDEX]] : index to i32
// CHECK-NEXT: %[[ONE:.*]] = arith.constant 1 : i32
// CHECK-NEXT: %[[S1:.*]] = arith.addi %[[S0]], %[[ONE]] : i32
// CHECK-NEXT: %[[TWO:.*]] = arith.constant 2 : i32
// CHECK-NEXT: %[[S2:.*]] = arith.addi %[[S0]], %[[TWO]] : i32
// CHECK: scf.for
// CHECK: %[[A0:.*]] = cq4p_intr.aarch64.sve.ld1rq %[[ALL]], %[[P0:.*]] :
// CHECK-NEXT: %[[K1:.*]] = arith.constant 256 : index
// CHECK-NEXT: %[[K1_64:.*]] = arith.index_cast %[[K1]] : index to i64
// CHECK-NEXT: %[[P1:.*]] = llvm.getelementptr %[[P0]][%[[K1_64]]]
// CHECK-NEXT: %[[A1:.*]] = cq4p_intr.aarch64.sve.ld1rq %[[ALL]], %[[P1]]
// CHECK-NEXT: %[[K2:.*]] = arith.constant 512 : index
// CHECK-NEXT: %[[K2_64:.*]] = arith.index_cast %[[K2]] : index to i64
// CHECK-NEXT: %[[P2:.*]] = llvm.getelementptr %[[P0]][%[[K2_64]]]
// CHECK-NEXT: %[[A2:.*]] = cq4p_intr.aarch64.sve.ld1rq %[[ALL]], %[[P2]]
// CHECK: cq4p_intr.aarch64.sve.ld1.pn.x2
// CHECK-COUNT-2: cq4p_intr.aarch64.sme.luti4.lane.zt.x2
// CHECK: cq4p_intr.aarch64.sme.sdot.lane.za32.vg1x4 %[[S0]], %[[W0:[^,]*]], %[[W1:[^,]*]], %[[W2:[^,]*]], %[[W3:[^,]*]], %[[A0]] {lane = 0 : i32}
// CHECK-NEXT: cq4p_intr.aarch64.sme.sdot.lane.za32.vg1x4 %[[S1]], %[[W0]], %[[W1]], %[[W2]], %[[W3]], %[[A1]] {lane = 0 : i32}
// CHECK-NEXT: cq4p_intr.aarch64.sme.sdot.lane.za32.vg1x4 %[[S2]], %[[W0]], %[[W1]], %[[W2]], %[[W3]], %[[A2]] {lane = 0 : i32}
// CHECK-NEXT: llvm.getelementptr
// CHECK-NEXT: cq4p_intr.aarch64.sve.ld1.pn.x2
// CHECK-COUNT-2: cq4p_intr.aarch64.sme.luti4.lane.zt.x2
// CHECK: cq4p_intr.aarch64.sme.sdot.lane.za32.vg1x4 %[[S0]], %{{.*}}, %[[A0]]
// CHECK-COUNT-8: cq4p_intr.aarch64.sme.sdot.lane.za32.vg1x4 {{.*}} -> ()
// CHECK-NEXT: }
// CHECK-NEXT: }
// CHECK-NEXT: scf.for %[[J2:[^ ]*]] = %[[FIRST]] to
// CHECK: %[[T0:.*]] = arith.index_cast %{{.*}} : index to i32
// CHECK-NEXT: %[[ONE2:.*]] = arith.constant 1 : i32
// CHECK-NEXT: %[[T1:.*]] = arith.addi %[[T0]], %[[ONE2]] : i32
// CHECK-NEXT: %[[TWO2:.*]] = arith.constant 2 : i32
// CHECK-NEXT: %[[T2:.*]] = arith.addi %[[T0]], %[[TWO2]] : i32
// CHECK: %[[NORMS:.*]] = cq4p_intr.aarch64.sve.ld1.pn.x4
// CHECK: %[[ACCUM0:.*]] = llvm.inttoptr
// CHECK-NEXT: cq4p_intr.aarch64.sme.read.vg1x4 %[[T0]]
// CHECK: cq4p_intr.aarch64.sve.scvtf.x4
// CHECK: cq4p_intr.aarch64.sve.ld1.pn.x4 %{{.*}}, %[[ACCUM0]]
// CHECK: cq4p_intr.aarch64.sve.st1.pn.x4 %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %[[ACCUM0]]
// CHECK-NEXT: cq4p_intr.aarch64.sme.read.vg1x4 %[[T1]]
// CHECK: %[[ROW1:.*]] = arith.constant 256 : index
// CHECK-NEXT: %[[ROW1_64:.*]] = arith.index_cast %[[ROW1]] : index to i64
// CHECK-NEXT: %[[ACCUM1:.*]] = llvm.getelementptr %[[ACCUM0]][%[[ROW1_64]]]
// CHECK: cq4p_intr.aarch64.sve.ld1.pn.x4 %{{.*}}, %[[ACCUM1]]
// CHECK: cq4p_intr.aarch64.sve.st1.pn.x4 %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %[[ACCUM1]]
// CHECK-NEXT: cq4p_intr.aarch64.sme.read.vg1x4 %[[T2]]
// CHECK: %[[ROW2:.*]] = arith.constant 512 : index
// CHECK-NEXT: %[[ROW2_64:.*]] = arith.index_cast %[[ROW2]] : index to i64
// CHECK-NEXT: %[[ACCUM2:.*]] = llvm.getelementptr %[[ACCUM0]][%[[ROW2_64]]]
// CHECK: cq4p_intr.aarch64.sve.st1.pn.x4 %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %[[ACCUM2]]
// CHECK-NOT: cq4p_intr.aarch64.sme.read.vg1x4
// CHECK-NOT: cq4p_intr.aarch64.sve.ld1.pn.x4
// CHECK-NOT: "arm_sme.intr.str"
// CHECK: return
func.func @cq4p_gemm_rows(%panels: memref<2x2x32x128xi8>, %cb: memref<16xi8>,
                          %act: memref<?x256xi8>, %scales: memref<?x2xf32>,
                          %norms: memref<2x2x64xf32>, %accum: memref<3x64xf32>,
                          %sb: index, %row: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %partials = memref.alloca() : memref<2x3x64xi32>
  cq4p.panel_partials %panels, %cb, %act, %partials, %sb, %row, %c0 {rescale = #cq4p.partials_rescale<group_loop>}
      : memref<2x2x32x128xi8>, memref<16xi8>, memref<?x256xi8>, memref<2x3x64xi32>
  scf.for %g = %c0 to %c2 step %c1 {
    %slice = memref.subview %partials[%g, 0, 0] [1, 3, 64] [1, 1, 1]
        : memref<2x3x64xi32> to memref<3x64xi32, strided<[64, 1], offset: ?>>
    cq4p.rescale %slice, %scales, %norms, %accum, %sb, %g, %row
        : memref<3x64xi32, strided<[64, 1], offset: ?>>, memref<?x2xf32>,
          memref<2x2x64xf32>, memref<3x64xf32>
  }
  return
}

// -----

// Two unpacked rows, partials stored: partials[j, r, 16i..] (byte 512 j +
// 256 r + 64 i) from ZA array vector s_r + 16i, s_1 = s_0 + 1.
// CHECK-LABEL: func.func private @cq4p_gemm_rows2_sme_rows2_partials
// CHECK-COUNT-8: cq4p_intr.aarch64.sme.sdot.lane.za32.vg1x4 {{.*}} -> ()
// CHECK-NOT: cq4p_intr.aarch64.sme.sdot.lane.za32.vg1x4
// CHECK: scf.for %[[J:[^ ]*]] =
// CHECK: %[[S0:.*]] = arith.index_cast %{{.*}} : index to i32
// CHECK-NEXT: %[[ONE:.*]] = arith.constant 1 : i32
// CHECK-NEXT: %[[S1:.*]] = arith.addi %[[S0]], %[[ONE]] : i32
// CHECK: %[[V00:.*]] = arith.addi %[[S0]], %{{.*}} : i32
// CHECK-NEXT: %[[GROUP_BYTES:.*]] = arith.constant 512 : index
// CHECK-NEXT: arith.muli %[[J]], %[[GROUP_BYTES]] : index
// CHECK-NEXT: arith.constant 0 : index
// CHECK: "arm_sme.intr.str"(%[[V00]],
// CHECK: %[[SIXTEEN:.*]] = arith.constant 16 : i32
// CHECK-NEXT: arith.addi %[[S0]], %[[SIXTEEN]] : i32
// CHECK: arith.constant 64 : index
// CHECK: "arm_sme.intr.str"
// CHECK-COUNT-2: "arm_sme.intr.str"
// CHECK: %[[V10:.*]] = arith.addi %[[S1]], %{{.*}} : i32
// CHECK: arith.constant 256 : index
// CHECK: "arm_sme.intr.str"(%[[V10]],
// CHECK: %[[SIXTEEN1:.*]] = arith.constant 16 : i32
// CHECK-NEXT: arith.addi %[[S1]], %[[SIXTEEN1]] : i32
// CHECK: arith.constant 320 : index
// CHECK: "arm_sme.intr.str"
// CHECK-COUNT-2: "arm_sme.intr.str"
// CHECK-NOT: "arm_sme.intr.str"
func.func @cq4p_gemm_rows2(%panels: memref<2x2x32x128xi8>, %cb: memref<16xi8>,
                           %act: memref<?x256xi8>, %partials: memref<2x2x64xi32>,
                           %sb: index, %row: index, %g0: index) {
  cq4p.panel_partials %panels, %cb, %act, %partials, %sb, %row, %g0
      : memref<2x2x32x128xi8>, memref<16xi8>, memref<?x256xi8>, memref<2x2x64xi32>
  return
}

// -----

// GEMM tile with its rescale loop: per group, row r of the tile is
// horizontal slice r of the four 32-bit ZA tiles, read with four MOVA and
// rescaled like the GEMV's; the group's norms are loaded once for its 16
// rows. The accumulators are a view with a dynamic row stride (y itself for
// a whole tile): row r is r strides from the view's first element.
// CHECK-LABEL: func.func @cq4p_gemm_fused
// CHECK: call @cq4p_gemm_fused_sme_tile_matmul
// CHECK-LABEL: func.func private @cq4p_gemm_fused_sme_tile_matmul
// CHECK-SAME: %[[ACCUM:[^:]*]]: memref<16x64xf32, strided<[?, 1], offset: ?>>
// CHECK-COUNT-16: "arm_sme.intr.smopa.wide"
// CHECK: %{{.*}}, %[[OFFSET:.*]], %{{.*}}:2, %[[STRIDES:.*]]:2 = memref.extract_strided_metadata %[[ACCUM]]
// CHECK: %[[FIRST:.*]] = arith.muli %[[OFFSET]], %c4
// CHECK: %[[ROW_BYTES:.*]] = arith.muli %[[STRIDES]]#0, %c4
// CHECK: cq4p_intr.aarch64.sve.ld1.pn.x4
// CHECK-NOT: cq4p_intr.aarch64.sve.ld1.pn.x4
// CHECK: %[[LANES:.*]] = arith.constant dense<true> : vector<[4]xi1>
// CHECK: %[[UNDEFINED:.*]] = llvm.mlir.poison : vector<[4]xi32>
// CHECK: %[[ROW0:.*]] = arith.constant 0 : i32
// CHECK-NEXT: %[[T0:.*]] = "arm_sme.intr.read.horiz"(%[[UNDEFINED]], %[[LANES]], %[[ROW0]]) <{tile_id = 0 : i32}> : (vector<[4]xi32>, vector<[4]xi1>, i32) -> vector<[4]xi32>
// CHECK: %[[T1:.*]] = "arm_sme.intr.read.horiz"(%[[UNDEFINED]], %[[LANES]], %{{.*}}) <{tile_id = 1 : i32}>
// CHECK: %[[T2:.*]] = "arm_sme.intr.read.horiz"(%[[UNDEFINED]], %[[LANES]], %{{.*}}) <{tile_id = 2 : i32}>
// CHECK: %[[T3:.*]] = "arm_sme.intr.read.horiz"(%[[UNDEFINED]], %[[LANES]], %{{.*}}) <{tile_id = 3 : i32}>
// CHECK: vector.broadcast
// CHECK: arith.muli %[[ROW_BYTES]], %c0{{(_[0-9]+)?}} : index
// CHECK: cq4p_intr.aarch64.sve.scvtf.x4 %[[T0]], %[[T1]], %[[T2]], %[[T3]]
// CHECK: cq4p_intr.aarch64.sve.ld1.pn.x4
// CHECK: cq4p_intr.aarch64.sve.st1.pn.x4
// CHECK: %[[ROW1:.*]] = arith.constant 1 : i32
// CHECK-NEXT: "arm_sme.intr.read.horiz"(%[[UNDEFINED]], %[[LANES]], %[[ROW1]]) <{tile_id = 0 : i32}>
// CHECK-COUNT-59: "arm_sme.intr.read.horiz"
// CHECK-NOT: "arm_sme.intr.read.horiz"
// CHECK-NOT: "arm_sme.intr.str"
// CHECK: return
func.func @cq4p_gemm_fused(%panels: memref<2x2x32x128xi8>, %cb: memref<16xi8>,
                           %packed: memref<2x32x16x4xi8>, %scales: memref<16x2xf32>,
                           %norms: memref<2x2x64xf32>,
                           %accum: memref<16x64xf32, strided<[?, 1], offset: ?>>,
                           %sb: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %partials = memref.alloca() : memref<2x16x64xi32>
  cq4p.panel_partials %panels, %cb, %packed, %partials, %sb, %c0, %c0 {rescale = #cq4p.partials_rescale<group_loop>}
      : memref<2x2x32x128xi8>, memref<16xi8>, memref<2x32x16x4xi8>, memref<2x16x64xi32>
  scf.for %j = %c0 to %c2 step %c1 {
    %g = arith.addi %c0, %j : index
    %slice = memref.subview %partials[%j, 0, 0] [1, 16, 64] [1, 1, 1]
        : memref<2x16x64xi32> to memref<16x64xi32, strided<[64, 1], offset: ?>>
    cq4p.rescale %slice, %scales, %norms, %accum, %sb, %g, %c0
        : memref<16x64xi32, strided<[64, 1], offset: ?>>, memref<16x2xf32>,
          memref<2x2x64xf32>, memref<16x64xf32, strided<[?, 1], offset: ?>>
  }
  return
}

// -----

// Packing a 16-row activation tile in a streaming leaf: per 64 K (16
// words), the 16 rows as horizontal slices of ZA tile 0 (LD1W; a row past
// the end of the activations has no active lane, so its slice is zeros),
// then the vertical slices four at a time (MOVA x4), each word j of every
// row being kg-block j's operand, stored with one four-vector store. K =
// 320 is 80 words: 5 whole chunks in a loop, no tail. The scales: one
// predicated load (the rows that exist) and one store per 16.
// CHECK-LABEL: func.func @cq4p_gemm_pack
// CHECK: call @cq4p_gemm_pack_sme_pack_tile(%{{.*}}) : (memref<?x320xi8>, memref<?x5xf32>, memref<5x16x16x4xi8>, memref<16x5xf32>, index) -> ()
// CHECK-NOT: cq4p.pack_activation_tile
// CHECK-LABEL: func.func private @cq4p_gemm_pack_sme_pack_tile
// CHECK-SAME: attributes {cq4p.sme_leaf}
// CHECK: %[[ROWS:.*]] = memref.dim
// CHECK: %[[LEFT:.*]] = arith.subi %[[ROWS]],
// CHECK: %[[VALID:.*]] = arith.minsi %{{.*}}, %c16
// CHECK: %[[EXISTS0:.*]] = arith.cmpi slt, %c0{{.*}}, %[[VALID]]
// CHECK: %[[LANES0:.*]] = arith.select %[[EXISTS0]], %c16{{.*}}, %c0
// CHECK: %[[MASK0:.*]] = vector.create_mask %[[LANES0]] : vector<[4]xi1>
// CHECK: scf.for %{{.*}} = %c0{{.*}} to %c5{{(_[0-9]+)?}} step %c1
// CHECK: "arm_sme.intr.ld1w.horiz"(%[[MASK0]], %{{.*}}, %{{.*}}) <{tile_id = 0 : i32}>
// CHECK-COUNT-15: "arm_sme.intr.ld1w.horiz"
// CHECK: cq4p_intr.aarch64.sme.read.ver.vg4
// CHECK: cq4p_intr.aarch64.sve.st1.pn.x4
// CHECK-COUNT-3: cq4p_intr.aarch64.sme.read.ver.vg4
// CHECK: }
// CHECK-NOT: "arm_sme.intr.ld1w.horiz"
// CHECK: %[[PRESENT:.*]] = arith.muli %[[VALID]], %c5
// CHECK: llvm.intr.masked.load
// CHECK-COUNT-4: llvm.intr.masked.load
// CHECK-NOT: llvm.intr.masked.load
// CHECK: return
func.func @cq4p_gemm_pack(%act: memref<?x320xi8>, %scales: memref<?x5xf32>,
                          %packed: memref<5x16x16x4xi8>, %packed_scales: memref<16x5xf32>,
                          %row: index) {
  cq4p.pack_activation_tile %act, %scales, %packed, %packed_scales, %row
      : memref<?x320xi8>, memref<?x5xf32>, memref<5x16x16x4xi8>, memref<16x5xf32>
  return
}

// -----

// A tail of fewer than 16 words (K = 96: 24 words, one whole chunk and 8
// words) is loaded with 8 lanes per row and stored as two quads.
// CHECK-LABEL: func.func private @cq4p_gemm_pack_tail_sme_pack_tile
// CHECK: scf.for
// CHECK-COUNT-16: "arm_sme.intr.ld1w.horiz"
// CHECK-COUNT-4: cq4p_intr.aarch64.sme.read.ver.vg4
// CHECK: }
// CHECK: %[[EIGHT:.*]] = arith.select %{{.*}}, %c8{{(_[0-9]+)?}}, %c0
// CHECK: vector.create_mask %[[EIGHT]] : vector<[4]xi1>
// CHECK-COUNT-16: "arm_sme.intr.ld1w.horiz"
// CHECK-COUNT-2: cq4p_intr.aarch64.sme.read.ver.vg4
// CHECK-NOT: cq4p_intr.aarch64.sme.read.ver.vg4
func.func @cq4p_gemm_pack_tail(%act: memref<?x96xi8>, %scales: memref<?x3xf32>,
                               %packed: memref<3x8x16x4xi8>, %packed_scales: memref<16x3xf32>,
                               %row: index) {
  cq4p.pack_activation_tile %act, %scales, %packed, %packed_scales, %row
      : memref<?x96xi8>, memref<?x3xf32>, memref<3x8x16x4xi8>, memref<16x3xf32>
  return
}

// -----

// Partials whose rescale cq4p-tile-super-blocks did not record (no
// `rescale = group_loop`; here the loop runs over the groups in reverse) are
// stored from ZA and rescaled by cq4p.rescale.
// CHECK-LABEL: func.func @cq4p_gemv_not_fused
// CHECK: call @cq4p_gemv_not_fused_sme_row_partials
// CHECK: cq4p.rescale
func.func @cq4p_gemv_not_fused(%panels: memref<2x2x32x128xi8>, %cb: memref<16xi8>,
                               %act: memref<1x256xi8>, %scales: memref<?x2xf32>,
                               %norms: memref<2x2x64xf32>, %accum: memref<1x64xf32>,
                               %sb: index, %row: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %partials = memref.alloca() : memref<2x1x64xi32>
  cq4p.panel_partials %panels, %cb, %act, %partials, %sb, %row, %c0
      : memref<2x2x32x128xi8>, memref<16xi8>, memref<1x256xi8>, memref<2x1x64xi32>
  scf.for %j = %c0 to %c2 step %c1 {
    %g = arith.subi %c1, %j : index
    %slice = memref.subview %partials[%g, 0, 0] [1, 1, 64] [1, 1, 1]
        : memref<2x1x64xi32> to memref<1x64xi32, strided<[64, 1], offset: ?>>
    cq4p.rescale %slice, %scales, %norms, %accum, %sb, %g, %row
        : memref<1x64xi32, strided<[64, 1], offset: ?>>, memref<?x2xf32>,
          memref<2x2x64xf32>, memref<1x64xf32>
  }
  return
}

// -----

// Attention (head dim 64): one query row calls the streaming decode leaf
// (DecodeAttention.cpp); more rows transpose the keys (once per KV head)
// and the queries into tiles of 16 (LD1W rows into ZA0.S, MOVA x4 columns
// out), then per query tile one streaming leaf: Q K^T as FMOPAs of
// four-vector loads into ZA0.S per tile of 16 keys (its rows keys, its
// lanes the 16 query rows), stored with `str za` from ZA array vectors 4c;
// the softmax down the columns in streaming SVE; P V as one LD1W x4 of a
// key's values and four FMOPA per key, one per 32-bit tile (16 dimensions
// each), row r of tile t stored from ZA array vector 4r + t; each output
// row divided by its sum. The caller keeps no vector code.
// CHECK-LABEL: func.func @cq4p_attention
// CHECK: %[[ROWS:.*]] = memref.dim %{{.*}}, %c0
// CHECK: %[[ONE:.*]] = arith.cmpi ult, %[[ROWS]], %c2
// CHECK: scf.if %[[ONE]] {
// CHECK-NEXT: %[[DECODE:.*]] = arith.cmpi eq, %[[ROWS]], %c1
// CHECK-NEXT: scf.if %[[DECODE]] {
// CHECK-NEXT: %[[AT0:.*]] = arith.constant 0 : index
// CHECK-NEXT: call @cq4p_attention_sme_decode(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %[[AT0]], %{{.*}}, %{{.*}})
// CHECK: } else {
// CHECK-NOT: cq4p.attention
// CHECK: scf.for %[[HEAD:.*]] =
// CHECK: scf.if
// CHECK-NEXT: call @cq4p_attention_sme_transpose_keys
// CHECK: call @cq4p_attention_sme_transpose_queries
// CHECK: scf.for
// CHECK: call @cq4p_attention_sme_prefill_tile
// CHECK-NOT: cq4p.attention
// CHECK-NOT: vector<16xf32>
// CHECK: return
// The decode leaf, a group of 2 heads (K = 8 key classes): the group's
// query rows transposed once into Qr (16 LD1W rows of ZA0.S, columns out);
// per block, the whole tiles of 16 keys in a loop: ZA1.S zeroed (mask
// 0x22), the 16 key rows of three 16-dim blocks into ZA0.S, ZA2.S and
// ZA3.S, then the fourth into ZA0.S, columns out and FMOPAs into ZA1.S;
// the scores read back as 2 vectors of 8 merged rows each; then the last
// tile if partial, its keys past the end masked; the block's exp; per 64
// dims, ZA zeroed, four FMOPAs per key into the four tiles with the key's
// class as the row predicate, all 64 ZA vectors stored and folded into
// the accumulators.
// ZA slices are an opaque base (0, 4, 8, 12) plus an offset, and each key
// row's address the last one's plus a row through cq4p_intr.opaque, so
// that LLVM keeps index registers and one add per row; the exponentials
// are exp2Lanes' (the scores in base 2, a polynomial, FSCALE by k), not
// math.exp.
// CHECK-LABEL: func.func private @cq4p_attention_sme_decode
// CHECK-SAME: (%{{.*}}: memref<?x128xf32>, %{{.*}}: memref<?x64xf32>, %{{.*}}: memref<?x64xf32>, %{{.*}}: memref<?x128xf32>, %{{.*}}: index, %{{.*}}: index, %{{.*}}: index)
// CHECK: %[[SLICE0:.*]] = cq4p_intr.opaque %c0_i32 : i32
// CHECK: %[[SLICE4:.*]] = cq4p_intr.opaque %c4_i32 : i32
// CHECK: cq4p_intr.opaque %c8_i32 : i32
// CHECK: cq4p_intr.opaque %c12_i32 : i32
// CHECK: scf.for
// CHECK-COUNT-16: "arm_sme.intr.ld1w.horiz"({{.*}}) <{tile_id = 0 : i32}>
// CHECK: cq4p_intr.aarch64.sme.read.ver.vg4
// CHECK: scf.for {{.*}} -> (vector<[4]xf32>, vector<[4]xf32>)
// CHECK: scf.for {{.*}} -> (vector<[4]xf32>)
// CHECK-NEXT: arith.muli
// CHECK-NEXT: arith.addi
// CHECK-NEXT: arith.subi
// CHECK-NEXT: "arm_sme.intr.zero"() <{tile_mask = 34 : i32}>
// CHECK: "arm_sme.intr.ld1w.horiz"(%{{.*}}, %[[ROW0:.*]], %[[SLICE0]]) <{tile_id = 0 : i32}>
// CHECK: "arm_sme.intr.ld1w.horiz"({{.*}}) <{tile_id = 2 : i32}>
// CHECK: "arm_sme.intr.ld1w.horiz"({{.*}}) <{tile_id = 3 : i32}>
// CHECK: %[[NEXT:.*]] = llvm.getelementptr %[[ROW0]][256] : (!llvm.ptr) -> !llvm.ptr, i8
// CHECK: %[[ROW1:.*]] = cq4p_intr.opaque %[[NEXT]] : !llvm.ptr
// CHECK: %[[SLICE1:.*]] = arith.addi %[[SLICE0]], %c1_i32{{.*}} : i32
// CHECK: "arm_sme.intr.ld1w.horiz"(%{{.*}}, %[[ROW1]], %[[SLICE1]]) <{tile_id = 0 : i32}>
// CHECK: "arm_sme.intr.ld1w.horiz"(%{{.*}}, %{{.*}}, %[[SLICE4]]) <{tile_id = 0 : i32}>
// CHECK: cq4p_intr.aarch64.sme.read.ver.vg4 %{{.*}} {tile = 3 : i32}
// CHECK: cq4p_intr.aarch64.sve.ld1.pn.x4
// CHECK: "arm_sme.intr.mopa"(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}) <{tile_id = 1 : i32}>
// CHECK-COUNT-8: "arm_sme.intr.read.horiz"({{.*}}) <{tile_id = 1 : i32}>
// CHECK: arith.maximumf
// CHECK-COUNT-8: "arm_sme.intr.read.horiz"({{.*}}) <{tile_id = 1 : i32}>
// CHECK-NOT: arith.cmpi slt, %{{.*}}, %{{.*}} : vector<[4]xi32>
// CHECK: scf.yield
// CHECK: scf.if %{{.*}} -> (vector<[4]xf32>) {
// CHECK: "arm_sme.intr.zero"() <{tile_mask = 34 : i32}>
// CHECK: arith.cmpi slt, %{{.*}}, %{{.*}} : vector<[4]xi32>
// CHECK-NOT: math.exp
// CHECK: cq4p_intr.aarch64.sve.fcvtzs
// CHECK: cq4p_intr.aarch64.sve.fscale
// CHECK-NOT: math.exp
// CHECK: cq4p_intr.aarch64.sve.fcvtzs
// CHECK: cq4p_intr.aarch64.sve.fscale
// CHECK-NOT: math.exp
// CHECK: "arm_sme.intr.zero"() <{tile_mask = 255 : i32}>
// CHECK: scf.for
// CHECK: cq4p_intr.aarch64.sve.ld1.pn.x4
// CHECK: "arm_sme.intr.mopa"(%[[CLASS0:.*]], %{{.*}}, %[[P0:.*]], %{{.*}}) <{tile_id = 0 : i32}>
// CHECK: "arm_sme.intr.mopa"(%[[CLASS0]], %{{.*}}, %[[P0]], %{{.*}}) <{tile_id = 3 : i32}>
// CHECK: cq4p_intr.aarch64.sve.ld1.pn.x4
// CHECK: "arm_sme.intr.mopa"(%[[CLASS1:.*]], %{{.*}}, %[[P0]], %{{.*}}) <{tile_id = 0 : i32}>
// CHECK-COUNT-64: "arm_sme.intr.str"
// CHECK: math.fma
// CHECK-LABEL: func.func private @cq4p_attention_sme_transpose_keys
// CHECK: scf.for
// CHECK-COUNT-16: "arm_sme.intr.ld1w.horiz"
// CHECK: cq4p_intr.aarch64.sme.read.ver.vg4
// CHECK: cq4p_intr.aarch64.sve.st1.pn.x4
// The queries' leaf multiplies them by scale log2(e) (0.125 * 1.4427):
// CHECK-LABEL: func.func private @cq4p_attention_sme_transpose_queries
// CHECK: %[[C:.*]] = arith.constant 0.180336878 : f32
// CHECK: %[[CS:.*]] = vector.broadcast %[[C]] : f32 to vector<[4]xf32>
// CHECK: cq4p_intr.aarch64.sme.read.ver.vg4
// CHECK-COUNT-4: arith.mulf %{{.*}}, %[[CS]] : vector<[4]xf32>
// CHECK: cq4p_intr.aarch64.sve.st1.pn.x4
// The query tile's leaf: Q K^T (64 FMOPAs per key tile into ZA0.S, its 16
// rows stored four per MOVA and ST1W) in three loops of key tiles, the
// middle one (the whole tiles every row sees) folding its rows' largest
// as they leave ZA; the softmax in streaming SVE: the largest score per
// row over the keys every row sees around those tiles, one at a time, and
// over the last keys with the causal mask; 2^(s - m) (the scores in base
// 2) as one FSUB and the polynomial (its 2^k an FSCALE), stored back four
// rows per ST1W x4;
// the masked keys' weights selected to 0 after the exponential; P V (one
// LD1W x4 of a key's values and four FMOPAs); each output row times its
// inverse sum.
// CHECK-LABEL: func.func private @cq4p_attention_sme_prefill_tile
// CHECK-SAME: (%[[QT:[^:]*]]: memref<?x64x16xf32>, %{{[^:]*}}: index, %[[KT:[^:]*]]: memref<?x64x16xf32>, %[[ST:[^:]*]]: memref<?x16xf32>, %{{[^:]*}}: memref<?x64xf32>, {{.*}}, %[[OUT:[^:]*]]: memref<?x128xf32>)
// CHECK: %[[LANES:.*]] = arith.constant dense<true> : vector<[4]xi1>
// CHECK: scf.for
// CHECK: "arm_sme.intr.zero"() <{tile_mask = 255 : i32}>
// CHECK: %[[Q:.*]] = cq4p_intr.aarch64.sve.ld1.pn.x4
// CHECK: %[[Q0:.*]] = llvm.extractvalue %[[Q]][0]
// CHECK: %[[K:.*]] = cq4p_intr.aarch64.sve.ld1.pn.x4
// CHECK: %[[K0:.*]] = llvm.extractvalue %[[K]][0]
// CHECK: "arm_sme.intr.mopa"(%[[LANES]], %[[LANES]], %[[K0]], %[[Q0]]) <{tile_id = 0 : i32}> : (vector<[4]xi1>, vector<[4]xi1>, vector<[4]xf32>, vector<[4]xf32>) -> ()
// CHECK-COUNT-63: "arm_sme.intr.mopa"
// CHECK-NOT: "arm_sme.intr.mopa"
// CHECK: %[[ROW0:.*]] = arith.constant 0 : i32
// CHECK: cq4p_intr.aarch64.sme.read.hor.vg4 %[[ROW0]] {tile = 0 : i32}
// CHECK: cq4p_intr.aarch64.sve.st1.pn.x4
// CHECK: %[[ROW4:.*]] = arith.constant 4 : i32
// CHECK: cq4p_intr.aarch64.sme.read.hor.vg4 %[[ROW4]] {tile = 0 : i32}
// CHECK: cq4p_intr.aarch64.sve.st1.pn.x4
// CHECK-COUNT-2: cq4p_intr.aarch64.sme.read.hor.vg4
// CHECK-NOT: "arm_sme.intr.str"
// CHECK-NOT: arith.maximumf
// CHECK: scf.for {{.*}} iter_args(%{{.*}}) -> (vector<[4]xf32>) {
// CHECK-COUNT-64: "arm_sme.intr.mopa"
// CHECK: cq4p_intr.aarch64.sme.read.hor.vg4
// CHECK: cq4p_intr.aarch64.sve.st1.pn.x4
// CHECK-COUNT-4: arith.maximumf
// CHECK: cq4p_intr.aarch64.sme.read.hor.vg4
// CHECK: scf.yield
// CHECK: scf.for %{{[^ ]*}} = %{{[^ ]*}} to %{{[^ ]*}} step %{{[^ ]*}} {
// CHECK-COUNT-64: "arm_sme.intr.mopa"
// CHECK-NOT: arith.maximumf
// CHECK: vector.step : vector<[4]xindex>
// CHECK: scf.for
// CHECK-NOT: arith.cmpi
// CHECK: arith.maximumf
// CHECK: scf.yield
// CHECK: scf.for
// CHECK-NOT: arith.cmpi
// CHECK: arith.maximumf
// CHECK: scf.yield
// CHECK: %[[MAX:.*]] = scf.for
// CHECK: %[[KEY:.*]] = vector.broadcast %{{.*}} : i32 to vector<[4]xi32>
// CHECK-NEXT: %[[SEEN:.*]] = arith.cmpi sle, %[[KEY]], %{{.*}} : vector<[4]xi32>
// CHECK: arith.select %[[SEEN]], %{{.*}}, %{{.*}} : vector<[4]xi1>, vector<[4]xf32>
// CHECK-NEXT: arith.maximumf
// CHECK: scf.for
// CHECK: cq4p_intr.aarch64.sve.ld1.pn.x4
// CHECK: arith.subf %{{.*}}, %[[MAX]] : vector<[4]xf32>
// CHECK: cq4p_intr.aarch64.sve.fscale
// CHECK: cq4p_intr.aarch64.sve.st1.pn.x4
// CHECK-NOT: math.exp
// CHECK: scf.for
// CHECK: scf.for
// CHECK: arith.cmpi sle
// CHECK: arith.subf %{{.*}}, %[[MAX]] : vector<[4]xf32>
// CHECK: arith.select
// CHECK: arith.divf
// CHECK: scf.for
// CHECK: "arm_sme.intr.zero"() <{tile_mask = 255 : i32}>
// CHECK: scf.for
// CHECK: %[[P:.*]] = llvm.load %{{.*}} : !llvm.ptr -> vector<[4]xf32>
// CHECK: %[[V:.*]] = cq4p_intr.aarch64.sve.ld1.pn.x4
// CHECK: %[[V0:.*]] = llvm.extractvalue %[[V]][0]
// CHECK: "arm_sme.intr.mopa"(%[[ALL:[^,]*]], %[[ALL]], %[[P]], %[[V0]]) <{tile_id = 0 : i32}>
// CHECK: "arm_sme.intr.mopa"(%[[ALL]], %[[ALL]], %[[P]], %{{.*}}) <{tile_id = 1 : i32}>
// CHECK: "arm_sme.intr.mopa"(%[[ALL]], %[[ALL]], %[[P]], %{{.*}}) <{tile_id = 2 : i32}>
// CHECK: "arm_sme.intr.mopa"(%[[ALL]], %[[ALL]], %[[P]], %{{.*}}) <{tile_id = 3 : i32}>
// CHECK-NEXT: }
// CHECK: %[[VECTOR0:.*]] = arith.constant 0 : i32
// CHECK: "arm_sme.intr.str"(%[[VECTOR0]],
// CHECK: %[[VECTOR1:.*]] = arith.constant 1 : i32
// CHECK: "arm_sme.intr.str"(%[[VECTOR1]],
// CHECK-COUNT-62: "arm_sme.intr.str"
// CHECK-NOT: "arm_sme.intr.str"
// CHECK: memref.extract_aligned_pointer_as_index %[[OUT]]
// CHECK: scf.for
// CHECK: %[[INVERSE:.*]] = llvm.load %{{.*}} : !llvm.ptr -> f32
// CHECK: %[[SPLAT:.*]] = vector.broadcast %[[INVERSE]] : f32 to vector<[4]xf32>
// CHECK-COUNT-4: arith.mulf %{{.*}}, %[[SPLAT]] : vector<[4]xf32>
// CHECK-NOT: arith.mulf
// CHECK: return
func.func @cq4p_attention(%q: memref<?x128xf32>, %k: memref<?x64xf32>, %v: memref<?x64xf32>,
                          %out: memref<?x128xf32>, %h0: index, %h1: index) {
  cq4p.attention %q, %k, %v, %out, %h0, %h1 {num_heads = 2 : i64, num_kv_heads = 1 : i64,
      head_dim = 64 : i64, window = 0 : i64, scale = 0.125 : f32}
      : memref<?x128xf32>, memref<?x64xf32>, memref<?x64xf32>, memref<?x128xf32>
  return
}

// -----

// A model's attention over its KV cache (grouped heads, a sliding window):
// the query rows sit at %pos, the keys are the cache's first %pos + rows;
// the keys are transposed from the window's first tile on, and each key is
// masked by the window as well as by causality.
// CHECK-LABEL: func.func @cached_attention
// CHECK-SAME: %[[POS:[^:]*]]: index)
// CHECK: scf.if
// CHECK: scf.if
// CHECK-NEXT: call @cached_attention_sme_decode(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %[[POS]], %{{.*}}, %{{.*}})
// CHECK: } else {
// CHECK: %[[KEYS:.*]] = arith.addi %[[POS]], %{{.*}} : index
// CHECK: scf.for
// CHECK: call @cached_attention_sme_transpose_keys(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %[[KEYS]])
// CHECK: scf.for
// CHECK: call @cached_attention_sme_prefill_tile
// The window's keys masked in the leaf's softmax: those some row's window
// has left, before the ones every row sees, and the causal ones after.
// CHECK-LABEL: func.func private @cached_attention_sme_prefill_tile
// CHECK: vector.step : vector<[4]xindex>
// CHECK: scf.for
// CHECK: arith.cmpi sle, %{{.*}}, %{{.*}} : vector<[4]xi32>
// CHECK-NEXT: arith.cmpi sgt, %{{.*}}, %{{.*}} : vector<[4]xi32>
// CHECK-NEXT: arith.andi
// CHECK: scf.for
// CHECK: cq4p_intr.aarch64.sve.ld1.pn.x4
// CHECK-NOT: arith.cmpi
// CHECK: scf.yield
// CHECK: scf.for
// CHECK-NOT: arith.cmpi
// CHECK: scf.yield
// CHECK: scf.for
// CHECK: arith.cmpi sle, %{{.*}}, %{{.*}} : vector<[4]xi32>
// CHECK-NEXT: arith.cmpi sgt, %{{.*}}, %{{.*}} : vector<[4]xi32>
// CHECK-NEXT: arith.andi
func.func @cached_attention(%q: memref<?x256xf32>, %k: memref<?x128xf32>, %v: memref<?x128xf32>,
                            %out: memref<?x256xf32>, %h0: index, %h1: index, %pos: index) {
  cq4p.attention %q, %k, %v, %out, %h0, %h1 at %pos {num_heads = 4 : i64, num_kv_heads = 2 : i64,
      head_dim = 64 : i64, window = 32 : i64, scale = 0.125 : f32}
      : memref<?x256xf32>, memref<?x128xf32>, memref<?x128xf32>, memref<?x256xf32>
  return
}

// -----

// A GQA group that does not divide 16 keeps the shared lowering for one
// query row (the decode leaf puts whole groups in a vector's lanes).
// CHECK-LABEL: func.func @negative_decode_group_of_3
// CHECK: scf.if
// CHECK-NEXT: cq4p.attention
// CHECK-NOT: _sme_decode
func.func @negative_decode_group_of_3(%q: memref<?x192xf32>, %k: memref<?x64xf32>, %v: memref<?x64xf32>,
                                      %out: memref<?x192xf32>, %h0: index, %h1: index, %pos: index) {
  cq4p.attention %q, %k, %v, %out, %h0, %h1 at %pos {num_heads = 3 : i64, num_kv_heads = 1 : i64,
      head_dim = 64 : i64, window = 0 : i64, scale = 0.125 : f32}
      : memref<?x192xf32>, memref<?x64xf32>, memref<?x64xf32>, memref<?x192xf32>
  return
}

// -----

// An fp16 KV cache is left to the shared lowering (the outer products read
// fp32 rows).
// CHECK-LABEL: func.func @negative_f16_cache
// CHECK-NEXT: cq4p.attention
// CHECK-NOT: call
func.func @negative_f16_cache(%q: memref<?x256xf32>, %k: memref<?x128xf16>, %v: memref<?x128xf16>,
                              %out: memref<?x256xf32>, %h0: index, %h1: index, %pos: index) {
  cq4p.attention %q, %k, %v, %out, %h0, %h1 at %pos {num_heads = 4 : i64, num_kv_heads = 2 : i64,
      head_dim = 64 : i64, window = 0 : i64, scale = 0.125 : f32}
      : memref<?x256xf32>, memref<?x128xf16>, memref<?x128xf16>, memref<?x256xf32>
  return
}

// RUN: cq4p-opt %s -convert-cq4p-to-vector=x86-dot=ssse3 | FileCheck %s --check-prefix=SSSE3
// RUN: cq4p-opt %s -convert-cq4p-to-vector | FileCheck %s --check-prefix=GENERIC
// RUN: cq4p-opt %s -convert-cq4p-to-vector=x86-dot=avx2 | FileCheck %s --check-prefix=AVX2
// RUN: cq4p-opt %s -convert-cq4p-to-vector=x86-dot=avxvnni | FileCheck %s --check-prefix=AVXVNNI
// RUN: cq4p-opt %s -convert-cq4p-to-vector=x86-dot=avx512vnni | FileCheck %s --check-prefix=VNNI512
// RUN: not cq4p-opt %s -convert-cq4p-to-vector=x86-dot=sse9 2>&1 | FileCheck %s --check-prefix=BAD

// The host's panel dot: the same pair-zip structure; the lookup is pshufb on
// x86 with SSSE3 and a select per level otherwise; the 4-way dot is
// generic (sign extension, multiply, lane sums).
// SSSE3-LABEL: func.func @panel_dot
// SSSE3: cq4p_intr.x86.ssse3.pshuf.b.128
// SSSE3: arith.extsi %{{.*}} : vector<16xi8> to vector<16xi32>
// SSSE3: arith.muli %{{.*}} : vector<16xi32>
// SSSE3: vector.shuffle %{{.*}} [0, 4, 8, 12]
// SSSE3-NOT: arm_neon
// GENERIC-LABEL: func.func @panel_dot
// GENERIC-NOT: cq4p_intr
// GENERIC: arith.cmpi eq
// GENERIC: arith.select

// On AVX2, 256-bit pshufb, then pmaddubsw(|a|, sign(w, a)) and pmaddwd; the
// activations rearranged into per-group stack buffers of words (and their
// absolute values), broadcast from there; the rearrangement runs only when
// the group's tag (the tile's row, the activations' address) differs, and
// then records the tag.
// AVX2-LABEL: func.func @panel_dot
// AVX2-DAG: %[[TAGS:.*]] = memref.alloca() : memref<1x2xindex>
// AVX2-DAG: %[[PREP:.*]] = memref.alloca() : memref<1x1x8xi32>
// AVX2-DAG: %[[ABS:.*]] = memref.alloca() : memref<1x1x8xi32>
// AVX2: memref.store %c-1, %[[TAGS]]
// AVX2: %[[ROWTAG:.*]] = memref.load %[[TAGS]][%arg5, %c0]
// AVX2: %[[SAME:.*]] = arith.cmpi eq, %[[ROWTAG]], %arg6
// AVX2: %[[READY:.*]] = arith.andi %[[SAME]]
// AVX2: scf.if %[[READY]] {
// AVX2: } else {
// AVX2: math.absi %{{.*}} : vector<16xi8>
// AVX2: memref.store %arg6, %[[TAGS]][%arg5, %c0]
// AVX2: }
// AVX2: %[[W:.*]] = cq4p_intr.x86.avx2.pshuf.b
// AVX2: %[[S:.*]] = cq4p_intr.x86.avx2.psign.b %[[W]], %{{.*}}
// AVX2: %[[P:.*]] = cq4p_intr.x86.avx2.pmadd.ub.sw %{{.*}}, %[[S]]
// AVX2: cq4p_intr.x86.avx2.pmadd.wd %[[P]], %{{.*}} : (vector<16xi16>, vector<16xi16>) -> vector<8xi32>
// AVX2-NOT: vpdpbusd

// VNNI: the codebook biased by 128 (weights unsigned, activations signed),
// the accumulators starting at -128 * the row's sum over the group; one
// vpdpbusd per dot, no correction per weight vector.
// With VNNI the rearrangement takes a register of activations a step: one
// shuffle puts each 32's even bytes before its odd ones, and one vpdpbusd by
// bytes of 1 sums them for the accumulators' start.
// AVXVNNI-LABEL: func.func @panel_dot
// AVXVNNI: arith.xori %{{.*}} : vector<16xi8>
// AVXVNNI: } else {
// AVXVNNI: %[[BYTES:.*]] = vector.load %arg2{{.*}} : memref<?x32xi8>, vector<32xi8>
// AVXVNNI: vector.shuffle %[[BYTES]], %[[BYTES]] [0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30, 1, 3, 5, 7, {{.*}}, 31]
// AVXVNNI: cq4p_intr.x86.avx512.vpdpbusd.256 %{{.*}}, %{{.*}}, %[[BYTES]]
// AVXVNNI: vector.reduction <add>
// AVXVNNI: arith.muli %{{.*}}, %c-128_i32 : i32
// AVXVNNI: cq4p_intr.x86.avx2.pshuf.b
// AVXVNNI: cq4p_intr.x86.avx512.vpdpbusd.256 {{.*}} : (vector<8xi32>, vector<32xi8>, vector<32xi8>) -> vector<8xi32>
// AVXVNNI-NOT: arith.subi
// VNNI512-LABEL: func.func @panel_dot
// VNNI512: cq4p_intr.x86.avx512.pshuf.b.512
// VNNI512-COUNT-32: cq4p_intr.x86.avx512.vpdpbusd.512 {{.*}} : (vector<16xi32>, vector<64xi8>, vector<64xi8>) -> vector<16xi32>
// VNNI512-NOT: cq4p_intr.x86.avx512.vpdpbusd
// VNNI512: vector.store %{{.*}} : memref<1x64xi32>, vector<16xi32>
// BAD: for the --x86-dot option: Cannot find option named 'sse9'!
func.func @panel_dot(%panels: memref<1x1x8x128xi8>, %cb: memref<16xi8>,
                     %act: memref<?x32xi8>, %partials: memref<1x64xi32>,
                     %sb: index, %g: index, %row: index) {
  cq4p.panel_dot %panels, %cb, %act, %partials, %sb, %g, %row
      : memref<1x1x8x128xi8>, memref<16xi8>, memref<?x32xi8>, memref<1x64xi32>
  return
}

// A GEMM tile of 4 rows on zmm: all 64 channels in one pass, 16
// accumulators.
// VNNI512-LABEL: func.func @panel_dot_tile
// VNNI512-NOT: scf.for {{.*}} to %c2
// VNNI512-COUNT-128: cq4p_intr.x86.avx512.vpdpbusd.512
// VNNI512-NOT: cq4p_intr.x86.avx512.vpdpbusd
func.func @panel_dot_tile(%panels: memref<1x1x8x128xi8>, %cb: memref<16xi8>,
                          %act: memref<?x32xi8>, %partials: memref<4x64xi32>,
                          %sb: index, %g: index, %row: index) {
  cq4p.panel_dot %panels, %cb, %act, %partials, %sb, %g, %row
      : memref<1x1x8x128xi8>, memref<16xi8>, memref<?x32xi8>, memref<4x64xi32>
  return
}

// Groups of 128 on zmm: the rearrangement 64 activations a step (two 32s,
// each's even bytes before its odd ones), summed by vpdpbusd with bytes of 1.
// VNNI512-LABEL: func.func @panel_dot_gs128
// VNNI512: } else {
// VNNI512: scf.for %{{.*}} = %c0 to %c2 step %c1
// VNNI512: %[[BYTES:.*]] = vector.load %arg2{{.*}} : memref<?x128xi8>, vector<64xi8>
// VNNI512: vector.shuffle %[[BYTES]], %[[BYTES]] [0, 2, {{.*}}, 30, 1, 3, {{.*}}, 31, 32, 34, {{.*}}, 62, 33, 35, {{.*}}, 63]
// VNNI512: vector.store %{{.*}} : memref<1x4x32xi32>, vector<16xi32>
// VNNI512: cq4p_intr.x86.avx512.vpdpbusd.512 %{{.*}}, %{{.*}}, %[[BYTES]]
// VNNI512: vector.reduction <add>
// VNNI512: arith.muli %{{.*}}, %c-128_i32 : i32
func.func @panel_dot_gs128(%panels: memref<1x1x32x128xi8>, %cb: memref<16xi8>,
                           %act: memref<?x128xi8>, %partials: memref<4x64xi32>,
                           %sb: index, %g: index, %row: index) {
  cq4p.panel_dot %panels, %cb, %act, %partials, %sb, %g, %row
      : memref<1x1x32x128xi8>, memref<16xi8>, memref<?x128xi8>, memref<4x64xi32>
  return
}

// RUN: cq4p-opt %s -cq4p-declare-host-prefetch-flag -convert-cq4p-to-vector=x86-dot=avx512vnni | FileCheck %s
// RUN: cq4p-opt %s -convert-cq4p-to-vector=x86-dot=avx512vnni | FileCheck %s --check-prefix=UNGATED
// RUN: cq4p-opt %s -cq4p-declare-host-prefetch-flag -cq4p-declare-host-prefetch-flag | FileCheck %s --check-prefix=ONCE

// The one-row panel dot's prefetch hints run under the module's flag
// (HostKernels.cpp, hostPrefetching): 0 until the first call reads CPUID's
// vendor, then 1 (prefetch) or 2 (an AMD or Hygon CPU: no hints); relaxed
// atomic accesses. A tile of several rows has no hints; a module without
// the flag keeps them unconditionally.
// CHECK: memref.global "private" @cq4p_host_prefetch : memref<i8> = dense<0>
// CHECK-LABEL: func.func @panel_dot
// CHECK: memref.get_global @cq4p_host_prefetch : memref<i8>
// CHECK: %[[STATE:.*]] = llvm.load {{.*}} atomic monotonic {alignment = 1 : i64} : !llvm.ptr -> i8
// CHECK: %[[KNOWN:.*]] = arith.cmpi ne, %[[STATE]], %{{.*}} : i8
// CHECK: %[[DECIDED:.*]] = scf.if %[[KNOWN]] -> (i8)
// CHECK: %[[VENDOR:.*]] = cq4p_intr.x86.cpuid_vendor : i32
// CHECK: arith.cmpi eq, %[[VENDOR]], %c1752462657_i32 : i32
// CHECK: arith.cmpi eq, %[[VENDOR]], %c1869052232_i32 : i32
// CHECK: arith.select %{{.*}}, %c2_i8, %c1_i8 : i8
// CHECK: llvm.store {{.*}} atomic monotonic {alignment = 1 : i64} : i8, !llvm.ptr
// CHECK: %[[ON:.*]] = arith.cmpi eq, %[[DECIDED]], %c1_i8 : i8
// CHECK: scf.for
// CHECK: scf.if %[[ON]] {
// CHECK-COUNT-16: memref.prefetch
// CHECK: }
// CHECK: cq4p_intr.x86.avx512.vpdpbusd.512
// CHECK-LABEL: func.func @panel_dot_tile
// CHECK-NOT: memref.prefetch
// CHECK-NOT: cpuid
// CHECK: return

// UNGATED-NOT: memref.global
// UNGATED-LABEL: func.func @panel_dot
// UNGATED-NOT: cpuid
// UNGATED: scf.for
// UNGATED-NOT: scf.if
// UNGATED: memref.prefetch

// ONCE-COUNT-1: memref.global "private" @cq4p_host_prefetch
// ONCE-NOT: memref.global
func.func @panel_dot(%panels: memref<1x1x32x128xi8>, %cb: memref<16xi8>,
                     %act: memref<?x128xi8>, %partials: memref<1x64xi32>,
                     %sb: index, %g: index, %row: index) {
  cq4p.panel_dot %panels, %cb, %act, %partials, %sb, %g, %row
      : memref<1x1x32x128xi8>, memref<16xi8>, memref<?x128xi8>, memref<1x64xi32>
  return
}

func.func @panel_dot_tile(%panels: memref<1x1x32x128xi8>, %cb: memref<16xi8>,
                          %act: memref<?x128xi8>, %partials: memref<4x64xi32>,
                          %sb: index, %g: index, %row: index) {
  cq4p.panel_dot %panels, %cb, %act, %partials, %sb, %g, %row
      : memref<1x1x32x128xi8>, memref<16xi8>, memref<?x128xi8>, memref<4x64xi32>
  return
}

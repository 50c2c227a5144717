// LUTI4 from ZT0 through the LLVM intrinsics, as the SME2 lowering emits it
// (upstream ArmSME has no ZT0 or LUTI4 op). Locally streaming with a new ZT0
// (`aarch64_new_zt0` has no dialect attribute): a plain C-ABI function.
llvm.func @cq4p_harness_luti4(%table: !llvm.ptr, %packed: !llvm.ptr, %out: !llvm.ptr)
    attributes {arm_locally_streaming, passthrough = ["aarch64_new_zt0"]} {
  %zt0 = llvm.mlir.constant(0 : i32) : i32
  %seg1 = llvm.mlir.constant(1 : i32) : i32
  llvm.call_intrinsic "llvm.aarch64.sme.ldr.zt"(%zt0, %table) : (i32, !llvm.ptr) -> ()
  %indices = llvm.load %packed : !llvm.ptr -> vector<[16]xi8>
  %lo = llvm.call_intrinsic "llvm.aarch64.sme.luti4.lane.zt.nxv16i8"(%zt0, %indices, %zt0)
      : (i32, vector<[16]xi8>, i32) -> vector<[16]xi8>
  %hi = llvm.call_intrinsic "llvm.aarch64.sme.luti4.lane.zt.nxv16i8"(%zt0, %indices, %seg1)
      : (i32, vector<[16]xi8>, i32) -> vector<[16]xi8>
  llvm.store %lo, %out : vector<[16]xi8>, !llvm.ptr
  %next = llvm.getelementptr %out[1] : (!llvm.ptr) -> !llvm.ptr, vector<[16]xi8>
  llvm.store %hi, %next : vector<[16]xi8>, !llvm.ptr
  llvm.return
}

// RUN: cq4p-opt %s -split-input-file -cq4p-export-kernels -verify-diagnostics

// The entry's parameters must be the ABI's.

module {
  // expected-error @+1 {{cq4p-export-kernels: the attention ABI has no parameter 'x'}}
  llvm.func @cq4p_attention(%a0: !llvm.ptr, %a1: !llvm.ptr, %a2: i64, %a3: i64, %a4: i64, %a5: i64, %a6: i64, %a7: !llvm.ptr, %a8: !llvm.ptr, %a9: i64, %a10: i64, %a11: i64, %a12: i64, %a13: i64, %a14: !llvm.ptr, %a15: !llvm.ptr, %a16: i64, %a17: i64, %a18: i64, %a19: i64, %a20: i64, %a21: !llvm.ptr, %a22: !llvm.ptr, %a23: i64, %a24: i64, %a25: i64, %a26: i64, %a27: i64, %a28: i64, %a29: i64, %a30: i64) attributes {cq4p.kernel = #cq4p.kernel<attention, params = ["q": memref<?x64xf32>, "x": memref<?x64xf32>, "v": memref<?x64xf32>, "out": memref<?x64xf32>, "seq": index, "head_begin": index, "head_end": index]>} {
    llvm.return
  }
}

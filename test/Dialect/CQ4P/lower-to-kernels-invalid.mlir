// RUN: cq4p-opt %s -cq4p-lower-to-kernels -verify-diagnostics

func.func @legacy(%x: tensor<1x256xf32>,
                  %w: !cq4p.weight<64x256, gs = 128, hadamard, interleaved4row>) {
  // expected-error @+1 {{weight layout interleaved4row is not compiled: upgrade the bundle's legacy files to packed panels (python -m cq4p upgrade)}}
  %y = cq4p.linear %x, %w : tensor<1x256xf32>,
      !cq4p.weight<64x256, gs = 128, hadamard, interleaved4row> -> tensor<1x64xf32>
  return
}

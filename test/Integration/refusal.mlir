// A one-kernel library built for the other target than the tests run on:
// the runtime must refuse to load it (KernelTest.cpp).
func.func @linear(%x: tensor<1x256xf32>,
                  %w: !cq4p.weight<64x256, gs = 128, hadamard, panels>) -> tensor<1x64xf32> {
  %y = cq4p.linear %x, %w : tensor<1x256xf32>,
      !cq4p.weight<64x256, gs = 128, hadamard, panels> -> tensor<1x64xf32>
  return %y : tensor<1x64xf32>
}

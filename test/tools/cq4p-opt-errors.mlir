// IR that does not verify: cq4p-opt prints the verifier's message, with its
// location, and exits non-zero (`not` fails the test on a zero exit).
// RUN: not cq4p-opt %s 2>&1 | FileCheck %s

// CHECK: cq4p-opt-errors.mlir:[[@LINE+2]]:{{[0-9]+}}: error: 'cq4p.linear' op expected the input's K (1000) to equal the weight's K (1536)
func.func @bad(%x: tensor<1x1000xf32>, %w: !cq4p.weight<2048x1536, gs = 128, hadamard, panels>) -> tensor<1x2048xf32> {
  %y = cq4p.linear %x, %w : tensor<1x1000xf32>, !cq4p.weight<2048x1536, gs = 128, hadamard, panels> -> tensor<1x2048xf32>
  return %y : tensor<1x2048xf32>
}

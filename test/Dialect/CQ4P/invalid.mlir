// RUN: cq4p-opt %s -split-input-file -verify-diagnostics

// expected-error @+1 {{expected K (1000) to be a multiple of the group size (128)}}
func.func @k_not_multiple(%w: !cq4p.weight<64x1000, gs = 128, hadamard, panels>)

// -----

// expected-error @+1 {{expected N (0) to be in [1, 2147483647]}}
func.func @zero_n(%w: !cq4p.weight<0x256, gs = 128, hadamard, panels>)

// -----

// expected-error @+1 {{expected K (4294967296) to be in [1, 2147483647]}}
func.func @huge_k(%w: !cq4p.weight<64x4294967296, gs = 128, hadamard, panels>)

// -----

// expected-error @+1 {{expected the group size (0) to be positive}}
func.func @zero_gs(%w: !cq4p.weight<64x256, gs = 0, hadamard, panels>)

// -----

// expected-error @+1 {{expected the group size (96) of a hadamard weight to be a power of two}}
func.func @gs_not_pow2(%w: !cq4p.weight<64x384, gs = 96, hadamard, interleaved4row>)

// -----

// expected-error @+1 {{expected the group size (16) of a hadamard panel weight to be a multiple of 32 and at most 256}}
func.func @panel_gs_small(%w: !cq4p.weight<64x256, gs = 16, hadamard, panels>)

// -----

// expected-error @+1 {{expected the group size (512) of a hadamard panel weight to be a multiple of 32 and at most 256}}
func.func @panel_gs_large(%w: !cq4p.weight<64x1024, gs = 512, hadamard, panels>)

// -----

// expected-error @+1 {{expected the group size (1536) of an orthogonal panel weight to be its virtual group of 128}}
func.func @orthogonal_panel_gs(%w: !cq4p.weight<64x1536, gs = 1536, orthogonal, panels>)

// -----

// expected-error @+1 {{expected the group size (128) of a legacy orthogonal weight to span the row (K = 1536)}}
func.func @legacy_orthogonal_gs(%w: !cq4p.weight<64x1536, gs = 128, orthogonal, interleaved4row>)

// -----

// expected-error @+1 {{expected a weight shape NxK with 2 dimensions, got 3}}
func.func @three_dims(%w: !cq4p.weight<64x64x256, gs = 128, hadamard, panels>)

// -----

func.func @input_k_mismatch(%x: tensor<1x1000xf32>,
                            %w: !cq4p.weight<2048x1536, gs = 128, hadamard, panels>) {
  // expected-error @+1 {{'cq4p.linear' op expected the input's K (1000) to equal the weight's K (1536)}}
  %y = cq4p.linear %x, %w : tensor<1x1000xf32>,
      !cq4p.weight<2048x1536, gs = 128, hadamard, panels> -> tensor<1x2048xf32>
  return
}

// -----

func.func @input_k_dynamic(%x: tensor<1x?xf32>,
                           %w: !cq4p.weight<2048x1536, gs = 128, hadamard, panels>) {
  // expected-error @+1 {{'cq4p.linear' op expected the input's K (?) to equal the weight's K (1536)}}
  %y = cq4p.linear %x, %w : tensor<1x?xf32>,
      !cq4p.weight<2048x1536, gs = 128, hadamard, panels> -> tensor<1x2048xf32>
  return
}

// -----

func.func @result_n_mismatch(%x: tensor<1x1536xf32>,
                             %w: !cq4p.weight<2048x1536, gs = 128, hadamard, panels>) {
  // expected-error @+1 {{'cq4p.linear' op expected the result's N (2000) to equal the weight's N (2048)}}
  %y = cq4p.linear %x, %w : tensor<1x1536xf32>,
      !cq4p.weight<2048x1536, gs = 128, hadamard, panels> -> tensor<1x2000xf32>
  return
}

// -----

func.func @result_m_mismatch(%x: tensor<4x1536xf32>,
                             %w: !cq4p.weight<2048x1536, gs = 128, hadamard, panels>) {
  // expected-error @+1 {{'cq4p.linear' op expected the result's M (?) to equal the input's M (4)}}
  %y = cq4p.linear %x, %w : tensor<4x1536xf32>,
      !cq4p.weight<2048x1536, gs = 128, hadamard, panels> -> tensor<?x2048xf32>
  return
}

// -----

func.func @input_rank(%x: tensor<1536xf32>,
                      %w: !cq4p.weight<2048x1536, gs = 128, hadamard, panels>) {
  // expected-error @+1 {{'cq4p.linear' op expected the input to have rank 2 ([M, K]), got rank 1}}
  %y = cq4p.linear %x, %w : tensor<1536xf32>,
      !cq4p.weight<2048x1536, gs = 128, hadamard, panels> -> tensor<1x2048xf32>
  return
}

// -----

func.func @result_rank(%x: tensor<1x1536xf32>,
                       %w: !cq4p.weight<2048x1536, gs = 128, hadamard, panels>) {
  // expected-error @+1 {{'cq4p.linear' op expected the result to have rank 2 ([M, N]), got rank 3}}
  %y = cq4p.linear %x, %w : tensor<1x1536xf32>,
      !cq4p.weight<2048x1536, gs = 128, hadamard, panels> -> tensor<1x1x2048xf32>
  return
}

// -----

func.func @f16_input(%x: tensor<1x1536xf16>,
                     %w: !cq4p.weight<2048x1536, gs = 128, hadamard, panels>) {
  // expected-error @+1 {{'cq4p.linear' op operand #0 must be ranked tensor of 32-bit float values, but got 'tensor<1x1536xf16>'}}
  %y = cq4p.linear %x, %w : tensor<1x1536xf16>,
      !cq4p.weight<2048x1536, gs = 128, hadamard, panels> -> tensor<1x2048xf32>
  return
}

// -----

// expected-error @+2 {{expected a rotation family (hadamard or orthogonal), got 'rotated'}}
// expected-error @+1 {{failed to parse CQ4P_WeightType parameter 'rotation'}}
func.func @bad_rotation(%w: !cq4p.weight<64x256, gs = 128, rotated, panels>)

// -----

// expected-error @+2 {{expected a layout (panels or interleaved4row), got 'rowmajor'}}
// expected-error @+1 {{failed to parse CQ4P_WeightType parameter 'layout'}}
func.func @bad_layout(%w: !cq4p.weight<64x256, gs = 128, hadamard, rowmajor>)

// -----

// expected-error @+1 {{expected a weight shape NxK with 2 dimensions, got 1}}
func.func @one_dim(%w: !cq4p.weight<256, gs = 128, hadamard, panels>)

// -----

// expected-error @+1 {{expected static shape}}
func.func @dynamic_dim(%w: !cq4p.weight<?x256, gs = 128, hadamard, panels>)

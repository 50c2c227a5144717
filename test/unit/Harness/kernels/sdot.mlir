// The SDOT the NEON lowering emits, as a C-ABI function for the harness:
// acc + per-lane 4-way int8 dot of a and b.
func.func @cq4p_harness_sdot(%acc: vector<4xi32>, %a: vector<16xi8>,
                             %b: vector<16xi8>) -> vector<4xi32> {
  %0 = arm_neon.intr.sdot %acc, %a, %b : vector<16xi8>, vector<16xi8> to vector<4xi32>
  return %0 : vector<4xi32>
}

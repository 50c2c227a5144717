// RUN: cq4p-opt %s | cq4p-opt | FileCheck %s

// A step's dispatches round trip with their typed places and scalars.

// CHECK-LABEL: cq4p.step @decode attributes {max_rows = 1 : i64} {
// CHECK-NEXT: cq4p.dispatch @gemv <range> work [0, 8] pointers [#cq4p.place<binding, index = 3>, #cq4p.place<workspace>, #cq4p.place<workspace, offset = 1024, row_bytes = 128>, #cq4p.place<logits, row_bytes = 1024>] scalars [rows, begin, end]
// CHECK-NEXT: cq4p.dispatch @rope <rows> work [0, 1] pointers [#cq4p.place<workspace, last_row>, #cq4p.place<keys, index = 2, cache_offset = 512, row_bytes = 256, at_position>] scalars [rows, position] {serial, single_row}
// CHECK-NEXT: cq4p.dispatch @conv <range> work [1, 2] pointers [#cq4p.place<state, offset = 64>, #cq4p.place<ids, row_bytes = 8>, #cq4p.place<values, index = 1, row_bytes = 256>] scalars [context]
cq4p.step @decode attributes {max_rows = 1 : i64} {
  cq4p.dispatch @gemv <range> work [0, 8]
      pointers [#cq4p.place<binding, index = 3>, #cq4p.place<workspace>,
                #cq4p.place<workspace, offset = 1024, row_bytes = 128>,
                #cq4p.place<logits, row_bytes = 1024>]
      scalars [rows, begin, end]
  cq4p.dispatch @rope <rows> work [0, 1]
      pointers [#cq4p.place<workspace, last_row>,
                #cq4p.place<keys, at_position, index = 2, row_bytes = 256, cache_offset = 512>]
      scalars [rows, position] {serial, single_row}
  cq4p.dispatch @conv <range> work [1, 2]
      pointers [#cq4p.place<state, offset = 64>, #cq4p.place<ids, row_bytes = 8>,
                #cq4p.place<values, index = 1, row_bytes = 256>]
      scalars [context]
}

// CHECK-LABEL: cq4p.step @prefill attributes {max_rows = 8 : i64, single_row = @decode} {
cq4p.step @prefill attributes {max_rows = 8 : i64, single_row = @decode} {
}

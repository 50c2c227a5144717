// RUN: cq4p-opt %s -split-input-file -verify-diagnostics

// The dispatch contract's typed attributes and their verifiers.

cq4p.step @decode attributes {max_rows = 1 : i64} {
  // expected-error @+1 {{'cq4p.dispatch' op expected work = [rows factor >= 0, constant >= 0]}}
  cq4p.dispatch @k <rows> work [1, -1] pointers [] scalars []
}

// -----

cq4p.step @decode attributes {max_rows = 1 : i64} {
  // expected-error @+2 {{expected ::mlir::cq4p::DispatchSplit to be one of: rows, range}}
  // expected-error @+1 {{failed to parse CQ4P_DispatchSplitAttr parameter 'value'}}
  cq4p.dispatch @k <columns> work [1, 0] pointers [] scalars []
}

// -----

cq4p.step @decode attributes {max_rows = 1 : i64} {
  // expected-error @+1 {{expected a dispatch scalar (rows, position, begin, end or context), got 'width'}}
  cq4p.dispatch @k <rows> work [1, 0] pointers [] scalars [rows, width]
}

// -----

cq4p.step @decode attributes {max_rows = 1 : i64} {
  // expected-error @+1 {{expected a place base (binding, workspace, keys, values, state, ids or logits), got 'heap'}}
  cq4p.dispatch @k <rows> work [1, 0] pointers [#cq4p.place<heap>] scalars []
}

// -----

cq4p.step @decode attributes {max_rows = 1 : i64} {
  // expected-error @+1 {{unknown place field 'stride' (expected index, offset, cache_offset, row_bytes, at_position or last_row)}}
  cq4p.dispatch @k <rows> work [1, 0] pointers [#cq4p.place<workspace, stride = 4>] scalars []
}

// -----

cq4p.step @decode attributes {max_rows = 1 : i64} {
  // expected-error @+1 {{expected the place's index (0), offset (-64), cache_offset (0) and row_bytes (0) to be non-negative}}
  cq4p.dispatch @k <rows> work [1, 0] pointers [#cq4p.place<workspace, offset = -64>] scalars []
}

// -----

cq4p.step @decode attributes {max_rows = 1 : i64} {
  // expected-error @+1 {{a workspace place has no index (only binding, keys and values)}}
  cq4p.dispatch @k <rows> work [1, 0] pointers [#cq4p.place<workspace, index = 2>] scalars []
}

// -----

cq4p.step @decode attributes {max_rows = 1 : i64} {
  // expected-error @+1 {{a binding place has no cache_offset (only keys and values)}}
  cq4p.dispatch @k <rows> work [1, 0] pointers [#cq4p.place<binding, cache_offset = 128>] scalars []
}

// -----

cq4p.step @decode attributes {max_rows = 1 : i64} {
  // expected-error @+1 {{a place is at_position or last_row, not both}}
  cq4p.dispatch @k <rows> work [1, 0] pointers [#cq4p.place<keys, at_position, last_row>] scalars []
}

// -----

cq4p.step @prefill attributes {max_rows = 8 : i64} {
  // expected-error @+1 {{'cq4p.dispatch' op expected a grain of at least 1 work item, found 0}}
  cq4p.dispatch @k <rows> work [1, 0] pointers [] scalars [rows] {grain = 0 : i64}
}

// -----

cq4p.step @prefill attributes {max_rows = 8 : i64} {
  // expected-error @+1 {{'cq4p.dispatch' op expected no grain on a serial dispatch (one call over all its work)}}
  cq4p.dispatch @k <range> work [0, 8] pointers [] scalars [begin, end] {grain = 4 : i64, serial}
}

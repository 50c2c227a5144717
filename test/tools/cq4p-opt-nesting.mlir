// Input nested deeper than kMaxIrNesting (256) is refused before it is
// parsed, with its location, instead of overflowing the parser's stack; 256
// levels parse. (This file itself is not the input.)
// RUN: %python -c "print('module attributes {x = ' + '[' * 10000 + '1' + ']' * 10000 + '} {}')" > %t.arrays.mlir
// RUN: not cq4p-opt %t.arrays.mlir 2>&1 | FileCheck %s --check-prefix=ARRAYS
// RUN: %python -c "print('module {' * 10000 + '}' * 10000)" > %t.modules.mlir
// RUN: not cq4p-opt %t.modules.mlir 2>&1 | FileCheck %s --check-prefix=MODULES
// RUN: %python -c "print('func.func private @f(' + 'tuple<' * 10000 + 'i32' + '>' * 10000 + ')')" > %t.types.mlir
// RUN: not cq4p-opt %t.types.mlir 2>&1 | FileCheck %s --check-prefix=TYPES
// RUN: %python -c "print('module attributes {bound.x = ' + '[' * 255 + '1' + ']' * 255 + ', bound.s = \"[[[[\"} {}')" > %t.bound.mlir
// RUN: cq4p-opt %t.bound.mlir | FileCheck %s --check-prefix=BOUND

// ARRAYS: arrays.mlir:1:279: error: nesting deeper than 256 levels of (), [], {} and <>; refused before parsing
// ARRAYS-NOT: Stack dump
// MODULES: modules.mlir:1:2056: error: nesting deeper than 256 levels
// TYPES: types.mlir:1:1557: error: nesting deeper than 256 levels
// BOUND: module attributes {bound.s = "{{\[\[\[\[}}", bound.x = {{\[+}}1{{\]+}}}

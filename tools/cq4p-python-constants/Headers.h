//===- Headers.h - the C headers whose constants Python gets ----*- C++ -*-===//
//
// Every integer and string constant these headers define with a CQ4P_ name
// (an object-like macro or an enumerator) becomes a constant of the Python
// package's cq4p.format.constants, with the value the C++ compiler gives it.
//
//===----------------------------------------------------------------------===//

#include "cq4p/format.h"
#include "cq4p/kernel_abi.h"
#include "cq4p/cq4p.h"

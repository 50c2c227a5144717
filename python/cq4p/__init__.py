"""cq4p: the Python side of the CQ4 packed-panel compiler.

It describes model graphs in the cq4p dialect (`cq4p.ir`), drives the
compiler's command-line tools (`cq4p.tools`; MLIR has no packaged Python
bindings here) and reads the format's constants from their one definition
in the runtime's C header (`cq4p.format`).
"""

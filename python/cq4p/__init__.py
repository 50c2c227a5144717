"""cq4p: the Python side of the CQ4 packed-panel compiler.

It describes model graphs in the cq4p dialect (`cq4p.ir`), drives the
compiler's command-line tools (`cq4p.tools`; MLIR has no packaged Python
bindings here) and reads the format's constants from their one definition
in the runtime's C header (`cq4p.format`).

The format side: quantization (`cq4p.quantize`), the packed-panel layout
(`cq4p.panels`), tensor files and their validating reader (`cq4p.files`),
checkpoints to bundles (`cq4p.safetensors`, `cq4p.bundle`, `cq4p.convert`,
`cq4p.upgrade`, `cq4p.inspection`; `python -m cq4p`), malformed files for the
readers' tests (`cq4p.corpus`) and the runtime's C API through ctypes
(`cq4p.native`).

Whole models: the architectures cq4p runs, read from a Hugging Face config
(`cq4p.architecture`); their forward pass as a graph (`cq4p.ir.model_graph`,
written by convert as model.mlir); the numpy oracle of a bundle's
dequantized model (`cq4p.reference`); synthetic checkpoints of each
architecture (`cq4p.synthetic`); running a compiled model and checking it
against the oracle (`cq4p.generate`).
"""

# The package's version, the CMake project's (CMakeLists.txt; a test checks both).
__version__ = "0.1.0"

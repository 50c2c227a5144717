"""cq4p: the Python side of the CQ4 packed-panel compiler.

Its subpackages:
- `cq4p.format`: the CQ4 format itself. Its constants, generated from the
  runtime's C headers (`constants`); the tensor files' header fields and
  regions (`layout`); the packed-panel layout and its int8 codebook
  (`panels`); the legacy index layouts (`legacy`); malformed files for the
  readers' tests (`corpus`).
- `cq4p.io`: files. Tensor file writers (`writer`) and their validating
  reader (`reader`), bundles and their manifest (`bundle`), safetensors
  checkpoints (`safetensors`).
- `cq4p.quant`: quantization (`quantize`, the numpy oracle of the format's
  numbers) and dequantization (`dequantize`).
- `cq4p.model`: whole models. The architectures cq4p runs, read from a
  Hugging Face config (`architecture`); their forward pass as a graph in the
  cq4p dialect (`ir`, written by convert as model.mlir); the numpy oracle of
  a bundle's dequantized model (`reference`); synthetic checkpoints of each
  architecture (`synthetic`).
- `cq4p.cli`: `python -m cq4p` (`main`) and its commands: checkpoints to
  bundles (`convert`, `upgrade`), `inspection`, `check`, and running a
  compiled model against the oracle (`generate`).
- `cq4p.cache`: checkpoints and bundles prepared once (converted, compiled)
  and kept under ~/.cache/cq4p/models; `cq4p.api`: `Model`, a model from
  Python (`from cq4p import Model`, imported when first named, so that
  `import cq4p` stays light).
- `cq4p.native`: the native parts. Where the tools and the runtime library
  are (`locate`), the compiler's command-line tools (`tools`; MLIR has no
  packaged Python bindings here), the runtime's C API through ctypes
  (`runtime`) and its native quantizer (`quantize`).
"""

# The package's version, the CMake project's (CMakeLists.txt; a test checks both).
__version__ = "0.1.0"

_API = ("Model", "Conversation", "Stats")


def __getattr__(name):
    if name in _API:
        from cq4p import api
        return getattr(api, name)
    raise AttributeError(f"module 'cq4p' has no attribute {name!r}")

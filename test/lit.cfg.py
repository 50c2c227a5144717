# -*- Python -*-
# lit configuration for cq4p: pass output checked with FileCheck.

import os

import lit.formats
from lit.llvm import llvm_config
from lit.llvm.subst import ToolSubst

config.name = "CQ4P"
config.test_format = lit.formats.ShTest(not llvm_config.use_lit_shell)
config.suffixes = [".mlir", ".test"]
config.excludes = ["CMakeLists.txt", "lit.cfg.py", "lit.site.cfg.py", "unit", "fuzz", "Integration"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.cq4p_obj_root, "test")

config.substitutions.append(("%PATH%", config.environment["PATH"]))
config.substitutions.append(("%cq4p_src_root", config.cq4p_src_root))
llvm_config.with_system_environment(["HOME", "INCLUDE", "LIB", "TMP", "TEMP"])
llvm_config.use_default_substitutions()

llvm_config.with_environment("PATH", config.llvm_tools_dir, append_path=True)
tool_dirs = [config.cq4p_tools_dir, config.llvm_tools_dir]
tools = [ToolSubst("cq4p-opt", unresolved="fatal"),
         ToolSubst("cq4p-translate", unresolved="fatal"),
         ToolSubst("cq4p-compile", unresolved="fatal"),
         ToolSubst("cq4p-python-constants", unresolved="fatal")]
llvm_config.add_tool_substitutions(tools, tool_dirs)

# The fake kernel libraries the runtime's tests load (FakeKernels.cpp): the
# good one and one per defect the refusal tests need. Tests find each by the
# compile definition CQ4P_FAKE_KERNELS<_VARIANT>_PATH (its full path). The
# fake model libraries (FakeModel.c) likewise, by CQ4P_FAKE_MODEL<_VARIANT>_PATH.

# <suffix>|<definition>; a global property, since test/fuzz uses it too.
set_property(GLOBAL PROPERTY CQ4P_FAKE_KERNEL_VARIANTS
  "-abi2|CQ4P_FAKE_ABI_VERSION=2"
  "-features|CQ4P_FAKE_MORE_FEATURES"
  "-bad-shape|CQ4P_FAKE_BAD_SHAPE"
  "-sme2|CQ4P_FAKE_SME2"
  "-no-table|CQ4P_FAKE_NO_TABLE"
  "-digest|CQ4P_FAKE_DIGEST"
  "-bad-digest|CQ4P_FAKE_BAD_DIGEST"
  "-variants|CQ4P_FAKE_VARIANTS=1"
  "-variants-v2|CQ4P_FAKE_VARIANTS=2")
set_property(GLOBAL PROPERTY CQ4P_FAKE_MODEL_VARIANTS
  "-any-digest|CQ4P_FAKE_MODEL_ANY_DIGEST"
  "-sme2|CQ4P_FAKE_MODEL_SME2"
  "-other-digest|CQ4P_FAKE_MODEL_OTHER_DIGEST")

# Like cq4p-compile's libraries, the fake ones have no initialisers, which
# the runtime refuses (KernelLibrary.h): no start files, and on AArch64 no
# outline atomics (their helpers come with a constructor that probes the CPU).
# (A function, not variables: test/fuzz builds sanitized variants too.)
# No fused multiply-adds either: the same rounding on the host and on aarch64.
function(cq4p_fake_library_options name)
  cmake_parse_arguments(ARG "" "" "OPTIONS" ${ARGN})
  target_compile_options(${name} PRIVATE -ffp-contract=off ${ARG_OPTIONS})
  if(CMAKE_SYSTEM_PROCESSOR MATCHES "aarch64|arm64")
    target_compile_options(${name} PRIVATE -mno-outline-atomics)
  endif()
  target_link_options(${name} PRIVATE -nostartfiles)
endfunction()

# cq4p_fake_kernel_library(<name> [DEFINES ...] [OPTIONS ...]): FakeKernels.cpp
# as a loadable module, compiled with OPTIONS (sanitizers) and DEFINES.
function(cq4p_fake_kernel_library name)
  cmake_parse_arguments(ARG "" "" "DEFINES;OPTIONS" ${ARGN})
  add_library(${name} MODULE ${PROJECT_SOURCE_DIR}/test/unit/Runtime/FakeKernels.cpp)
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR}/runtime/src
                                             ${PROJECT_SOURCE_DIR}/runtime/include)
  target_compile_definitions(${name} PRIVATE ${ARG_DEFINES})
  cq4p_fake_library_options(${name} OPTIONS ${ARG_OPTIONS})
  set_target_properties(${name} PROPERTIES CXX_VISIBILITY_PRESET hidden
                                           VISIBILITY_INLINES_HIDDEN ON)
endfunction()

# cq4p_fake_model_library(<name> [DEFINES ...] [OPTIONS ...]): FakeModel.c
# the same way.
function(cq4p_fake_model_library name)
  cmake_parse_arguments(ARG "" "" "DEFINES;OPTIONS" ${ARGN})
  add_library(${name} MODULE ${PROJECT_SOURCE_DIR}/test/unit/Runtime/FakeModel.c)
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR}/runtime/src
                                             ${PROJECT_SOURCE_DIR}/runtime/include)
  target_compile_definitions(${name} PRIVATE ${ARG_DEFINES})
  cq4p_fake_library_options(${name} OPTIONS ${ARG_OPTIONS})
  set_target_properties(${name} PROPERTIES C_VISIBILITY_PRESET hidden)
endfunction()

cq4p_fake_kernel_library(cq4p-fake-kernels)
get_property(variants GLOBAL PROPERTY CQ4P_FAKE_KERNEL_VARIANTS)
foreach(variant ${variants})
  string(REPLACE "|" ";" parts "${variant}")
  list(GET parts 0 suffix)
  list(GET parts 1 define)
  cq4p_fake_kernel_library(cq4p-fake-kernels${suffix} DEFINES ${define})
endforeach()
cq4p_fake_model_library(cq4p-fake-model)
get_property(variants GLOBAL PROPERTY CQ4P_FAKE_MODEL_VARIANTS)
foreach(variant ${variants})
  string(REPLACE "|" ";" parts "${variant}")
  list(GET parts 0 suffix)
  list(GET parts 1 define)
  cq4p_fake_model_library(cq4p-fake-model${suffix} DEFINES ${define})
endforeach()

# cq4p_use_fake_kernels(<test target> [SANITIZE <flags>...]): gives the
# target every library's path and builds them first. With SANITIZE the
# libraries whose code runs (the good kernels, the SME workers' -sme2 and the
# good model) are built with those flags too, so the sanitizers see the kernels' reads and
# writes of the runtime's buffers.
function(cq4p_use_fake_kernels target)
  cmake_parse_arguments(ARG "" "" "SANITIZE" ${ARGN})
  set(good cq4p-fake-kernels)
  set(sme2 cq4p-fake-kernels-sme2)
  set(model cq4p-fake-model)
  if(ARG_SANITIZE)
    # The executable's sanitizer runtime serves the libraries; without a
    # module constructor (and so without global-variable checks) they stay
    # free of initialisers, which the runtime refuses.
    list(APPEND ARG_SANITIZE "SHELL:-mllvm -asan-constructor-kind=none"
                             "SHELL:-mllvm -asan-globals=0")
    set(good cq4p-fake-kernels-sanitized)
    set(sme2 cq4p-fake-kernels-sme2-sanitized)
    set(model cq4p-fake-model-sanitized)
    if(NOT TARGET ${good})
      cq4p_fake_kernel_library(${good} OPTIONS ${ARG_SANITIZE})
      cq4p_fake_kernel_library(${sme2} DEFINES CQ4P_FAKE_SME2
                               OPTIONS ${ARG_SANITIZE})
      cq4p_fake_model_library(${model} OPTIONS ${ARG_SANITIZE})
    endif()
  endif()
  target_compile_definitions(${target} PRIVATE
    CQ4P_FAKE_KERNELS_PATH="$<TARGET_FILE:${good}>"
    CQ4P_FAKE_MODEL_PATH="$<TARGET_FILE:${model}>")
  add_dependencies(${target} ${good} ${model})
  get_property(variants GLOBAL PROPERTY CQ4P_FAKE_MODEL_VARIANTS)
  foreach(variant ${variants})
    string(REPLACE "|" ";" parts "${variant}")
    list(GET parts 0 suffix)
    string(TOUPPER "${suffix}" macro)
    string(REPLACE "-" "_" macro "${macro}")
    target_compile_definitions(${target} PRIVATE
      CQ4P_FAKE_MODEL${macro}_PATH="$<TARGET_FILE:cq4p-fake-model${suffix}>")
    add_dependencies(${target} cq4p-fake-model${suffix})
  endforeach()
  get_property(variants GLOBAL PROPERTY CQ4P_FAKE_KERNEL_VARIANTS)
  foreach(variant ${variants})
    string(REPLACE "|" ";" parts "${variant}")
    list(GET parts 0 suffix)
    string(TOUPPER "${suffix}" macro)
    string(REPLACE "-" "_" macro "${macro}")
    set(library cq4p-fake-kernels${suffix})
    if(suffix STREQUAL "-sme2")
      set(library ${sme2})
    endif()
    target_compile_definitions(${target} PRIVATE
      CQ4P_FAKE_KERNELS${macro}_PATH="$<TARGET_FILE:${library}>")
    add_dependencies(${target} ${library})
  endforeach()
endfunction()

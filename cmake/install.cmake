# What `cmake --install <build> --prefix P` installs, as LLVM's and IREE's
# runtime packages do:
#
#   bin/cq4p-opt, cq4p-compile (compiler builds), cq4p-run      component cq4p-tools
#   lib/libcq4p_runtime.so and libcq4p_runtime.a                 component cq4p-runtime
#   lib/libcq4p_core.a, libcq4p_text.a, libcq4p_convert.a (the runtime's
#     three parts, runtime/CMakeLists.txt: an app that runs token ids links
#     cq4p::core alone, and no tokenizer libraries)
#   include/cq4p/cq4p.h, kernel_abi.h, format.h (the C API)
#   lib/cmake/cq4p/: find_package(cq4p CONFIG) -> cq4p::runtime (shared),
#     cq4p::runtime_static, cq4p::core, cq4p::text, cq4p::convert,
#     cq4p::format; the tools as imported executables
#     (cq4p::cq4p-compile ...) when they were installed
#   lib/pkgconfig/cq4p.pc
#
# The runtime's part needs neither MLIR nor LLVM: a runtime-only build
# (-DCQ4P_ENABLE_COMPILER=OFF, as every cross build is) installs it, e.g.
# `cmake --install <build>/aarch64 --component cq4p-runtime --prefix P`.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(CQ4P_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/cq4p)

set_target_properties(cq4p_runtime PROPERTIES EXPORT_NAME runtime)
set_target_properties(cq4p_runtime_static PROPERTIES EXPORT_NAME runtime_static)
set_target_properties(cq4p_format PROPERTIES EXPORT_NAME format)
foreach(part core text convert)
  set_target_properties(cq4p_${part} PROPERTIES EXPORT_NAME ${part})
endforeach()
install(TARGETS cq4p_runtime cq4p_runtime_static cq4p_core cq4p_text cq4p_convert cq4p_format
  EXPORT cq4pTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT cq4p-runtime
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT cq4p-runtime
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT cq4p-runtime
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
# The C API only: the C++ classes behind it (cq4p/runtime/*.h) are not a
# stable interface.
install(FILES
  ${PROJECT_SOURCE_DIR}/runtime/include/cq4p/cq4p.h
  ${PROJECT_SOURCE_DIR}/runtime/include/cq4p/kernel_abi.h
  ${PROJECT_SOURCE_DIR}/runtime/include/cq4p/format.h
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/cq4p COMPONENT cq4p-runtime)
install(EXPORT cq4pTargets NAMESPACE cq4p:: DESTINATION ${CQ4P_INSTALL_CMAKEDIR}
  COMPONENT cq4p-runtime)

set(CQ4P_TOOLS cq4p-run)
if(CQ4P_ENABLE_COMPILER)
  list(APPEND CQ4P_TOOLS cq4p-opt cq4p-compile)
  # Installed, they still load libMLIR and libLLVM from the LLVM they were
  # built against (add_llvm_executable's install RPATH has only $ORIGIN/../lib).
  set_property(TARGET cq4p-opt cq4p-compile APPEND PROPERTY INSTALL_RPATH ${LLVM_LIBRARY_DIR})
endif()
install(TARGETS ${CQ4P_TOOLS} EXPORT cq4pToolTargets
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT cq4p-tools)
install(EXPORT cq4pToolTargets NAMESPACE cq4p:: DESTINATION ${CQ4P_INSTALL_CMAKEDIR}
  COMPONENT cq4p-tools)

# The processor the package was built for: cq4pConfig.cmake refuses to be
# found by a build for another one (a host prefix on a cross build's path).
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/cq4pConfig.cmake.in
  ${PROJECT_BINARY_DIR}/cmake/cq4pConfig.cmake
  INSTALL_DESTINATION ${CQ4P_INSTALL_CMAKEDIR}
  PATH_VARS CMAKE_INSTALL_INCLUDEDIR CMAKE_INSTALL_BINDIR)
# 0.x: a minor version may change the C API.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/cmake/cq4pConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/cmake/cq4pConfig.cmake
  ${PROJECT_BINARY_DIR}/cmake/cq4pConfigVersion.cmake
  DESTINATION ${CQ4P_INSTALL_CMAKEDIR} COMPONENT cq4p-runtime)

# pkg-config: relative to the .pc file, so the prefix given at install time
# (not the one configured) is the one it names.
file(RELATIVE_PATH CQ4P_PC_PREFIX
  /prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig /prefix)
string(REGEX REPLACE "/$" "" CQ4P_PC_PREFIX "${CQ4P_PC_PREFIX}")
# What a static link adds: the runtime is C++ (its standard library), dlopen
# and threads.
if(APPLE OR ANDROID)
  set(CQ4P_PC_PRIVATE c++ m ${CMAKE_DL_LIBS})
else()
  set(CQ4P_PC_PRIVATE stdc++ m ${CMAKE_DL_LIBS})
endif()
# The tokenizer's static archives (PCRE2, utf8proc) come first: the runtime
# archive needs them (cmake/TokenizerDeps.cmake).
list(TRANSFORM CQ4P_PC_PRIVATE PREPEND -l)
list(PREPEND CQ4P_PC_PRIVATE ${CQ4P_TOKENIZER_LIBS})
list(JOIN CQ4P_PC_PRIVATE " " CQ4P_PC_LIBS_PRIVATE)
string(APPEND CQ4P_PC_LIBS_PRIVATE " -pthread")
configure_file(${CMAKE_CURRENT_LIST_DIR}/cq4p.pc.in ${PROJECT_BINARY_DIR}/cmake/cq4p.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/cmake/cq4p.pc
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig COMPONENT cq4p-runtime)

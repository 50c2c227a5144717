# The tokenizer's libraries, from Debian's packages (scripts/setup installs
# them for the host, and unpacks the arm64 archives into CQ4P_ARM64_DEPS for
# a cross build): nlohmann-json (headers only),
# PCRE2 (the split patterns' Unicode classes, UTF + UCP, JIT) and utf8proc
# (NFC). Both libraries are linked statically, so the runtime, its shared
# library and the programs under QEMU need nothing more at run time.
#
# Their headers are arch-independent; they are copied into the build tree so
# a cross build does not put the host's /usr/include before its sysroot.
# Gives the INTERFACE targets cq4p_json_headers (nlohmann-json, headers only:
# the runtime's core library reads manifest.json with it too) and
# cq4p_tokenizer_deps (those headers, PCRE2 and utf8proc), and
# CQ4P_TOKENIZER_LIBS (the two archives, for the installed package's static
# consumers).
if(TARGET cq4p_tokenizer_deps)
  return()
endif()

if(CMAKE_SYSTEM_PROCESSOR MATCHES "aarch64|arm64")
  set(CQ4P_DEPS_TRIPLE aarch64-linux-gnu)
elseif(CMAKE_SYSTEM_PROCESSOR MATCHES "x86_64|AMD64")
  set(CQ4P_DEPS_TRIPLE x86_64-linux-gnu)
else()
  set(CQ4P_DEPS_TRIPLE ${CMAKE_LIBRARY_ARCHITECTURE})
endif()

set(tokenizer_libs "")
foreach(lib pcre2-8 utf8proc)
  string(MAKE_C_IDENTIFIER "CQ4P_LIB_${lib}_${CQ4P_DEPS_TRIPLE}" var)
  set(places /usr/lib/${CQ4P_DEPS_TRIPLE})
  if(CQ4P_ARM64_DEPS AND CQ4P_DEPS_TRIPLE STREQUAL "aarch64-linux-gnu")
    list(PREPEND places ${CQ4P_ARM64_DEPS}/usr/lib/${CQ4P_DEPS_TRIPLE})
  endif()
  find_file(${var} lib${lib}.a PATHS ${places} NO_DEFAULT_PATH NO_CMAKE_FIND_ROOT_PATH)
  if(NOT ${var})
    message(FATAL_ERROR "the tokenizer needs lib${lib}.a for ${CQ4P_DEPS_TRIPLE} in "
      "${places}: run scripts/setup")
  endif()
  list(APPEND tokenizer_libs ${${var}})
endforeach()
set(CQ4P_TOKENIZER_LIBS "${tokenizer_libs}" CACHE INTERNAL "the tokenizer's static archives")

set(CQ4P_DEPS_INCLUDE ${PROJECT_BINARY_DIR}/tokenizer-deps/include)
foreach(header pcre2.h utf8proc.h nlohmann/json.hpp)
  if(NOT EXISTS /usr/include/${header})
    message(FATAL_ERROR "the tokenizer needs /usr/include/${header}: run scripts/setup")
  endif()
endforeach()
file(COPY /usr/include/pcre2.h /usr/include/utf8proc.h /usr/include/nlohmann
  DESTINATION ${CQ4P_DEPS_INCLUDE})

add_library(cq4p_json_headers INTERFACE)
target_include_directories(cq4p_json_headers SYSTEM INTERFACE ${CQ4P_DEPS_INCLUDE})

add_library(cq4p_tokenizer_deps INTERFACE)
target_compile_definitions(cq4p_tokenizer_deps INTERFACE
  PCRE2_CODE_UNIT_WIDTH=8 PCRE2_STATIC UTF8PROC_STATIC)
target_link_libraries(cq4p_tokenizer_deps INTERFACE cq4p_json_headers ${CQ4P_TOKENIZER_LIBS})

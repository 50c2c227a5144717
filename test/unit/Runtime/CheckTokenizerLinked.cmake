# Whether a program links the tokenizer: its libraries (PCRE2, utf8proc) or
# its code, read from the program itself: its symbol table (the libraries
# are linked statically, so their code is in the program: PCRE2's pcre2_*
# functions, utf8proc's utf8proc_*; the runtime's cq4p_tokenizer_* and
# cq4p::runtime::Tokenizer) and its NEEDED entries (a shared library that
# holds them: libcq4p_runtime.so, or the libraries' own shared objects).
# (nlohmann-json is headers only, and the core library's manifest reader
# uses them too: it is no library to link.)
#
#   cmake -DPROGRAM=<file> -DNM=<llvm-nm> -DREADELF=<llvm-readelf>
#         -DEXPECT=absent|present -P CheckTokenizerLinked.cmake
#
# EXPECT=absent: a program of the runtime's core library alone, which must
# link none of it. EXPECT=present: a program of the text library, which must
# (the check finds them when they are there).
foreach(var PROGRAM NM READELF EXPECT)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "CheckTokenizerLinked: -D${var}=... is required")
  endif()
endforeach()
if(NOT EXPECT MATCHES "^(absent|present)$")
  message(FATAL_ERROR "CheckTokenizerLinked: EXPECT must be absent or present, found '${EXPECT}'")
endif()

execute_process(COMMAND ${NM} ${PROGRAM} OUTPUT_VARIABLE symbols
                RESULT_VARIABLE nm_status ERROR_VARIABLE nm_error)
if(NOT nm_status EQUAL 0)
  message(FATAL_ERROR "CheckTokenizerLinked: ${NM} ${PROGRAM} failed: ${nm_error}")
endif()
execute_process(COMMAND ${READELF} -d ${PROGRAM} OUTPUT_VARIABLE dynamic
                RESULT_VARIABLE readelf_status ERROR_VARIABLE readelf_error)
if(NOT readelf_status EQUAL 0)
  message(FATAL_ERROR "CheckTokenizerLinked: ${READELF} -d ${PROGRAM} failed: ${readelf_error}")
endif()

set(found "")
string(REGEX MATCHALL "[^\n]*(pcre2_|utf8proc_|cq4p_tokenizer_|N4cq4p7runtime9Tokenizer)[^\n]*"
       lines "${symbols}")
list(LENGTH lines count)
if(count GREATER 0)
  list(GET lines 0 first)
  string(STRIP "${first}" first)
  list(APPEND found "${count} symbols of the tokenizer or its libraries (the first: ${first})")
endif()
string(REGEX MATCHALL "NEEDED[^\n]*(pcre2|utf8proc|cq4p_runtime)[^\n]*" needed "${dynamic}")
foreach(line ${needed})
  string(REGEX REPLACE ".*\\[(.*)\\].*" "\\1" library "${line}")
  list(APPEND found "NEEDED ${library}")
endforeach()

list(JOIN found "; " described)
if(EXPECT STREQUAL "absent" AND found)
  message(FATAL_ERROR "${PROGRAM}: expected no tokenizer (a token-id program of cq4p_core "
    "alone), found ${described}")
endif()
if(EXPECT STREQUAL "present" AND NOT found)
  message(FATAL_ERROR "${PROGRAM}: expected the tokenizer and its libraries (a program of "
    "cq4p_text), found no pcre2_, utf8proc_ or tokenizer symbol and no NEEDED entry for them")
endif()
if(found)
  message(STATUS "${PROGRAM}: ${described}")
else()
  message(STATUS "${PROGRAM}: no tokenizer")
endif()

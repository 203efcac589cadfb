# The docs' code is tested: every ```cpp block of a page (except one marked
# "does not compile") goes into one program, whose main() calls each
# `void name()` the blocks define; the test builds and runs it. A page whose
# code stops compiling or whose asserts fail breaks the build or the test.
#
# A page may instead show a whole program with its own `int main(`; then no
# main() is added. If such a page also shows what the program prints, in a
# ```text block right after the line "<!-- output -->", the test compares
# the program's output with that block, character for character.
include_guard(GLOBAL)

set(_typemesh_doc_pages tour conversions ops layers first-program reference data backend)
if(TARGET typemesh::train)
  list(APPEND _typemesh_doc_pages train)
endif()
foreach(page IN LISTS _typemesh_doc_pages)
  set(_md ${PROJECT_SOURCE_DIR}/docs/${page}.md)
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${_md})
  file(READ ${_md} _text)
  # CMake lists split at ';': hide the code's semicolons while cutting blocks.
  string(REPLACE ";" "@SEMICOLON@" _text "${_text}")
  # Split at the fences; blocks are the odd pieces after a ```cpp line.
  string(REGEX MATCHALL "```cpp\n([^`]|`[^`]|``[^`])*```" _blocks "${_text}")
  set(_source "// Generated from docs/${page}.md; do not edit.\n")
  set(_calls "")
  set(_own_main FALSE)
  foreach(_block IN LISTS _blocks)
    if(_block MATCHES "does not compile")
      continue()
    endif()
    string(REGEX REPLACE "^```cpp\n" "" _block "${_block}")
    string(REGEX REPLACE "```$" "" _block "${_block}")
    string(APPEND _source "${_block}\n")
    if("\n${_block}" MATCHES "\nint main\\(")
      set(_own_main TRUE)
    endif()
    string(REGEX MATCHALL "\nvoid [a-z_0-9]+\\(\\) {" _defs "\n${_block}")
    foreach(_def IN LISTS _defs)
      string(REGEX REPLACE "\nvoid ([a-z_0-9]+)\\(\\) {" "  \\1()@SEMICOLON@\n" _call "${_def}")
      string(APPEND _calls "${_call}")
    endforeach()
  endforeach()
  if(NOT _own_main)
    string(APPEND _source "\nint main() {\n${_calls}}\n")
  endif()
  string(REPLACE "@SEMICOLON@" ";" _source "${_source}")
  file(GENERATE OUTPUT ${CMAKE_CURRENT_BINARY_DIR}/docs/${page}_snippets.cpp CONTENT "${_source}")
  add_executable(typemesh-docs-${page} ${CMAKE_CURRENT_BINARY_DIR}/docs/${page}_snippets.cpp)
  target_link_libraries(typemesh-docs-${page} PRIVATE typemesh::typemesh)
  if(page STREQUAL "train")
    target_link_libraries(typemesh-docs-${page} PRIVATE typemesh::train)
  endif()
  # The snippets check themselves with assert: keep it on.
  target_compile_options(typemesh-docs-${page} PRIVATE -UNDEBUG)
  if(_own_main AND _text MATCHES "<!-- output -->\n```text\n(([^`]|`[^`]|``[^`])*)```")
    string(REPLACE "@SEMICOLON@" ";" _expected "${CMAKE_MATCH_1}")
    file(GENERATE OUTPUT ${CMAKE_CURRENT_BINARY_DIR}/docs/${page}_output.txt CONTENT "${_expected}")
    add_test(NAME docs.${page}
             COMMAND ${CMAKE_COMMAND} -DPROGRAM=$<TARGET_FILE:typemesh-docs-${page}>
                     -DEXPECTED=${CMAKE_CURRENT_BINARY_DIR}/docs/${page}_output.txt
                     -P ${CMAKE_CURRENT_LIST_DIR}/compare_output.cmake)
  else()
    add_test(NAME docs.${page} COMMAND typemesh-docs-${page})
  endif()
  set_tests_properties(docs.${page} PROPERTIES LABELS docs TIMEOUT 120)
endforeach()

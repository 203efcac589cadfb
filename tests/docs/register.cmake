# The docs' code is tested: every ```cpp block of a page (except one marked
# "does not compile") goes into one program, whose main() calls each
# `void name()` the blocks define; the test builds and runs it. A page whose
# code stops compiling or whose asserts fail breaks the build or the test.
include_guard(GLOBAL)

foreach(page tour conversions ops layers)
  set(_md ${PROJECT_SOURCE_DIR}/docs/${page}.md)
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${_md})
  file(READ ${_md} _text)
  # CMake lists split at ';': hide the code's semicolons while cutting blocks.
  string(REPLACE ";" "@SEMICOLON@" _text "${_text}")
  # Split at the fences; blocks are the odd pieces after a ```cpp line.
  string(REGEX MATCHALL "```cpp\n([^`]|`[^`]|``[^`])*```" _blocks "${_text}")
  set(_source "// Generated from docs/${page}.md; do not edit.\n")
  set(_calls "")
  foreach(_block IN LISTS _blocks)
    if(_block MATCHES "does not compile")
      continue()
    endif()
    string(REGEX REPLACE "^```cpp\n" "" _block "${_block}")
    string(REGEX REPLACE "```$" "" _block "${_block}")
    string(APPEND _source "${_block}\n")
    string(REGEX MATCHALL "\nvoid [a-z_0-9]+\\(\\) {" _defs "\n${_block}")
    foreach(_def IN LISTS _defs)
      string(REGEX REPLACE "\nvoid ([a-z_0-9]+)\\(\\) {" "  \\1()@SEMICOLON@\n" _call "${_def}")
      string(APPEND _calls "${_call}")
    endforeach()
  endforeach()
  string(APPEND _source "\nint main() {\n${_calls}}\n")
  string(REPLACE "@SEMICOLON@" ";" _source "${_source}")
  file(GENERATE OUTPUT ${CMAKE_CURRENT_BINARY_DIR}/docs/${page}_snippets.cpp CONTENT "${_source}")
  add_executable(typemesh-docs-${page} ${CMAKE_CURRENT_BINARY_DIR}/docs/${page}_snippets.cpp)
  target_link_libraries(typemesh-docs-${page} PRIVATE typemesh::typemesh)
  # The snippets check themselves with assert: keep it on.
  target_compile_options(typemesh-docs-${page} PRIVATE -UNDEBUG)
  add_test(NAME docs.${page} COMMAND typemesh-docs-${page})
  set_tests_properties(docs.${page} PROPERTIES LABELS docs TIMEOUT 120)
endforeach()

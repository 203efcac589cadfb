# Compiles one compile-fail case and checks how the compiler answers. Run with
# `cmake -P`:
#
#   cmake -DCASE=<name> -DSOURCE=<case>.cpp -DMODE=fail|valid
#         -DCOMPILER=<c++> -DINCLUDE_DIR=<typemesh include dir>
#         [-DSYSTEM_INCLUDE_DIRS=<dir>|<dir>...] [-DPRELUDE=<header>]
#         -P check.cmake
#   cmake -DMODE=prelude -DPRELUDE=<header> -DCOMPILER=...
#         -DINCLUDE_DIR=... [-DSYSTEM_INCLUDE_DIRS=...] -P check.cmake
#
# MODE=fail  compiles the mistake (-DFIXED=0) and asserts that
#            1. the compile fails,
#            2. the first error the compiler reports is a typemesh check
#               (a static assertion whose message starts with "typemesh: "),
#               not a cascade from somewhere else,
#            3. the output matches every `// expect: <regex>` line of the
#               source: the check's message, and the check's name with the
#               dim, axis, shape or mesh it is about, as in
#               `diagnostic::dim_mapped_twice<batch,`.
# MODE=valid compiles the same code with the mistake fixed (-DFIXED=1) and
#            asserts that it compiles.
# MODE=prelude (g++ only) precompiles the header PRELUDE into PRELUDE.gch,
#            with the flags the cases compile with, and lists the headers
#            it read in PRELUDE.d. Given PRELUDE, the other modes compile
#            with `-include PRELUDE` when PRELUDE.gch is newer than every
#            header it was made of, and without it otherwise: g++ does not
#            check, and a header edited since would be read twice.
#
# The compile is -fsyntax-only: templates are instantiated, and so checked,
# but no code is generated. On any failure the compiler's output is printed.
cmake_minimum_required(VERSION 3.25)

set(_required MODE COMPILER INCLUDE_DIR)
if(NOT MODE STREQUAL "prelude")
  list(APPEND _required CASE SOURCE)
endif()
foreach(_var IN LISTS _required)
  if(NOT DEFINED ${_var} OR "${${_var}}" STREQUAL "")
    message(FATAL_ERROR "check.cmake: pass -D${_var}=...")
  endif()
endforeach()
if(MODE STREQUAL "fail")
  set(_fixed 0)
elseif(MODE STREQUAL "valid")
  set(_fixed 1)
elseif(MODE STREQUAL "prelude")
  if(NOT PRELUDE)
    message(FATAL_ERROR "check.cmake: MODE=prelude needs -DPRELUDE=<header>")
  endif()
else()
  message(FATAL_ERROR "check.cmake: MODE must be fail, valid or prelude, not '${MODE}'")
endif()
if(NOT MODE STREQUAL "prelude" AND NOT EXISTS "${SOURCE}")
  message(FATAL_ERROR "check.cmake: no case source '${SOURCE}'")
endif()

set(_includes "-I${INCLUDE_DIR}")
if(DEFINED SYSTEM_INCLUDE_DIRS AND NOT SYSTEM_INCLUDE_DIRS STREQUAL "")
  # '|'-separated, so the list survives add_test() and the command line.
  string(REPLACE "|" ";" _system_dirs "${SYSTEM_INCLUDE_DIRS}")
  foreach(_dir IN LISTS _system_dirs)
    list(APPEND _includes -isystem "${_dir}")
  endforeach()
endif()

# LC_ALL=C: plain ASCII quotes in the messages, whatever the user's locale.
# The prelude and the cases share these flags, or g++ would not use the
# precompiled prelude (-DFIXED is not among them: no header reads it).
set(_flags -std=c++20 -fdiagnostics-color=never ${_includes}
  -DTHRUST_DEVICE_SYSTEM=THRUST_DEVICE_SYSTEM_CPP)
if(MODE STREQUAL "prelude")
  execute_process(
    COMMAND "${CMAKE_COMMAND}" -E env LC_ALL=C "${COMPILER}" ${_flags}
      -x c++-header "${PRELUDE}" -o "${PRELUDE}.gch"
      -MD -MF "${PRELUDE}.d" -MT "${PRELUDE}.gch"
    RESULT_VARIABLE _result)
  if(NOT _result EQUAL 0)
    message(FATAL_ERROR "check.cmake: precompiling ${PRELUDE} failed (${_result})")
  endif()
  return()
endif()
# Whether PRELUDE.gch is there and newer than every header in PRELUDE.d.
function(_prelude_current result)
  set(${result} FALSE PARENT_SCOPE)
  if(NOT EXISTS "${PRELUDE}.gch" OR NOT EXISTS "${PRELUDE}.d")
    return()
  endif()
  file(READ "${PRELUDE}.d" _deps)
  string(REPLACE "\\\n" " " _deps "${_deps}")
  string(REGEX REPLACE "^[^:]*: *" "" _deps "${_deps}")
  string(STRIP "${_deps}" _deps)
  separate_arguments(_deps UNIX_COMMAND "${_deps}")
  foreach(_header IN LISTS _deps)
    if(NOT "${PRELUDE}.gch" IS_NEWER_THAN "${_header}")
      return()
    endif()
  endforeach()
  set(${result} TRUE PARENT_SCOPE)
endfunction()

set(_prelude)
if(PRELUDE)
  _prelude_current(_current)
endif()
if(PRELUDE AND NOT _current)
  message(STATUS "[${CASE}] ${PRELUDE}.gch is missing or older than a header it was made of "
    "(build the target typemesh-compile-fail-prelude): compiled without it")
elseif(PRELUDE)
  # -Winvalid-pch: `ctest -V` shows why g++ did not use the precompiled
  # prelude (flags that differ, say).
  set(_prelude -include "${PRELUDE}" -Winvalid-pch)
endif()
set(_command
  "${CMAKE_COMMAND}" -E env LC_ALL=C
  "${COMPILER}" ${_flags} -fsyntax-only ${_prelude}
  -DFIXED=${_fixed}
  "${SOURCE}")

execute_process(
  COMMAND ${_command}
  RESULT_VARIABLE _result
  OUTPUT_VARIABLE _output
  ERROR_VARIABLE _output
  TIMEOUT 300)

list(JOIN _command " " _command_line)
function(_fail why)
  message(FATAL_ERROR
    "[${CASE}] ${why}\n"
    "command: ${_command_line}\n"
    "compiler output:\n${_output}")
endfunction()

if(MODE STREQUAL "valid")
  if(NOT _result EQUAL 0)
    _fail("the fixed code (FIXED=1) does not compile (exit ${_result})")
  endif()
  message(STATUS "[${CASE}] the fixed code compiles")
  return()
endif()

if(_result EQUAL 0)
  _fail("the mistake (FIXED=0) compiles, but a typemesh check should reject it")
endif()
if(NOT _result MATCHES "^[0-9]+$")
  _fail("the compiler did not run to completion: ${_result}")
endif()

string(REGEX MATCH "[^\n]*error:[^\n]*" _first_error "${_output}")
if(NOT _first_error MATCHES "typemesh: ")
  _fail("the first error is not a typemesh check:\n  ${_first_error}")
endif()

# One error per mistake: once a check has said what is wrong, nothing that
# follows from the same call may add errors of its own.
# (';' would split a message into several list items: count lines without it.)
string(REPLACE ";" "," _output_lines "${_output}")
string(REGEX MATCHALL "[^\n]*error:[^\n]*" _errors "${_output_lines}")
list(LENGTH _errors _error_count)
if(NOT _error_count EQUAL 1)
  list(JOIN _errors "\n  " _error_lines)
  _fail("the mistake gives ${_error_count} errors, not 1:\n  ${_error_lines}")
endif()

file(STRINGS "${SOURCE}" _expectations REGEX "^// expect: ")
if(NOT _expectations)
  message(FATAL_ERROR "[${CASE}] ${SOURCE} has no '// expect: <regex>' line")
endif()
foreach(_line IN LISTS _expectations)
  string(REGEX REPLACE "^// expect: " "" _regex "${_line}")
  if(NOT _output MATCHES "${_regex}")
    _fail("the compiler output does not match '${_regex}'")
  endif()
endforeach()

# For `ctest -V`: the lines a user reads first.
string(REGEX MATCH "[^\n]*[Ii]n instantiation of[^\n]*" _first_context "${_output}")
message(STATUS "[${CASE}] rejected as expected:\n  ${_first_context}\n  ${_first_error}")

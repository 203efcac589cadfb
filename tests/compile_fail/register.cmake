# Registers the compile-fail suite. include() it from tests/CMakeLists.txt:
#
#   include(${PROJECT_SOURCE_DIR}/tests/compile_fail/register.cmake)
#
# For every case <name>.cpp in this directory (adding a case is adding a
# file), two tests with the label "compile":
#
#   compile_fail.<name>   the mistake must be rejected by the typemesh check
#                         the case names, with a readable first error and
#                         no other error
#   compile_valid.<name>  the same code with the mistake fixed must compile
#
# Each test is one `-fsyntax-only` compile, run by check.cmake with
# CMAKE_CXX_COMPILER. Run just this suite with `ctest -L compile`.
#
# With g++, the build precompiles prelude.hpp (the headers most cases parse)
# once, and every case is compiled with it: about 1-2 s of CPU a case instead
# of 3-5 (docs/reliability.md). Tests run while the .gch is missing or older
# than a header compile without it, and pass or fail the same.
include_guard(GLOBAL)

block(SCOPE_FOR VARIABLES)
  if(NOT CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang")
    message(STATUS "typemesh compile-fail tests need g++ or clang++; "
      "not registered for ${CMAKE_CXX_COMPILER_ID}")
    return()
  endif()

  if(NOT TYPEMESH_INCLUDE_DIR)
    cmake_path(SET TYPEMESH_INCLUDE_DIR NORMALIZE "${CMAKE_CURRENT_LIST_DIR}/../../include")
  endif()

  # Boost and Thrust, where they are not in the compiler's own search path
  # (passing /usr/include as -isystem would break #include_next).
  set(_system_dirs)
  foreach(_dir IN LISTS Boost_INCLUDE_DIRS TYPEMESH_THRUST_INCLUDE_DIR TYPEMESH_CBLAS_INCLUDE_DIR)
    if(_dir AND NOT _dir IN_LIST CMAKE_CXX_IMPLICIT_INCLUDE_DIRECTORIES
       AND NOT _dir IN_LIST _system_dirs)
      list(APPEND _system_dirs "${_dir}")
    endif()
  endforeach()
  list(JOIN _system_dirs "|" _system_dirs)

  # Every <name>.cpp here is a case; it says what it expects in `// expect:` lines.
  file(GLOB _sources CONFIGURE_DEPENDS "${CMAKE_CURRENT_LIST_DIR}/*.cpp")
  list(SORT _sources)
  set(_cases)
  foreach(_source IN LISTS _sources)
    cmake_path(GET _source STEM _case)
    list(APPEND _cases ${_case})
  endforeach()

  set(_common_arguments
    "-DCOMPILER=${CMAKE_CXX_COMPILER}"
    "-DINCLUDE_DIR=${TYPEMESH_INCLUDE_DIR}"
    "-DSYSTEM_INCLUDE_DIRS=${_system_dirs}")
  if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    # g++ takes a precompiled header from beside the header it includes, so
    # the build directory holds a header that includes prelude.hpp and the
    # .gch made of it.
    set(_prelude "${CMAKE_CURRENT_BINARY_DIR}/compile_fail/prelude.hpp")
    file(CONFIGURE OUTPUT "${_prelude}"
      CONTENT "#include \"${CMAKE_CURRENT_LIST_DIR}/prelude.hpp\"\n")
    add_custom_command(OUTPUT "${_prelude}.gch"
      COMMAND ${CMAKE_COMMAND} -DMODE=prelude "-DPRELUDE=${_prelude}" ${_common_arguments}
        -P "${CMAKE_CURRENT_LIST_DIR}/check.cmake"
      DEPENDS "${CMAKE_CURRENT_LIST_DIR}/check.cmake"
      DEPFILE "${_prelude}.d"
      COMMENT "Precompiling the compile-fail cases' prelude")
    add_custom_target(typemesh-compile-fail-prelude ALL DEPENDS "${_prelude}.gch")
    list(APPEND _common_arguments "-DPRELUDE=${_prelude}")
  endif()

  foreach(_case IN LISTS _cases)
    foreach(_mode IN ITEMS fail valid)
      set(_test compile_${_mode}.${_case})
      add_test(NAME ${_test}
        COMMAND ${CMAKE_COMMAND}
          "-DCASE=${_test}"
          "-DSOURCE=${CMAKE_CURRENT_LIST_DIR}/${_case}.cpp"
          "-DMODE=${_mode}"
          ${_common_arguments}
          -P "${CMAKE_CURRENT_LIST_DIR}/check.cmake")
      set_tests_properties(${_test} PROPERTIES
        LABELS compile
        TIMEOUT 300)
    endforeach()
  endforeach()
endblock()

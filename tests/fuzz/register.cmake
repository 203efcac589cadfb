# libFuzzer targets of the strategy search (tests/fuzz): the graph reader, the
# plan reader and typemesh-plan's command line. Each test builds its target
# with clang++ in a project of its own (tests/fuzz/CMakeLists.txt) and fuzzes
# it for TYPEMESH_FUZZ_SECONDS over the seed corpus in tests/fuzz/corpus/;
# skipped when clang++ or libFuzzer is missing. `ctest -L fuzz`.
include_guard(GLOBAL)

set(TYPEMESH_FUZZ_SECONDS 20 CACHE STRING "Seconds each fuzz test runs its fuzzer")
find_program(TYPEMESH_BASH bash)
if(TYPEMESH_BASH)
  foreach(target graph_reader plan_reader plan_cli)
    add_test(NAME fuzz.${target}
      COMMAND ${TYPEMESH_BASH} ${CMAKE_CURRENT_LIST_DIR}/run.sh ${target} ${CMAKE_CURRENT_BINARY_DIR}/fuzz
              ${TYPEMESH_FUZZ_SECONDS})
    math(EXPR _timeout "${TYPEMESH_FUZZ_SECONDS} + 900")
    set_tests_properties(fuzz.${target} PROPERTIES LABELS fuzz SKIP_RETURN_CODE 77 TIMEOUT ${_timeout})
  endforeach()
endif()

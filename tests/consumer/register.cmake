# Registers the downstream-consumer tests. include() it from tests/CMakeLists.txt:
#
#   include(${PROJECT_SOURCE_DIR}/tests/consumer/register.cmake)
#
# Each test configures a separate CMake project, so they are slow-ish (tens of
# seconds) and carry the label "consumer" for `ctest -L` / `ctest -LE`.
include_guard(GLOBAL)

block(SCOPE_FOR VARIABLES)
  cmake_path(GET CMAKE_CURRENT_LIST_DIR PARENT_PATH _tests_dir)
  cmake_path(GET _tests_dir PARENT_PATH _source_dir)

  set(_mpiexec "")
  if(TARGET typemesh::mpi)
    include(${_source_dir}/cmake/typemesh_mpiexec.cmake)
    typemesh_mpiexec(_mpiexec 2)
    list(JOIN _mpiexec "|" _mpiexec)
  endif()

  foreach(_mode IN ITEMS find_package subdirectory)
    add_test(NAME consumer.${_mode}
      COMMAND ${CMAKE_COMMAND}
        "-DTYPEMESH_SOURCE_DIR=${_source_dir}"
        "-DWORK_DIR=${CMAKE_BINARY_DIR}/consumer-${_mode}"
        "-DMODE=${_mode}"
        "-DCMAKE_CXX_COMPILER=${CMAKE_CXX_COMPILER}"
        "-DCMAKE_GENERATOR=${CMAKE_GENERATOR}"
        "-DCMAKE_MAKE_PROGRAM=${CMAKE_MAKE_PROGRAM}"
        "-DMPIEXEC=${_mpiexec}"
        -P "${CMAKE_CURRENT_LIST_DIR}/consumer_test.cmake")
    set_tests_properties(consumer.${_mode} PROPERTIES
      LABELS consumer
      TIMEOUT 600)
  endforeach()
endblock()

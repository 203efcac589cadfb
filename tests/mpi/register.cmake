# The MPI backend's tests, run under mpiexec. include() it from
# tests/CMakeLists.txt. Registered only when the typemesh::mpi target exists
# (MPI and Boost.MPI found).
#
#   mpi.collectives_4, mpi.collectives_8: collectives_test.cpp (GoogleTest) on
#     4 and 8 ranks, oversubscribed and allowed as root (CI runs as root on 2
#     cores).
#   mpi.abort_4, mpi.timeout_2: a failing rank and a collective a member never
#     joins end the whole job with that rank's message instead of a hang.
include_guard(GLOBAL)

if(NOT TARGET typemesh::mpi)
  return()
endif()

add_executable(typemesh-mpi-tests ${CMAKE_CURRENT_LIST_DIR}/collectives_test.cpp)
target_include_directories(typemesh-mpi-tests PRIVATE ${CMAKE_CURRENT_LIST_DIR}/..)
target_link_libraries(typemesh-mpi-tests PRIVATE typemesh::mpi GTest::gtest)
target_compile_options(typemesh-mpi-tests PRIVATE -Wall -Wextra)

block(SCOPE_FOR VARIABLES)
  set(_flags ${MPIEXEC_PREFLAGS})
  # Open MPI refuses root and more ranks than cores unless told.
  execute_process(COMMAND ${MPIEXEC_EXECUTABLE} --version OUTPUT_VARIABLE _version ERROR_QUIET)
  if(_version MATCHES "Open MPI|OpenRTE")
    list(PREPEND _flags --allow-run-as-root --oversubscribe)
  endif()
  foreach(_n 4 8)
    add_test(NAME mpi.collectives_${_n}
      COMMAND ${MPIEXEC_EXECUTABLE} ${_flags} ${MPIEXEC_NUMPROC_FLAG} ${_n}
        $<TARGET_FILE:typemesh-mpi-tests> ${MPIEXEC_POSTFLAGS})
    set_tests_properties(mpi.collectives_${_n} PROPERTIES LABELS mpi TIMEOUT 300)
  endforeach()

  # Expected to fail: the pass condition is the message, and the test's
  # TIMEOUT catches a hang.
  add_test(NAME mpi.abort_4
    COMMAND ${MPIEXEC_EXECUTABLE} ${_flags} ${MPIEXEC_NUMPROC_FLAG} 4
      $<TARGET_FILE:typemesh-mpi-tests> --fail=throw ${MPIEXEC_POSTFLAGS})
  set_tests_properties(mpi.abort_4 PROPERTIES LABELS mpi TIMEOUT 60
    PASS_REGULAR_EXPRESSION "typemesh: rank 2 \\(device 2 of 4\\) failed: loss is NaN on device 2")
  add_test(NAME mpi.timeout_2
    COMMAND ${MPIEXEC_EXECUTABLE} ${_flags} ${MPIEXEC_NUMPROC_FLAG} 2
      $<TARGET_FILE:typemesh-mpi-tests> --fail=timeout ${MPIEXEC_POSTFLAGS})
  set_tests_properties(mpi.timeout_2 PROPERTIES LABELS mpi TIMEOUT 60
    PASS_REGULAR_EXPRESSION "rank 0 \\(device 0 of 2\\) failed: typemesh: allreduce over group \\[0 1\\] \\(pair\\) on device 0 timed out after 300 ms")
endblock()

# Runs a program on the host-thread backend and under mpiexec, and fails
# unless every rank printed exactly what the host run printed: the check that
# nothing in a program depends on which backend runs it. Needs Open MPI's
# mpiexec (--output-filename keeps each rank's output apart).
#
#   cmake -DPROGRAM=<exe> -DMPIEXEC=<launcher and flags, '|'-separated>
#         -DRANKS=<n> -DOUTPUT_DIR=<dir> -P compare_backends.cmake
foreach(var PROGRAM MPIEXEC RANKS OUTPUT_DIR)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "compare_backends.cmake: -D${var}=... is missing")
  endif()
endforeach()
string(REPLACE "|" ";" mpiexec "${MPIEXEC}")

execute_process(COMMAND ${PROGRAM} OUTPUT_VARIABLE host_output ERROR_VARIABLE host_errors RESULT_VARIABLE host_status)
if(NOT host_status EQUAL 0)
  message(FATAL_ERROR "the host-thread run failed (${host_status}):\n${host_output}${host_errors}")
endif()

file(REMOVE_RECURSE "${OUTPUT_DIR}")
# TYPEMESH_BACKEND=mpi: a program that was built without MPI fails here
# instead of running on host threads in every rank.
execute_process(COMMAND ${CMAKE_COMMAND} -E env TYPEMESH_BACKEND=mpi ${mpiexec} --output-filename "${OUTPUT_DIR}" ${PROGRAM}
                OUTPUT_QUIET ERROR_VARIABLE mpi_errors RESULT_VARIABLE mpi_status)
if(NOT mpi_status EQUAL 0)
  message(FATAL_ERROR "the MPI run on ${RANKS} ranks failed (${mpi_status}):\n${mpi_errors}")
endif()

math(EXPR last "${RANKS} - 1")
foreach(rank RANGE ${last})
  file(GLOB stdout_file "${OUTPUT_DIR}/*/rank.${rank}/stdout")
  if(NOT stdout_file)
    message(FATAL_ERROR "rank ${rank} left no output under ${OUTPUT_DIR}")
  endif()
  file(READ "${stdout_file}" rank_output)
  if(NOT rank_output STREQUAL host_output)
    message(FATAL_ERROR "rank ${rank}'s output differs from the host-thread run's.\n"
                        "--- host threads:\n${host_output}\n--- MPI rank ${rank}:\n${rank_output}")
  endif()
endforeach()
message(STATUS "all ${RANKS} ranks printed what the host-thread run printed")

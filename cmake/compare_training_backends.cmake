# Runs a training program on host threads and under mpiexec, and fails unless
# the first rank printed what the host run printed, up to the measured
# rates and times, and the other ranks printed nothing (a program's output
# comes once, from the first rank). Needs Open MPI's mpiexec
# (--output-filename keeps each rank's output apart).
#
#   cmake -DPROGRAM=<exe> -DARGS=<arguments, '|'-separated> -DMPIEXEC=<launcher and flags, '|'-separated>
#         -DRANKS=<n> -DOUTPUT_DIR=<dir> -P compare_training_backends.cmake
foreach(var PROGRAM ARGS MPIEXEC RANKS OUTPUT_DIR)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "compare_training_backends.cmake: -D${var}=... is missing")
  endif()
endforeach()
string(REPLACE "|" ";" mpiexec "${MPIEXEC}")
string(REPLACE "|" ";" args "${ARGS}")

# Rates, times and estimates vary from run to run; everything else must not.
function(without_timings text var)
  string(REGEX REPLACE "[0-9.]+ samples/s" "<rate> samples/s" text "${text}")
  string(REGEX REPLACE "eta [0-9:-]+" "eta <t>" text "${text}")
  string(REGEX REPLACE "in [0-9.]+ s\\)" "in <t> s)" text "${text}")
  set(${var} "${text}" PARENT_SCOPE)
endfunction()

execute_process(COMMAND ${PROGRAM} ${args} --backend host OUTPUT_VARIABLE host_output ERROR_VARIABLE host_errors
                RESULT_VARIABLE host_status)
if(NOT host_status EQUAL 0)
  message(FATAL_ERROR "the host-thread run failed (${host_status}):\n${host_output}${host_errors}")
endif()
without_timings("${host_output}" host_output)

file(REMOVE_RECURSE "${OUTPUT_DIR}")
execute_process(COMMAND ${mpiexec} --output-filename "${OUTPUT_DIR}" ${PROGRAM} ${args} --backend mpi
                OUTPUT_QUIET ERROR_VARIABLE mpi_errors RESULT_VARIABLE mpi_status)
if(NOT mpi_status EQUAL 0)
  message(FATAL_ERROR "the MPI run on ${RANKS} ranks failed (${mpi_status}):\n${mpi_errors}")
endif()

math(EXPR last "${RANKS} - 1")
foreach(rank RANGE ${last})
  file(GLOB stdout_file "${OUTPUT_DIR}/*/rank.${rank}/stdout")
  set(rank_output "")
  if(stdout_file)
    file(READ "${stdout_file}" rank_output)
  endif()
  without_timings("${rank_output}" rank_output)
  if(rank EQUAL 0 AND NOT rank_output STREQUAL host_output)
    message(FATAL_ERROR "rank 0's output differs from the host-thread run's.\n"
                        "--- host threads:\n${host_output}\n--- MPI rank 0:\n${rank_output}")
  elseif(NOT rank EQUAL 0 AND NOT rank_output STREQUAL "")
    message(FATAL_ERROR "rank ${rank} printed output; only the first rank should:\n${rank_output}")
  endif()
endforeach()
message(STATUS "rank 0 printed what the host-thread run printed; the other ${last} ranks printed nothing")

# Runs a training program with a metrics line per step and fails unless the
# metrics file holds one line for each of its STEPS steps, in order, each
# with a finite loss and a wall_s no smaller than the step before's: the
# per-step times that bench/peer_seed.py takes differences of.
#
#   cmake -DPROGRAM=<exe> -DARGS=<arguments, '|'-separated> -DSTEPS=<n> -DMETRICS=<file>
#         -P check_step_metrics.cmake
foreach(var PROGRAM ARGS STEPS METRICS)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "check_step_metrics.cmake: -D${var}=... is missing")
  endif()
endforeach()
string(REPLACE "|" ";" args "${ARGS}")

file(REMOVE "${METRICS}")
execute_process(COMMAND ${PROGRAM} ${args} --epochs 1 --max-steps ${STEPS} --display-steps 1 --metrics ${METRICS}
                OUTPUT_VARIABLE output ERROR_VARIABLE errors RESULT_VARIABLE status)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "the run failed (${status}):\n${output}${errors}")
endif()

file(STRINGS "${METRICS}" lines)
list(LENGTH lines count)
if(NOT count EQUAL STEPS)
  message(FATAL_ERROR "${METRICS} holds ${count} lines, not one per step (${STEPS}):\n${lines}")
endif()
set(expected 1)
set(previous 0)
foreach(line IN LISTS lines)
  string(JSON step GET "${line}" step)
  string(JSON wall GET "${line}" wall_s)
  string(JSON loss_type TYPE "${line}" loss)
  if(NOT step EQUAL expected)
    message(FATAL_ERROR "line ${expected} of ${METRICS} is step ${step}: ${line}")
  endif()
  if(NOT loss_type STREQUAL "NUMBER")
    message(FATAL_ERROR "step ${step} has no finite loss: ${line}")
  endif()
  if(wall LESS previous)
    message(FATAL_ERROR "step ${step}'s wall_s ${wall} is below the step before's ${previous}")
  endif()
  set(previous ${wall})
  math(EXPR expected "${expected} + 1")
endforeach()

# Runs PROGRAM and checks that it succeeds and prints exactly the text in the
# file EXPECTED (the output a page of the docs shows).
#   cmake -DPROGRAM=<executable> -DEXPECTED=<file> -P compare_output.cmake
execute_process(COMMAND ${PROGRAM} OUTPUT_VARIABLE _printed ERROR_VARIABLE _errors RESULT_VARIABLE _status)
if(NOT _status EQUAL 0)
  message(FATAL_ERROR "${PROGRAM} failed (${_status}):\n${_errors}")
endif()
file(READ ${EXPECTED} _expected)
if(NOT _printed STREQUAL _expected)
  message(FATAL_ERROR "${PROGRAM} printed\n${_printed}\nbut the page shows\n${_expected}")
endif()

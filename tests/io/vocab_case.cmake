# Runs typemesh-vocab once: cmake -DTOOL=... -DARGS=a|b -DSTATUS=0 [-DEXPECT=regex]
# [-DOUTPUT=file -DEXPECTED=file] -P vocab_case.cmake. Another status, a
# message that does not match or an output file that differs fails the test.
string(REPLACE "|" ";" _args "${ARGS}")
execute_process(COMMAND ${TOOL} ${_args}
  RESULT_VARIABLE _status OUTPUT_VARIABLE _out ERROR_VARIABLE _err TIMEOUT 60)
if(NOT "${_status}" STREQUAL "${STATUS}")
  message(FATAL_ERROR "typemesh-vocab ${_args}: ended with '${_status}', expected ${STATUS}\n"
                      "stdout:\n${_out}\nstderr:\n${_err}")
endif()
if(DEFINED EXPECT AND NOT "${_out}${_err}" MATCHES "${EXPECT}")
  message(FATAL_ERROR "typemesh-vocab ${_args}: output does not match '${EXPECT}':\n${_out}${_err}")
endif()
if(DEFINED OUTPUT)
  file(READ ${OUTPUT} _got)
  file(READ ${EXPECTED} _want)
  if(NOT _got STREQUAL _want)
    message(FATAL_ERROR "typemesh-vocab ${_args}: ${OUTPUT} is\n${_got}\nexpected\n${_want}")
  endif()
endif()

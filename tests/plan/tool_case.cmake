# Runs typemesh-plan once and checks how it ends: cmake -DTOOL=... -DARGS=a|b
# -DSTATUS=2 (a regex: 0|2) -DEXPECT=regex -DTIME_LIMIT=60 -P tool_case.cmake. A crash, a
# hang (past TIME_LIMIT seconds), another status or a message that does not
# match fails the test.
if(NOT DEFINED TIME_LIMIT)
  set(TIME_LIMIT 60)
endif()
string(REPLACE "|" ";" _args "${ARGS}")
execute_process(COMMAND ${TOOL} ${_args}
  RESULT_VARIABLE _status OUTPUT_VARIABLE _out ERROR_VARIABLE _err
  TIMEOUT ${TIME_LIMIT})
if(NOT "${_status}" MATCHES "^(${STATUS})$")
  message(FATAL_ERROR "typemesh-plan ${_args}: ended with '${_status}', expected status ${STATUS}\n"
                      "stdout:\n${_out}\nstderr:\n${_err}")
endif()
if(DEFINED EXPECT AND NOT "${_err}" MATCHES "${EXPECT}")
  message(FATAL_ERROR "typemesh-plan ${_args}: stderr does not match '${EXPECT}':\n${_err}")
endif()
if("${_out}" MATCHES "(\t|: )-?(nan|inf)")
  message(FATAL_ERROR "typemesh-plan ${_args}: a cost that is not finite:\n${_out}")
endif()

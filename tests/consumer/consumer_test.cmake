# Builds and runs tests/consumer against typemesh, the way a downstream
# project would. Run with `cmake -P`:
#
#   cmake -DTYPEMESH_SOURCE_DIR=<typemesh source> -DWORK_DIR=<scratch dir>
#         -DMODE=find_package|subdirectory [-DCMAKE_CXX_COMPILER=<c++>]
#         [-DCMAKE_GENERATOR=<generator>] [-DCMAKE_MAKE_PROGRAM=<tool>]
#         [-DMPIEXEC=<launcher and flags, '|'-separated>]
#         -P consumer_test.cmake
#
# With MPIEXEC (given when the project has typemesh::mpi), the consumer must
# also build typemesh_consumer_mpi against typemesh::mpi; it runs plainly
# (host threads) and on 2 ranks.
#
# find_package: configure and install typemesh into WORK_DIR/prefix, then build
#               the consumer with CMAKE_PREFIX_PATH=WORK_DIR/prefix.
# subdirectory: build the consumer with typemesh pulled in by add_subdirectory.
#
# WORK_DIR is wiped first so that nothing from an earlier run (a stale
# install, a cached typemesh_DIR) can make a broken package look fine.
cmake_minimum_required(VERSION 3.25)

foreach(_var IN ITEMS TYPEMESH_SOURCE_DIR WORK_DIR MODE)
  if(NOT DEFINED ${_var} OR "${${_var}}" STREQUAL "")
    message(FATAL_ERROR "consumer_test.cmake: pass -D${_var}=...")
  endif()
endforeach()
if(NOT MODE MATCHES "^(find_package|subdirectory)$")
  message(FATAL_ERROR "consumer_test.cmake: MODE must be find_package or subdirectory, not '${MODE}'")
endif()

cmake_path(ABSOLUTE_PATH TYPEMESH_SOURCE_DIR NORMALIZE)
cmake_path(ABSOLUTE_PATH WORK_DIR NORMALIZE)
set(_consumer_source "${TYPEMESH_SOURCE_DIR}/tests/consumer")
set(_build_type Release)

# Settings every nested configure shares, so the consumer is built with the
# same toolchain as the project that registered the test.
set(_common_args "-DCMAKE_BUILD_TYPE=${_build_type}")
foreach(_var IN ITEMS CMAKE_CXX_COMPILER CMAKE_MAKE_PROGRAM)
  if(DEFINED ${_var} AND NOT "${${_var}}" STREQUAL "")
    list(APPEND _common_args "-D${_var}=${${_var}}")
  endif()
endforeach()
if(DEFINED CMAKE_GENERATOR AND NOT CMAKE_GENERATOR STREQUAL "")
  list(APPEND _common_args -G "${CMAKE_GENERATOR}")
endif()

# Runs one step; on failure stops the script with that step's full output.
function(_consumer_step name)
  message(STATUS "[consumer.${MODE}] ${name}")
  execute_process(
    COMMAND ${ARGN}
    RESULT_VARIABLE _result
    OUTPUT_VARIABLE _output
    ERROR_VARIABLE _output)
  if(NOT _result EQUAL 0)
    list(JOIN ARGN " " _command)
    # message() reflows text but leaves indented lines alone, which keeps
    # compiler diagnostics readable.
    string(REPLACE "\n" "\n  " _output "  ${_output}")
    message(FATAL_ERROR
      "[consumer.${MODE}] step '${name}' failed (${_result})\n"
      "  ${_command}\n"
      "output:\n${_output}")
  endif()
  set(_step_output "${_output}" PARENT_SCOPE)
endfunction()

file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}")

set(_consumer_build "${WORK_DIR}/consumer")

if(MODE STREQUAL "find_package")
  set(_typemesh_build "${WORK_DIR}/build")
  set(_prefix "${WORK_DIR}/prefix")

  _consumer_step("configure typemesh"
    ${CMAKE_COMMAND} -S "${TYPEMESH_SOURCE_DIR}" -B "${_typemesh_build}"
      ${_common_args}
      "-DCMAKE_INSTALL_PREFIX=${_prefix}"
      -DTYPEMESH_BUILD_TESTS=OFF
      -DTYPEMESH_BUILD_EXAMPLES=OFF
      -DTYPEMESH_BUILD_BENCH=OFF
      -DTYPEMESH_BUILD_TOOLS=OFF)
  _consumer_step("install typemesh"
    ${CMAKE_COMMAND} --install "${_typemesh_build}" --config ${_build_type})

  _consumer_step("configure consumer"
    ${CMAKE_COMMAND} -S "${_consumer_source}" -B "${_consumer_build}"
      ${_common_args}
      -DTYPEMESH_CONSUME=find_package
      "-DCMAKE_PREFIX_PATH=${_prefix}")

  # A typemesh installed elsewhere on the machine must not stand in for the
  # package under test.
  file(STRINGS "${_consumer_build}/CMakeCache.txt" _found_dir
    REGEX "^typemesh_DIR:PATH=")
  string(REGEX REPLACE "^typemesh_DIR:PATH=" "" _found_dir "${_found_dir}")
  cmake_path(IS_PREFIX _prefix "${_found_dir}" NORMALIZE _from_prefix)
  if(NOT _from_prefix)
    message(FATAL_ERROR
      "[consumer.${MODE}] find_package found typemesh in '${_found_dir}', "
      "not in the fresh install under '${_prefix}'")
  endif()
else()
  _consumer_step("configure consumer"
    ${CMAKE_COMMAND} -S "${_consumer_source}" -B "${_consumer_build}"
      ${_common_args}
      -DTYPEMESH_CONSUME=subdirectory
      "-DTYPEMESH_SOURCE_DIR=${TYPEMESH_SOURCE_DIR}")
endif()

_consumer_step("build consumer"
  ${CMAKE_COMMAND} --build "${_consumer_build}" --config ${_build_type})

set(_exe "${_consumer_build}/bin/typemesh_consumer")
if(CMAKE_HOST_WIN32)
  string(APPEND _exe ".exe")
endif()
_consumer_step("run consumer" "${_exe}")
string(STRIP "${_step_output}" _step_output)
message(STATUS "[consumer.${MODE}] ${_step_output}")

if(DEFINED MPIEXEC AND NOT MPIEXEC STREQUAL "")
  set(_mpi_exe "${_consumer_build}/bin/typemesh_consumer_mpi")
  if(NOT EXISTS "${_mpi_exe}")
    message(FATAL_ERROR "[consumer.${MODE}] typemesh::mpi was not available to the consumer (no ${_mpi_exe})")
  endif()
  _consumer_step("run the typemesh::mpi consumer on host threads" "${_mpi_exe}")
  string(REPLACE "|" ";" _mpiexec "${MPIEXEC}")
  _consumer_step("run the typemesh::mpi consumer on 2 ranks" ${_mpiexec} "${_mpi_exe}")
  message(STATUS "[consumer.${MODE}] typemesh::mpi ran on host threads and on 2 ranks")
endif()

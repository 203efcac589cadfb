# Registers the nvcc compile test. include() it from tests/CMakeLists.txt:
#
#   include(${PROJECT_SOURCE_DIR}/tests/cuda/register.cmake)
#
# cuda.compile_core compiles core_compile.cu with nvcc for sm_80 and sm_90
# (compile only: no GPU is needed), so that a host build checks that the
# core headers keep compiling with nvcc. The CUDA configuration
# (TYPEMESH_CUDA, docs/backend.md) compiles everything else. Label "cuda".
#
# nvcc is looked for in CMAKE_CUDA_COMPILER when that is set, then under the
# toolkit named by CUDAToolkit_ROOT (CMake or environment variable), CUDA_PATH
# or CUDA_HOME, then on PATH, then in the toolkit's standard location. Without
# nvcc the test is still registered and reported as skipped.
include_guard(GLOBAL)

block(SCOPE_FOR VARIABLES)
  if(CMAKE_CUDA_COMPILER)
    set(TYPEMESH_NVCC_EXECUTABLE "${CMAKE_CUDA_COMPILER}" CACHE FILEPATH "nvcc for the CUDA compile test")
  else()
    find_program(TYPEMESH_NVCC_EXECUTABLE nvcc
      HINTS ${CUDAToolkit_ROOT} ENV CUDAToolkit_ROOT ENV CUDA_PATH ENV CUDA_HOME
      PATHS /usr/local/cuda
      PATH_SUFFIXES bin
      DOC "nvcc for the CUDA compile test")
  endif()
  mark_as_advanced(TYPEMESH_NVCC_EXECUTABLE)

  if(NOT TYPEMESH_NVCC_EXECUTABLE)
    set(_why "nvcc not found (set CUDAToolkit_ROOT or CUDA_PATH, or put nvcc on PATH): skipped")
    if(CMAKE_HOST_UNIX)
      add_test(NAME cuda.compile_core COMMAND sh -c "echo 'cuda.compile_core: ${_why}'; exit 77")
    else()
      add_test(NAME cuda.compile_core COMMAND ${CMAKE_COMMAND} -E echo "cuda.compile_core: ${_why}")
      set_tests_properties(cuda.compile_core PROPERTIES
        SKIP_REGULAR_EXPRESSION ": nvcc not found")
    endif()
    set_tests_properties(cuda.compile_core PROPERTIES
      SKIP_RETURN_CODE 77
      LABELS cuda)
    return()
  endif()

  if(NOT TYPEMESH_INCLUDE_DIR)
    cmake_path(SET TYPEMESH_INCLUDE_DIR NORMALIZE "${CMAKE_CURRENT_LIST_DIR}/../../include")
  endif()

  # Boost where the host compiler does not already look. Thrust is not passed
  # on: nvcc must use the Thrust (CCCL) bundled with the toolkit.
  set(_includes "-I${TYPEMESH_INCLUDE_DIR}")
  foreach(_dir IN LISTS Boost_INCLUDE_DIRS)
    if(_dir AND NOT _dir IN_LIST CMAKE_CXX_IMPLICIT_INCLUDE_DIRECTORIES)
      list(APPEND _includes -isystem "${_dir}")
    endif()
  endforeach()

  set(_host_compiler)
  if(CMAKE_CUDA_HOST_COMPILER)
    set(_host_compiler -ccbin "${CMAKE_CUDA_HOST_COMPILER}")
  endif()

  set(_object_dir "${CMAKE_CURRENT_BINARY_DIR}/cuda")
  file(MAKE_DIRECTORY "${_object_dir}")

  # Both GPU generations the CUDA build targets; --extended-lambda for the
  # kernel bodies written as lambdas. THRUST_DEVICE_SYSTEM is deliberately
  # not defined: nvcc's default is CUDA.
  set(_flags -std=c++20 --extended-lambda -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90)
  add_test(NAME cuda.compile_core
    COMMAND "${TYPEMESH_NVCC_EXECUTABLE}" ${_host_compiler} ${_flags} ${_includes}
      -c "${CMAKE_CURRENT_LIST_DIR}/core_compile.cu"
      -o "${_object_dir}/core_compile.o")
  set_tests_properties(cuda.compile_core PROPERTIES
    LABELS cuda
    TIMEOUT 600)
endblock()

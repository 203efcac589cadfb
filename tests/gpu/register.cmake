# Registers the GPU tests. include() it from tests/CMakeLists.txt.
#
# typemesh-test-gpu is nccl_test.cpp compiled by nvcc as CUDA source for sm_80
# and sm_90 (the flags of tests/cuda/register.cmake), linked against the CUDA
# runtime and NCCL (typemesh::nccl), and run: each test is a ctest test with
# the label "gpu". Without a GPU every test that needs one reports itself
# skipped, saying why; the few that check what happens without enough GPUs
# run anywhere.
#
# Without nvcc or the typemesh::nccl target a single test gpu.unavailable is
# registered instead and reported as skipped.
#
# typemesh-test-gpu-stand-in is the same nccl_test.cpp compiled by the host
# compiler and linked against cuda_stand_in.cpp, a CPU stand-in for the CUDA
# runtime and NCCL, instead of the real libraries: the communicator's own
# logic runs on every machine whose CUDA toolkit has nccl.h. Its tests are
# stand_in.<name>, label "runtime".
include_guard(GLOBAL)

if(CUDAToolkit_FOUND AND TYPEMESH_NCCL_INCLUDE_DIR)
  add_executable(typemesh-test-gpu-stand-in ${CMAKE_CURRENT_LIST_DIR}/nccl_test.cpp
    ${CMAKE_CURRENT_LIST_DIR}/cuda_stand_in.cpp)
  target_include_directories(typemesh-test-gpu-stand-in SYSTEM PRIVATE ${CUDAToolkit_INCLUDE_DIRS}
    ${TYPEMESH_NCCL_INCLUDE_DIR})
  target_link_libraries(typemesh-test-gpu-stand-in PRIVATE typemesh::typemesh GTest::gtest GTest::gtest_main)
  target_compile_options(typemesh-test-gpu-stand-in PRIVATE -Wall -Wextra)
  gtest_discover_tests(typemesh-test-gpu-stand-in TEST_PREFIX stand_in. DISCOVERY_TIMEOUT 60
    PROPERTIES LABELS runtime TIMEOUT 300)
endif()

block(SCOPE_FOR VARIABLES)
  if(CMAKE_CUDA_COMPILER)
    set(_nvcc "${CMAKE_CUDA_COMPILER}")
  else()
    find_program(TYPEMESH_NVCC_EXECUTABLE nvcc
      HINTS ${CUDAToolkit_ROOT} ENV CUDAToolkit_ROOT ENV CUDA_PATH ENV CUDA_HOME
      PATHS /usr/local/cuda
      PATH_SUFFIXES bin
      DOC "nvcc for the CUDA tests")
    set(_nvcc "${TYPEMESH_NVCC_EXECUTABLE}")
  endif()

  set(_why "")
  if(NOT _nvcc)
    set(_why "nvcc not found (set CUDAToolkit_ROOT or CUDA_PATH, or put nvcc on PATH)")
  elseif(NOT TARGET typemesh::nccl)
    set(_why "no typemesh::nccl target (the CUDA toolkit or NCCL was not found)")
  endif()
  if(_why)
    add_test(NAME gpu.unavailable COMMAND sh -c "echo 'gpu tests: ${_why}: skipped'; exit 77")
    set_tests_properties(gpu.unavailable PROPERTIES SKIP_RETURN_CODE 77 LABELS gpu)
    return()
  endif()

  # Boost, cblas.h and GoogleTest where the host compiler does not already
  # look. Thrust is not passed on: nvcc uses the toolkit's own.
  set(_includes "-I${PROJECT_SOURCE_DIR}/include" "-I${CMAKE_CURRENT_LIST_DIR}/..")
  get_target_property(_gtest_includes GTest::gtest INTERFACE_INCLUDE_DIRECTORIES)
  foreach(_dir IN LISTS Boost_INCLUDE_DIRS TYPEMESH_CBLAS_INCLUDE_DIR TYPEMESH_NCCL_INCLUDE_DIR _gtest_includes)
    if(_dir AND NOT _dir IN_LIST CMAKE_CXX_IMPLICIT_INCLUDE_DIRECTORIES)
      list(APPEND _includes -isystem "${_dir}")
    endif()
  endforeach()
  set(_host_compiler)
  if(CMAKE_CUDA_HOST_COMPILER)
    set(_host_compiler -ccbin "${CMAKE_CUDA_HOST_COMPILER}")
  endif()

  set(_flags -std=c++20 --extended-lambda -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90)
  set(_source "${CMAKE_CURRENT_LIST_DIR}/nccl_test.cpp")
  set(_object "${CMAKE_CURRENT_BINARY_DIR}/gpu/nccl_test.o")
  file(MAKE_DIRECTORY "${CMAKE_CURRENT_BINARY_DIR}/gpu")
  add_custom_command(OUTPUT "${_object}"
    COMMAND "${_nvcc}" ${_host_compiler} ${_flags} ${_includes} -MD -MF "${_object}.d"
      -x cu -c "${_source}" -o "${_object}"
    DEPENDS "${_source}"
    DEPFILE "${_object}.d"
    COMMENT "Compiling tests/gpu/nccl_test.cpp with nvcc (sm_80, sm_90)"
    VERBATIM)
  set_source_files_properties("${_object}" PROPERTIES EXTERNAL_OBJECT TRUE GENERATED TRUE)

  add_executable(typemesh-test-gpu "${_object}")
  set_target_properties(typemesh-test-gpu PROPERTIES LINKER_LANGUAGE CXX)
  target_link_libraries(typemesh-test-gpu PRIVATE typemesh::nccl GTest::gtest GTest::gtest_main)
  gtest_discover_tests(typemesh-test-gpu DISCOVERY_TIMEOUT 60 PROPERTIES LABELS gpu TIMEOUT 300)
endblock()

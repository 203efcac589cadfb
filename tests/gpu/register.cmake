# Registers the NCCL communicator's tests. include() it from tests/CMakeLists.txt.
#
# In the CUDA configuration (TYPEMESH_CUDA), typemesh-test-nccl is
# nccl_test.cpp compiled by nvcc and linked against the CUDA runtime and NCCL
# (typemesh::nccl); label "gpu". Without two GPUs every test that needs them
# reports itself skipped, saying why; the few that check what happens
# without enough GPUs run anywhere.
#
# In the host configuration, typemesh-test-gpu-stand-in is the same
# nccl_test.cpp compiled by the host compiler and linked against
# cuda_stand_in.cpp, a CPU stand-in for the CUDA runtime and NCCL, instead
# of the real libraries: the communicator's own logic runs on every machine
# whose CUDA toolkit has nccl.h. Its tests are stand_in.<name>, label
# "runtime".
include_guard(GLOBAL)

if(TYPEMESH_CUDA)
  if(TARGET typemesh::nccl)
    add_executable(typemesh-test-nccl ${CMAKE_CURRENT_LIST_DIR}/nccl_test.cpp)
    target_link_libraries(typemesh-test-nccl PRIVATE typemesh::nccl GTest::gtest GTest::gtest_main)
    gtest_discover_tests(typemesh-test-nccl DISCOVERY_TIMEOUT 60 PROPERTIES LABELS gpu TIMEOUT 300)
    add_dependencies(typemesh-test-executables typemesh-test-nccl)
    add_dependencies(typemesh-cuda-ci typemesh-test-nccl)
  else()
    add_test(NAME gpu.nccl_unavailable
      COMMAND sh -c "echo 'NCCL tests: no typemesh::nccl target (NCCL was not found): skipped'; exit 77")
    set_tests_properties(gpu.nccl_unavailable PROPERTIES SKIP_RETURN_CODE 77 LABELS gpu)
  endif()
elseif(CUDAToolkit_FOUND AND TYPEMESH_NCCL_INCLUDE_DIR)
  add_executable(typemesh-test-gpu-stand-in ${CMAKE_CURRENT_LIST_DIR}/nccl_test.cpp
    ${CMAKE_CURRENT_LIST_DIR}/cuda_stand_in.cpp)
  target_include_directories(typemesh-test-gpu-stand-in SYSTEM PRIVATE ${CUDAToolkit_INCLUDE_DIRS}
    ${TYPEMESH_NCCL_INCLUDE_DIR})
  target_link_libraries(typemesh-test-gpu-stand-in PRIVATE typemesh::typemesh GTest::gtest GTest::gtest_main)
  target_compile_options(typemesh-test-gpu-stand-in PRIVATE ${TYPEMESH_WARNINGS})
  gtest_discover_tests(typemesh-test-gpu-stand-in TEST_PREFIX stand_in. DISCOVERY_TIMEOUT 60
    PROPERTIES LABELS runtime TIMEOUT 300)
endif()

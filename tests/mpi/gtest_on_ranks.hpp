// GoogleTest under mpiexec: every rank runs every test; rank 0 prints the
// report, the other ranks print only their failures (prefixed with the rank),
// and every rank exits non-zero when any rank failed.
#pragma once

#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>

namespace tt {

class failures_only : public testing::EmptyTestEventListener {
 public:
  explicit failures_only(int rank) : rank_(rank) {}
  void OnTestPartResult(const testing::TestPartResult& r) override {
    if (r.failed()) {
      std::printf("[rank %d] %s:%d: Failure\n%s\n", rank_, r.file_name() ? r.file_name() : "?", r.line_number(),
                  r.message());
      std::fflush(stdout);
    }
  }

 private:
  int rank_;
};

// Call after MPI_Init, before MPI_Finalize.
inline int run_tests_on_every_rank(int& argc, char** argv) {
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  testing::InitGoogleTest(&argc, argv);
  if (rank != 0) {
    auto& listeners = testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new failures_only(rank));
  }
  int failed = RUN_ALL_TESTS() != 0;
  MPI_Allreduce(MPI_IN_PLACE, &failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (rank == 0) std::printf("mpi tests on %d ranks: %s\n", size, failed ? "FAILED" : "passed");
  return failed;
}

}  // namespace tt

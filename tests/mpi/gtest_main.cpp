// main() of the MPI test programs built from ordinary test sources (see
// tests/mpi/register.cmake): the same tests, one device per rank.
#include "gtest_on_ranks.hpp"

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  const int code = tt::run_tests_on_every_rank(argc, argv);
  MPI_Finalize();
  return code;
}

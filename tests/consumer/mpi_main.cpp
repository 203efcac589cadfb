// Downstream smoke test of typemesh::mpi: the target alone must bring MPI,
// Boost.MPI and TYPEMESH_WITH_MPI. Run plainly it uses host threads; under
// mpiexec -np 2, one device per rank. Either way the sums must be 3.
#if !defined(TYPEMESH_WITH_MPI)
#error "typemesh::mpi did not define TYPEMESH_WITH_MPI"
#endif

#include <typemesh/typemesh.hpp>

#include <cstdio>
#include <vector>

int main() {
  const auto sums = typemesh::launch(2, [](typemesh::device& dev) {
    std::vector<float> v{static_cast<float>(dev.id() + 1)};
    dev.allreduce<float>(typemesh::group{{0, 1}, "pair"}, v);
    return v[0];
  });
  if (sums != std::vector<float>{3.0f, 3.0f}) {
    std::puts("allreduce over typemesh::mpi gave a wrong sum");
    return 1;
  }
  std::puts("typemesh::mpi: allreduce over 2 devices gave 3 on each");
  return 0;
}

// nvcc compile test: the core headers, the kernels and the tensor type
// compile for both spaces, and a few templates instantiate, including a
// box-copy kernel and a parallel_for that nvcc compiles for the GPU, and a
// tensor on a cuda_mesh whose local elements are a device_span. Compiled
// only (-c); nothing runs, so no GPU is needed. Registered as the ctest test
// cuda.compile_core.
#include <typemesh/core.hpp>
#include <typemesh/backend/kernels.hpp>
#include <typemesh/tensor/tensor.hpp>

#include <array>
#include <cstdint>
#include <optional>

#if !defined(__CUDACC__)
#error "core_compile.cu is meant for nvcc"
#endif
#if !defined(TYPEMESH_CUDA)
#error "core_compile.cu must build with the CUDA space (TYPEMESH_CUDA)"
#endif

namespace {

struct batch : typemesh::dim<"batch"> {};
struct k : typemesh::dim<"k"> {};
struct axis0 : typemesh::axis<"axis0"> {};
struct axis1 : typemesh::axis<"axis1"> {};

using grid = typemesh::mesh<"grid", axis0, axis1>;
using gpus = typemesh::cuda_mesh<"gpus", axis0, axis1>;
using act_layout = typemesh::layout<batch(axis0), k(axis1)>;
using act_shape = typemesh::shape<batch, k>;

// The layout algebra, at compile time.
static_assert(act_layout::size == 2);
static_assert(act_layout::splits<batch> && act_layout::splits<k>);
static_assert(act_layout::uses<axis1>);
static_assert(std::is_same_v<act_layout::axis_of<k>, axis1>);
static_assert(std::is_same_v<act_layout::dim_on<axis0>, batch>);
static_assert(std::is_same_v<act_layout::without<k>, typemesh::layout<batch(axis0)>>);
static_assert(act_shape::index_of<k> == 1 && grid::index_of<axis1> == 1);

using geometry = typemesh::placement<act_shape, act_layout, grid>;
static_assert(geometry::axis_index == std::array<int, 2>{0, 1});

}  // namespace

// Host code: slice geometry, and a box copy whose row kernel runs on the GPU.
std::optional<typemesh::box<2>> slice_of_device(int device) {
  grid g({2, 4});
  return typemesh::slice_of<act_layout>(act_shape{64, 128}, g, device);
}

void copy_corner(const float* src, float* dst) {
  typemesh::backend::region<2> from{{64, 128}, {32, 0}};
  typemesh::backend::region<2> to{{32, 32}, {0, 0}};
  typemesh::backend::copy_box(typemesh::cuda_space{}, src, from, dst, to, std::array<std::int64_t, 2>{32, 32});
}

// A kernel body written once, compiled for the host and the GPU.
void scale_on_both(float* host, float* device, std::int64_t n) {
  auto twice = [] TYPEMESH_KERNEL(float v) { return 2 * v; };
  typemesh::backend::map(typemesh::host_space{}, host, host, n, twice);
  typemesh::backend::map(typemesh::cuda_space{}, device, device, n, twice);
}

// The distributed tensor type and its device storage.
using act = typemesh::tensor<float, act_shape, act_layout, grid>;
static_assert(act::rank == 2);
using gpu_act = typemesh::tensor<float, act_shape, act_layout, gpus>;
static_assert(std::is_same_v<gpu_act::space_type, typemesh::cuda_space>);
// Host code cannot index GPU memory: its local view has no operator[].
template <class V>
concept indexable = requires(V v) { v[0]; };
static_assert(indexable<decltype(std::declval<act&>().local())>);
static_assert(!indexable<decltype(std::declval<gpu_act&>().local())>);

float gpu_sum(const gpu_act& x) { return typemesh::backend::sum(x.space(), x.data(), x.local_size()); }

std::int64_t local_elements(const act& x) {
  return static_cast<std::int64_t>(x.local().size());
}

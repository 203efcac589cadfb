// nvcc compile test: the core headers, the Thrust kernels and the tensor type
// compile for the CUDA Thrust system (THRUST_DEVICE_SYSTEM left to nvcc's
// default, CUDA), and a few templates instantiate, including a box-copy kernel
// that nvcc compiles for the device. Compiled only (-c); nothing runs, so no
// GPU is needed. Registered as the ctest test cuda.compile_core.
#include <typemesh/core.hpp>
#include <typemesh/backend/kernels.hpp>
#include <typemesh/tensor/tensor.hpp>

#include <array>
#include <cstdint>
#include <optional>

#if !defined(__CUDACC__)
#error "core_compile.cu is meant for nvcc"
#endif
#if THRUST_DEVICE_SYSTEM != THRUST_DEVICE_SYSTEM_CUDA
#error "core_compile.cu must build for Thrust's CUDA device system"
#endif

namespace {

struct batch : typemesh::dim<"batch"> {};
struct k : typemesh::dim<"k"> {};
struct axis0 : typemesh::axis<"axis0"> {};
struct axis1 : typemesh::axis<"axis1"> {};

using grid = typemesh::mesh<"grid", axis0, axis1>;
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
  typemesh::backend::copy_box<float, 2>(src, from, dst, to, {32, 32});
}

// The distributed tensor type and its device storage.
using act = typemesh::tensor<float, act_shape, act_layout, grid>;
static_assert(act::rank == 2);

std::int64_t local_elements(const act& x) {
  return static_cast<std::int64_t>(x.storage().size());
}

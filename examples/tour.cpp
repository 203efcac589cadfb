// A tour of typemesh on 8 simulated devices: the four meshes of the PaSE
// RNNLM benchmark, a tensor whose layout is part of its type, collectives
// that change that type, and the bytes each device moved.
//
//   cmake -S . -B build && cmake --build build --target typemesh-tour && build/examples/typemesh-tour

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <numeric>
#include <string>
#include <type_traits>
#include <vector>

#include <typemesh/typemesh.hpp>

// Tensor dims and mesh axes are empty types. A struct, not an alias, so that
// compiler messages say `batch` rather than `typemesh::dim<"batch">`.
struct batch : typemesh::dim<"batch"> {};
struct seq : typemesh::dim<"seq"> {};  // time steps of the input sequence
struct k : typemesh::dim<"k"> {};      // LSTM units

struct axis0 : typemesh::axis<"axis0"> {};
struct axis1 : typemesh::axis<"axis1"> {};
struct axis2 : typemesh::axis<"axis2"> {};

// The RNNLM's meshes share their axes, yet each is its own type: a tensor's
// type records its mesh, and combining tensors of two meshes does not compile.
using embed_mesh = typemesh::mesh<"embed", axis0, axis1, axis2>;
using lstm0_mesh = typemesh::mesh<"lstm0", axis0, axis1, axis2>;
using lstm1_mesh = typemesh::mesh<"lstm1", axis0, axis1, axis2>;
using proj_mesh = typemesh::mesh<"proj", axis0, axis1, axis2>;

// The design's Layout<batch→axis0, k→axis2>. A dim it does not name (seq) is
// whole on every device; an axis it does not use (axis1) holds replicas.
using design_layout = typemesh::layout<batch(axis0), k(axis2)>;

using activations = typemesh::shape<batch, seq, k>;

// What one device reports back to main.
struct report {
  std::string x_k, y_seq, h_batch;  // the index ranges it holds
  int proj_axis1 = 0;               // its coordinate on proj's axis1
  std::uint64_t alltoall_sent = 0, allgather_received = 0;
  bool exported_equal = false;
};

// "[begin, end)" of dim D in this device's slice of t.
template <class D, class Tensor>
std::string held(const Tensor& t) {
  if (!t.holds_data()) return "nothing";
  const auto begin = t.template slice_begin<D>();
  return "[" + std::to_string(begin) + ", " + std::to_string(begin + t.template local_extent<D>()) + ")";
}

int main() {
  constexpr int device_count = 8;

  // As the seed's CreateMeshes for 8 GPUs: all devices, the first half, the
  // second half, and the halves swapped. Coordinates are row-major over the
  // axes, so proj puts device 4 at axis1 = 0.
  namespace devices = typemesh::devices;
  const auto first = devices::first_half(device_count), second = devices::second_half(device_count);
  const embed_mesh embed({1, 1, 8}, devices::all(device_count));
  const lstm0_mesh lstm0({4, 1, 1}, first);
  const lstm1_mesh lstm1({4, 1, 1}, second);
  const proj_mesh proj({1, 8, 1}, devices::concat(second, first));
  for (const auto& line : {embed.describe(), lstm0.describe(), lstm1.describe(), proj.describe()})
    std::printf("%s\n", line.c_str());

  // A whole tensor in host memory, which every device holds, as a program's
  // inputs are.
  const activations extents{4, 8, 16};
  typemesh::host_tensor<float, activations> whole(extents);
  std::iota(whole.values().begin(), whole.values().end(), 0.0f);

  auto reports = typemesh::launch(device_count, [&](typemesh::device& dev) {
    // Import only copies: each device keeps its slice, k cut 8 ways.
    auto x = typemesh::import_tensor<design_layout>(embed, whole);

    // From split by units to split by time step on the same axis: an
    // alltoall. The library works out the new layout at compile time.
    auto y = typemesh::alltoall<k, seq>(x);
    static_assert(std::is_same_v<decltype(y)::layout_type, typemesh::layout<batch(axis0), seq(axis2)>>);

    // Gathering the time steps is an allgather along axis2. Since embed's
    // axis0 has one device, every device then holds the whole tensor.
    auto z = typemesh::allconcat<seq>(y);
    static_assert(std::is_same_v<decltype(z)::layout_type, typemesh::layout<batch(axis0)>>);

    // The same layout on the first half, as the seed's LSTM state h: devices
    // 4..7 are outside lstm0, hold nothing, and skip every operation on h.
    auto h = typemesh::import_tensor<design_layout>(lstm0, whole);

    report r{held<k>(x), held<seq>(y), held<batch>(h)};
    r.proj_axis1 = proj.coordinate<axis1>(dev.id());
    r.alltoall_sent = dev.traffic()[typemesh::op_kind::alltoall].bytes_sent;
    r.allgather_received = dev.traffic()[typemesh::op_kind::allgather].bytes_received;

    // Export gathers along the axes that split the tensor, and nothing else:
    // z costs nothing more, and outside lstm0 the export of h is empty.
    auto h_back = typemesh::export_tensor(h);
    r.exported_equal = typemesh::export_tensor(x) == whole && typemesh::export_tensor(z) == whole &&
                       (h.holds_data() ? h_back == whole : h_back.empty());
    return r;
  });

  std::printf("\nx %s on embed, y = alltoall<k, seq>(x), z = allconcat<seq>(y), h = x's layout on lstm0\n",
              extents.describe().c_str());
  std::printf("device  proj axis1  x holds k  y holds seq  h holds batch  alltoall sent  allgather received  exports\n");
  bool all_equal = true;
  for (int d = 0; d < device_count; ++d) {
    const report& r = reports[d];
    all_equal = all_equal && r.exported_equal;
    std::printf("%6d  %10d  %9s  %11s  %13s  %11llu B  %16llu B  %s\n", d, r.proj_axis1, r.x_k.c_str(),
                r.y_seq.c_str(), r.h_batch.c_str(), static_cast<unsigned long long>(r.alltoall_sent),
                static_cast<unsigned long long>(r.allgather_received), r.exported_equal ? "equal" : "DIFFERENT");
  }
  return all_equal ? 0 : 1;
}

// Layout mistakes are compile errors. In y, k is already whole, so
//
//   auto bad = typemesh::allconcat<k>(y);
//
// fails in the instantiation of typemesh::diagnostic::dim_not_split<k,
// typemesh::layout<batch(axis0), seq(axis2)>> with
//
//   static assertion failed: typemesh: the collective needs a dim that is split
//   over a mesh axis, but this dim is whole in the layout; the dim is the first
//   argument above
//
// and `x + h` (two meshes) with "typemesh: tensors on two different meshes cannot
// be combined; move one onto the other's mesh with a mesh replacement first".

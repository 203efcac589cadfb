// From a plan to a layer: search AlexNet's strategy for 8 devices, take the
// configuration the plan chose for the fc8 layer, turn it into a typemesh mesh
// and layout, and build fc8's weight on the simulated devices.
//
//   cmake -S . -B build && cmake --build build --target typemesh-plan-layer && build/examples/typemesh-plan-layer
//
// fc6 and fc7 get configurations of the same form (fc6 the same one); fc8 is
// taken because its weight (4096 × 1024 floats, 16 MiB) is small enough to
// gather on every device in a blink.

#include <cstdint>
#include <cstdio>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include <typemesh/plan/networks.hpp>
#include <typemesh/plan/parse.hpp>
#include <typemesh/plan/report.hpp>
#include <typemesh/plan/search.hpp>
#include <typemesh/typemesh.hpp>

namespace tp = typemesh::plan;

// An fc layer's iteration space is (b, n, k): batch, units, input features.
// Its weight is k × n. The plan names the dims; the types say the same.
struct features : typemesh::dim<"k"> {};
struct units : typemesh::dim<"n"> {};

// One mesh axis per iteration dim of the layer, in the layer's dim order: the
// split count of a dim is the size of its axis.
struct axis0 : typemesh::axis<"axis0"> {};  // b
struct axis1 : typemesh::axis<"axis1"> {};  // n
struct axis2 : typemesh::axis<"axis2"> {};  // k
using fc8_mesh = typemesh::mesh<"fc8", axis0, axis1, axis2>;

// The weight follows the layer's n and k; it is whole along the batch axis,
// whose devices (if b is split) hold replicas.
using weight_shape = typemesh::shape<features, units>;
using weight_layout = typemesh::layout<features(axis2), units(axis1)>;

template <class D, class Tensor>
std::string held(const Tensor& t) {
  const auto begin = t.template slice_begin<D>();
  return "[" + std::to_string(begin) + ", " + std::to_string(begin + t.template local_extent<D>()) + ")";
}

int main() {
  constexpr int devices = 8;
  constexpr std::int64_t batch = 128;

  // 1. The search, in process, exactly as `typemesh-plan -g alexnet -p 8`.
  const tp::graph net = tp::alexnet(batch);
  const tp::problem problem = tp::build_problem(net, devices);
  const tp::search_result best = tp::find_best_strategy(problem);

  // 2. The plan as the stable artefact a program would read from a file
  //    (typemesh-plan --json > alexnet.json; tp::read_plan_file("alexnet.json")).
  std::ostringstream json;
  tp::write_json(json, net, problem, best, devices, batch, tp::machine{});
  const tp::plan_file plan = tp::read_plan_text(json.str(), "alexnet.json");
  const tp::plan_layer& fc8 = plan.layer("fc8");
  std::printf("alexnet on %d devices: total cost %.2f; fc8 splits", devices, plan.total_cost);
  for (const auto& d : fc8.dims) std::printf(" %s=%lld/%lld", d.name.c_str(), static_cast<long long>(d.split),
                                             static_cast<long long>(d.size));
  std::printf(" (%lld devices)\n", static_cast<long long>(fc8.devices()));

  // 3. The mesh: the split counts are the axis sizes. A configuration may use
  //    fewer devices than there are; then it takes the first ones.
  const fc8_mesh mesh({static_cast<int>(fc8.split("b")), static_cast<int>(fc8.split("n")),
                       static_cast<int>(fc8.split("k"))});
  std::printf("%s\n", mesh.describe().c_str());

  // 4. The weight, whole in host memory, then imported: each device keeps the
  //    block its coordinates select. Export gathers it back.
  const weight_shape extents{fc8.size("k"), fc8.size("n")};
  typemesh::host_tensor<float, weight_shape> whole(extents);
  std::iota(whole.values().begin(), whole.values().end(), 0.0f);

  struct block {
    bool in_mesh = false;
    int b = 0, n = 0, k = 0;  // mesh coordinates
    std::string features, units;
    bool exported_equal = false;
  };
  const auto blocks = typemesh::launch(devices, [&](typemesh::device& dev) {
    block r;
    auto w = typemesh::import_tensor<weight_layout>(mesh, whole);
    r.in_mesh = w.holds_data();
    if (r.in_mesh) {
      r.b = mesh.coordinate<axis0>(dev.id());
      r.n = mesh.coordinate<axis1>(dev.id());
      r.k = mesh.coordinate<axis2>(dev.id());
      r.features = held<features>(w);
      r.units = held<units>(w);
    }
    const auto back = typemesh::export_tensor(w);
    r.exported_equal = r.in_mesh ? back == whole : back.empty();
    return r;
  });

  std::printf("\nfc8 weight %s (k × n) with layout k→axis2, n→axis1\n", extents.describe().c_str());
  std::printf("device  (b, n, k)  holds k          holds n          export\n");
  bool ok = true;
  for (int d = 0; d < devices; ++d) {
    const block& r = blocks[d];
    ok = ok && r.exported_equal;
    if (!r.in_mesh) {
      std::printf("%6d  outside the mesh                              %s\n", d, r.exported_equal ? "empty" : "WRONG");
      continue;
    }
    std::printf("%6d  (%d, %d, %d)  %-15s  %-15s  %s\n", d, r.b, r.n, r.k, r.features.c_str(), r.units.c_str(),
                r.exported_equal ? "equal" : "DIFFERENT");
  }
  return ok ? 0 : 1;
}

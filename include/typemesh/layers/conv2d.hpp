// 2-d convolution, as in the PaSE AlexNet and Inception-v3 benchmarks. Dims
// are found by role, never by position:
//
//   struct batch : dim<"batch"> {};  struct h : dim<"h"> {};  struct w : dim<"w"> {};
//   struct c : dim<"c"> {};          struct k : dim<"k"> {};
//   struct fh : dim<"fh"> {};        struct fw : dim<"fw"> {};
//
//   // x: shape<batch, h, w, c>, filter: shape<fh, fw, c, k>  ->  shape<batch, h, w, k>
//   auto y = typemesh::conv2d<h, w, fh, fw>(x, filter, {.strides = {2, 2}, .padding = typemesh::padding::same});
//   // the same dims in any order: x shape<batch, c, h, w>, filter shape<k, c, fh, fw> -> shape<batch, k, h, w>
//   // naming the output's spatial dims (shape<batch, oh, ow, k>):
//   auto z = typemesh::conv2d<h, w, fh, fw, oh, ow>(x, filter, {.padding = typemesh::padding::valid});
//
// The roles:
//   - the image's height and width: the first two template arguments;
//   - the filter's height and width (its window): the next two, dims of
//     the filter's own (a 3x3 window is not the image's height);
//   - the in-channels: the one dim that image and filter share (found, as
//     dense finds its reduced dims);
//   - the out-channels: the filter's one remaining dim;
//   - every other dim of the image, any number of them in any position, is
//     batch-like: each value of it is an image of its own, passed through.
// The output has the image's dims in the image's order, the in-channels
// replaced by the out-channels. By default it keeps the image's spatial tags
// with the new sizes: a dim names a role (height), and its size is a
// property of each tensor, so a stack of layers needs no new tag per layer.
// The fifth and sixth template arguments rename them, for a program that
// wants to tell the sizes apart by type.
//
// Options (conv2d_options, Mesh-TensorFlow's defaults): strides {1, 1},
// padding SAME. Padding and output sizes are TensorFlow's: VALID has no
// padding and out = floor((in - f) / s) + 1; SAME has out = ceil(in / s) and
// pads max((out - 1) * s + f - in, 0) zeros, the smaller half before and the
// larger half after.
//
// Layouts follow the rules of every contraction (ops/rules.hpp), applied by
// the same functions einsum uses: the batch-like dims, in-channels and
// out-channels may each be split over a mesh axis; the in-channel dim is
// summed, so where it is split each device computes a partial sum and the
// partial sums are allreduced over its axis. Backward, the same rules give
// the image's gradient an allreduce over out-channels' axis and the filter's
// gradient an allreduce over the batch-like dims' axes. The spatial dims (the
// image's and the filter's) must be whole: splitting them would need halo
// exchanges, which typemesh does not do.
//
// The local kernel (backend/conv.hpp, in the mesh's space) is im2col + one
// GEMM per chunk of images; a 1x1 convolution with stride 1 skips im2col. On
// the host, float convolutions with out-channels a multiple of 8 run direct
// kernels instead (backend/host/direct_conv.hpp), on CPUs with AVX2 or
// AVX-512. The kernel reads this device's slices in the order
// [batch-like..., height, width, in-channels] (NHWC) and [filter height,
// filter width, in-channels, out-channels] (HWIO) and writes [batch-like...,
// height, width, out-channels]. A tensor whose dims come in another order is
// transposed locally into that order (and the results back); one that
// already is in it is used in place. No transpose communicates: every dim
// keeps its axis. Backward: the image's gradient is a GEMM then col2im, the
// filter's a GEMM over the recomputed columns (on the direct path, the
// filter's gradient is a direct kernel and, at stride 1, the image's a
// forward one). col2im runs one index per image pixel, which gathers its taps
// in the order a sequential scatter over the columns would add them, so it
// gives that loop's bits on any number of threads.
//
// This file also holds what pooling (layers/pooling.hpp) shares with
// convolution: padding, strides, the window arithmetic, the local
// transposes and the checks on the image's dims.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "typemesh/autodiff/tape.hpp"
#include "typemesh/backend/blas.hpp"
#include "typemesh/backend/conv.hpp"
#include "typemesh/core/diagnostics.hpp"
#include "typemesh/core/error.hpp"
#include "typemesh/core/shape_algebra.hpp"
#include "typemesh/ops/binary.hpp"
#include "typemesh/ops/reduce.hpp"
#include "typemesh/ops/rules.hpp"
#include "typemesh/tensor/tensor.hpp"

namespace typemesh {

// How a sliding window treats the image's border (TensorFlow's meaning).
enum class padding {
  valid,  // windows lie wholly inside the image
  same,   // out = ceil(in / stride), zero padding split smaller-half-first
};

// Steps between windows along the image's height and width.
struct strides {
  std::int64_t h = 1;
  std::int64_t w = 1;
};

// conv2d's options, with Mesh-TensorFlow's defaults:
//   conv2d<h, w, fh, fw>(x, filter, {.strides = {2, 2}, .padding = typemesh::padding::valid})
struct conv2d_options {
  typemesh::strides strides{};
  typemesh::padding padding = typemesh::padding::same;
};

namespace conv_detail {
// The default of a role's template argument: a call that leaves a role
// unnamed gets a diagnostic, not a page of overload candidates.
struct not_named {};
}  // namespace conv_detail

namespace diagnostic {
TYPEMESH_DIAGNOSTIC(conv2d_roles_not_named, (class Height, class Width, class FilterHeight, class FilterWidth),
                    (Height, Width, FilterHeight, FilterWidth),
                    "conv2d names its spatial dims as template arguments: conv2d<height, width, "
                    "filter_height, filter_width>(image, filter, options), e.g. conv2d<h, w, fh, fw>(x, filter, "
                    "{.strides = {2, 2}}); the dims given are the arguments above (not_named where one is missing)");
TYPEMESH_DIAGNOSTIC(pool2d_roles_not_named, (class Height, class Width), (Height, Width),
                    "pooling names the image's spatial dims as template arguments: max_pool2d<height, "
                    "width>(image, options), e.g. max_pool2d<h, w>(x, {.window = {2, 2}}); the dims given are the "
                    "arguments above (not_named where one is missing)");
TYPEMESH_DIAGNOSTIC(dim_named_for_two_roles, (class Dim, class Roles), (Dim, Roles),
                    "convolution and pooling need a different dim for each spatial role (image height "
                    "and width, filter height and width, output height and width), but this dim is named for two; "
                    "the dim and the dims named are the arguments above");
TYPEMESH_DIAGNOSTIC(spatial_dim_not_in_image, (class Dim, class ImageShape), (Dim, ImageShape),
                    "convolution and pooling slide along the spatial dims named as template arguments, "
                    "but the image has no such dim; the dim and the image's shape are the arguments above");
TYPEMESH_DIAGNOSTIC(window_dim_not_in_filter, (class Dim, class FilterShape), (Dim, FilterShape),
                    "conv2d<h, w, fh, fw> names the filter's window dims (its height and width) as its "
                    "third and fourth template arguments, but the filter has no such dim; the dim and the filter's "
                    "shape are the arguments above");
TYPEMESH_DIAGNOSTIC(filter_dim_is_image_dim, (class Dim, class ImageShape), (Dim, ImageShape),
                    "a filter's height and width need dims of their own, not dims of the image; the dim and "
                    "the image's shape are the arguments above");
TYPEMESH_DIAGNOSTIC(spatial_dim_in_filter, (class Dim, class FilterShape), (Dim, FilterShape),
                    "the filter has one of the image's spatial dims; its window needs dims of its own "
                    "(conv2d<h, w, fh, fw>), and image and filter share only the in-channel dim; the dim and the "
                    "filter's shape are the arguments above");
TYPEMESH_DIAGNOSTIC(in_channels_not_one_shared_dim, (class SharedDims, class ImageShape, class FilterShape),
                    (SharedDims, ImageShape, FilterShape),
                    "conv2d's in-channels are the one dim that the image and the filter share, but these "
                    "share none or several; the shared dims, the image's shape and the filter's shape are the "
                    "arguments above");
TYPEMESH_DIAGNOSTIC(filter_needs_one_out_channel_dim, (class OtherDims, class FilterShape), (OtherDims, FilterShape),
                    "a conv2d filter has its two window dims, the in-channel dim it shares with the image "
                    "and exactly one more: the out-channels; the filter's dims besides window and in-channels, and "
                    "the filter's shape, are the arguments above");
TYPEMESH_DIAGNOSTIC(spatial_dim_split, (class Dim, class Layout), (Dim, Layout),
                    "convolution and pooling need the spatial dims (image and filter height and width) "
                    "whole on every device; split batch or channels instead, or relayout this dim whole first; the dim "
                    "is the first argument above");
TYPEMESH_DIAGNOSTIC(output_spatial_dim_taken, (class Dim, class Shapes), (Dim, Shapes),
                    "an output spatial dim must be the image's own height or width dim, or a dim that no "
                    "input has; the dim and the input shapes are the arguments above");
}  // namespace diagnostic

namespace conv_detail {

// --- Roles ---------------------------------------------------------------------

// The first of Ds for which Bad<D>::value holds, else void.
template <template <class> class Bad, class... Ds>
struct first_where {
  using type = void;
};
template <template <class> class Bad, class D, class... Rest>
struct first_where<Bad, D, Rest...> {
  using type = std::conditional_t<Bad<D>::value, D, typename first_where<Bad, Rest...>::type>;
};

template <class S>
struct dims_in {
  template <class D>
  using absent = std::bool_constant<!S::template has<D>>;
  template <class D>
  using present = std::bool_constant<S::template has<D>>;
};
template <class L>
struct layout_of {
  template <class D>
  using splits = std::bool_constant<L::template splits<D>>;
};

// The first of Ds named again later in Ds, else void.
template <class... Ds>
struct first_repeated {
  using type = void;
};
template <class D, class... Rest>
struct first_repeated<D, Rest...> {
  using type = std::conditional_t<detail::contains<D, Rest...>, D, typename first_repeated<Rest...>::type>;
};

// Each check below fires for the first offending dim only: one error per
// mistake.
template <class... Ds>
consteval bool distinct_roles() {
  using D = typename first_repeated<Ds...>::type;
  return diagnostic::dim_named_for_two_roles<D, type_list<Ds...>, !std::is_void_v<D>>::passed;
}
template <class S, class... Ds>
consteval bool spatial_in_image() {
  using D = typename first_where<dims_in<S>::template absent, Ds...>::type;
  return diagnostic::spatial_dim_not_in_image<D, S, !std::is_void_v<D>>::passed;
}
template <class L, class... Ds>
consteval bool whole_in() {
  using D = typename first_where<layout_of<L>::template splits, Ds...>::type;
  return diagnostic::spatial_dim_split<D, L, !std::is_void_v<D>>::passed;
}

// An output spatial dim is the image's own (Own) or a dim that no input has.
template <class Out, class Own, class... Inputs>
consteval bool free_output_name() {
  constexpr bool taken = !std::is_same_v<Out, Own> && (Inputs::template has<Out> || ...);
  return diagnostic::output_spatial_dim_taken<Out, type_list<Inputs...>, taken>::passed;
}

// The image has the spatial dims, named once each, whole on every device;
// the output's spatial dims clash with no input dim. Inputs lists the input
// shapes.
template <class SX, class LX, class H, class W, class OutH, class OutW, class... Inputs>
consteval bool check_image() {
  if constexpr (!distinct_roles<H, W>()) {
    return false;
  } else if constexpr (!spatial_in_image<SX, H, W>()) {
    return false;
  } else if constexpr (!(free_output_name<OutH, H, Inputs...>())) {
    return false;
  } else if constexpr (!(free_output_name<OutW, W, Inputs...>())) {
    return false;
  } else if constexpr (!distinct_roles<OutH, OutW>()) {
    return false;
  } else {
    return whole_in<LX, H, W>();
  }
}

// The dim of a one-dim shape, else void.
template <class S>
struct only_dim {
  using type = void;
};
template <class D>
struct only_dim<shape<D>> {
  using type = D;
};

// conv2d's roles, once the names are checked: in-channels C (the dim image
// and filter share), out-channels K (the filter's remaining dim).
template <class SX, class SF, class FH, class FW>
struct conv_roles {
  using shared = shape_common<SX, SF>;
  using C = typename only_dim<shared>::type;
  using others = shape_without<SF, FH, FW, C>;
  using K = typename only_dim<others>::type;
};

template <class SX, class LX, class MX, class SF, class LF, class MF, class H, class W, class FH, class FW, class OutH,
          class OutW>
consteval bool check_conv() {
  using R = conv_roles<SX, SF, FH, FW>;
  using filter_dim_in_image = typename first_where<dims_in<SX>::template present, FH, FW>::type;
  using spatial_dim_in_filter = typename first_where<dims_in<SF>::template present, H, W>::type;
  using window_dim_absent = typename first_where<dims_in<SF>::template absent, FH, FW>::type;
  constexpr bool unnamed = std::is_same_v<H, not_named> || std::is_same_v<W, not_named> ||
                           std::is_same_v<FH, not_named> || std::is_same_v<FW, not_named>;
  if constexpr (!diagnostic::conv2d_roles_not_named<H, W, FH, FW, unnamed>::passed) {
    return false;
  } else if constexpr (!ops_detail::same_mesh<MX, MF>()) {
    return false;
  } else if constexpr (!distinct_roles<H, W, FH, FW>()) {
    return false;
  } else if constexpr (!spatial_in_image<SX, H, W>()) {
    return false;
  } else if constexpr (!diagnostic::spatial_dim_in_filter<spatial_dim_in_filter, SF,
                                                          !std::is_void_v<spatial_dim_in_filter>>::passed) {
    return false;
  } else if constexpr (!diagnostic::window_dim_not_in_filter<window_dim_absent, SF,
                                                             !std::is_void_v<window_dim_absent>>::passed) {
    return false;
  } else if constexpr (!diagnostic::filter_dim_is_image_dim<filter_dim_in_image, SX,
                                                            !std::is_void_v<filter_dim_in_image>>::passed) {
    return false;
  } else if constexpr (!diagnostic::in_channels_not_one_shared_dim<typename R::shared, SX, SF,
                                                                   R::shared::rank != 1>::passed) {
    return false;
  } else if constexpr (!diagnostic::filter_needs_one_out_channel_dim<typename R::others, SF,
                                                                     R::others::rank != 1>::passed) {
    return false;
  } else if constexpr (!check_image<SX, LX, H, W, OutH, OutW, SX, SF>()) {
    return false;
  } else if constexpr (!whole_in<LF, FH, FW>()) {
    return false;
  } else {
    return ops_detail::compatible<SX, LX, SF, LF>();
  }
}

// --- Local order ---------------------------------------------------------------

// t with its dims in the order of Ordered (the same dims): t itself when
// they already are (no copy), else a local transpose of this device's slice.
// No communication: every dim stays on its axis.
template <class Ordered, class T, class S, class L, class M>
decltype(auto) in_order(const tensor<T, S, L, M>& t) {
  if constexpr (std::is_same_v<S, Ordered>) {
    return (t);
  } else {
    return ops_detail::broadcast_to<Ordered, canonical<Ordered, L>>(t, shape_from<Ordered>(t.shape()));
  }
}

// What in_order gave, kept for a gradient: a copy of the caller's tensor, or
// the transposed one itself.
template <class Tensor>
auto kept(Tensor&& t) {
  if constexpr (std::is_const_v<std::remove_reference_t<Tensor>>) return t.detached();
  else return std::remove_cvref_t<Tensor>(std::move(t));
}

// Whether a new tensor starts as zeros (for kernels that add into it) or
// uninitialised (for kernels that write every element).
enum class start { zeros, unwritten };

// A new tensor of type Out, which `fill` writes with its dims in the order
// of Ordered (the same dims): written in place when Out's order is Ordered,
// else through a tensor in that order and a local transpose.
template <class Out, class Ordered, start Start = start::zeros, class Fill>
Out filled_in_order(const typename Out::mesh_type& m, const typename Out::shape_type& s, Fill&& fill) {
  using S = typename Out::shape_type;
  using L = typename Out::layout_type;
  auto make = [&]<class Tensor>(const typename Tensor::shape_type& shape) {
    if constexpr (Start == start::zeros) return Tensor(m, shape);
    else return Tensor(m, shape, uninitialized);
  };
  if constexpr (std::is_same_v<S, Ordered>) {
    Out out = make.template operator()<Out>(s);
    fill(out);
    return out;
  } else {
    using ordered_t = tensor<typename Out::value_type, Ordered, canonical<Ordered, L>, typename Out::mesh_type>;
    ordered_t t = make.template operator()<ordered_t>(shape_from<Ordered>(s));
    fill(t);
    return ops_detail::broadcast_to<S, L>(t, s);
  }
}

// The product of t's local extents along the dims of S (1 when S has none).
template <class S, class Tensor>
std::int64_t local_product(const Tensor& t) {
  return [&]<class... Ds>(type_list<Ds...>) {
    return (std::int64_t{1} * ... * t.template local_extent<Ds>());
  }(dims_of<S>{});
}

// --- Window arithmetic ---------------------------------------------------------

// One spatial axis of a sliding window (its arithmetic is the kernels').
using window_axis = backend::window_axis;

// TensorFlow's output size and padding for one axis. `in_dim` names the
// image's dim, `window_side` says what slides ("filter dim fh of size 3"),
// `context` describes the operands for messages.
inline window_axis slide(std::string_view op, std::string_view in_dim, std::int64_t in, const std::string& window_side,
                         std::int64_t size, std::int64_t stride, padding p, const std::string& context) {
  if (stride < 1) {
    throw shape_error(detail::cat(op, ": the stride along dim ", in_dim, " is ", stride, "; it must be at least 1",
                                  context));
  }
  if (size < 1) {
    throw shape_error(detail::cat(op, ": ", window_side, " is empty; a window needs at least one element", context));
  }
  window_axis a{in, size, stride, 0, 0};
  if (p == padding::valid) {
    if (size > in) {
      throw shape_error(detail::cat(op, ": VALID padding needs every window inside the image, but ", window_side,
                                    " is larger than image dim ", in_dim, " of size ", in,
                                    "; use SAME padding or a smaller window", context));
    }
    a.out = (in - size) / stride + 1;
  } else {
    a.out = (in + stride - 1) / stride;
    a.pad_before = std::max<std::int64_t>((a.out - 1) * stride + size - in, 0) / 2;
  }
  return a;
}

// This device's part of a convolution (backend/conv.hpp): the local images,
// in-channels and out-channels, and the two window axes.
using conv_geometry = backend::conv_geometry;

// Allreduces t's local part over the axes marked (nothing when none is, or
// on a device outside the mesh).
template <std::size_t N, class Tensor>
void allreduce_over(const std::array<bool, N>& axes, Tensor& t) {
  if (ops_detail::any(axes) && t.holds_data()) {
    allreduce_in_place(t, t.mesh().group_along(t.device(), axes));
  }
}

}  // namespace conv_detail

// The convolution of image x with filter: x's dims in x's order, H and W
// renamed OutH and OutW (by default kept) and the in-channels (the dim x and
// filter share) replaced by the out-channels (the filter's dim besides FH,
// FW and the in-channels). See the top of this file for the roles, padding,
// layouts and communication.
template <class H = conv_detail::not_named, class W = conv_detail::not_named, class FH = conv_detail::not_named,
          class FW = conv_detail::not_named, class OutH = H, class OutW = W, class T, class SX, class LX, class MX,
          class SF, class LF, class MF>
auto conv2d(const tensor<T, SX, LX, MX>& x, const tensor<T, SF, LF, MF>& filter, const conv2d_options& options = {}) {
  constexpr bool ok = conv_detail::check_conv<SX, LX, MX, SF, LF, MF, H, W, FH, FW, OutH, OutW>();
  if constexpr (!ok) {
    return diagnostic::after_failure<tensor<T, SX, canonical<SX, LX>, MX>>();  // a check has said why
  } else {
    using R = conv_detail::conv_roles<SX, SF, FH, FW>;
    using C = typename R::C;
    using K = typename R::K;
    using M = MX;
    // The kernel's orders: [batch-like..., H, W, C], [FH, FW, C, K] and [batch-like..., OutH, OutW, K].
    using batch_like = shape_without<SX, H, W, C>;
    using XN = shape_append<batch_like, H, W, C>;
    using FN = shape<FH, FW, C, K>;
    using ON = shape_append<batch_like, OutH, OutW, K>;
    using Out = shape_replace<shape_replace<shape_replace<SX, H, OutH>, W, OutW>, C, K>;
    using OutL = canonical<Out, typename ops_detail::output_layout<Out, LX, LF>::type>;
    using out_t = tensor<T, Out, OutL, M>;

    ops_detail::check_same_mesh("conv2d", x, filter);
    ops_detail::check_common_sizes("conv2d", x.shape(), filter.shape());
    const std::string context =
        detail::cat(" (conv2d of image ", x.shape().describe(), " with filter ", filter.shape().describe(), ")");
    const SF fs = filter.shape();
    conv_detail::conv_geometry g;
    g.h = conv_detail::slide("conv2d", H::name, x.shape().template size<H>(),
                             detail::cat("filter dim ", FH::name, " of size ", fs.template size<FH>()),
                             fs.template size<FH>(), options.strides.h, options.padding, context);
    g.w = conv_detail::slide("conv2d", W::name, x.shape().template size<W>(),
                             detail::cat("filter dim ", FW::name, " of size ", fs.template size<FW>()),
                             fs.template size<FW>(), options.strides.w, options.padding, context);
    g.images = conv_detail::local_product<batch_like>(x);
    g.channels = x.template local_extent<C>();
    g.out_channels = filter.template local_extent<K>();
    const Out out_shape = shape_from<Out>(shape<OutH, OutW>{g.h.out, g.w.out}, x.shape(), fs);

    auto&& xn = conv_detail::in_order<XN>(x);
    auto&& fn = conv_detail::in_order<FN>(filter);
    // conv_forward writes every element (zeros where the geometry is empty).
    out_t out = conv_detail::filled_in_order<out_t, ON, conv_detail::start::unwritten>(x.mesh(), out_shape, [&](auto& y) {
      if (y.holds_data()) backend::conv_forward(y.space(), xn.data(), fn.data(), y.data(), g);
    });
    // The in-channels are summed: where they are split, the devices along their axis hold partial sums.
    constexpr auto summed =
        ops_detail::either(ops_detail::summed_axes<SX, LX, Out, M>(), ops_detail::summed_axes<SF, LF, Out, M>());
    conv_detail::allreduce_over(summed, out);

    if (!autodiff::recording() || !(x.tracked() || filter.tracked())) return out;
    using x_t = tensor<T, SX, canonical<SX, LX>, M>;
    using f_t = tensor<T, SF, canonical<SF, LF>, M>;
    return record(
        std::move(out), "conv2d",
        gradient_of(x,
                    [fv = conv_detail::kept(std::forward<decltype(fn)>(fn)), g, xs = x.shape()](const out_t& dy) {
                      auto&& dyn = conv_detail::in_order<ON>(dy);
                      x_t dx = conv_detail::filled_in_order<x_t, XN>(dy.mesh(), xs, [&](auto& d) {
                        if (d.holds_data()) {
                          backend::conv_image_grad(d.space(), dyn.data(), fv.data(), d.data(), g);
                        }
                      });
                      // The out-channels (and the filter's taps) are summed away here.
                      constexpr auto axes = ops_detail::either(ops_detail::summed_axes<Out, OutL, SX, M>(),
                                                               ops_detail::summed_axes<SF, LF, SX, M>());
                      conv_detail::allreduce_over(axes, dx);
                      return dx;
                    }),
        gradient_of(filter, [xv = conv_detail::kept(std::forward<decltype(xn)>(xn)), g, fs](const out_t& dy) {
          auto&& dyn = conv_detail::in_order<ON>(dy);
          f_t df = conv_detail::filled_in_order<f_t, FN>(dy.mesh(), fs, [&](auto& d) {
            if (d.holds_data()) {
              backend::conv_filter_grad(d.space(), xv.data(), dyn.data(), d.data(), g);
            }
          });
          // The batch-like dims (and the output pixels) are summed away here.
          constexpr auto axes = ops_detail::either(ops_detail::summed_axes<SX, LX, SF, M>(),
                                                   ops_detail::summed_axes<Out, OutL, SF, M>());
          conv_detail::allreduce_over(axes, df);
          return df;
        }));
  }
}

}  // namespace typemesh

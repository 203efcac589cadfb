// Max and average pooling, per channel and per image. Dims are found by
// role, never by position:
//
//   // x: shape<batch, h, w, c> -> shape<batch, h, w, c> (the output's h and w are smaller)
//   auto y = typemesh::max_pool2d<h, w>(x, {.window = {3, 3}, .strides = {2, 2}});
//   // naming the output's spatial dims (shape<batch, oh, ow, c>):
//   auto z = typemesh::avg_pool2d<h, w, oh, ow>(x, {.window = {2, 2}, .padding = typemesh::padding::same});
//
// The template arguments name the image's height and width (and, optionally,
// the output's: by default the output keeps the image's tags with the new
// sizes, as conv2d's does). Every other dim, any number in any position
// (batch, channels, ...), passes through: a window covers one value of each.
// The output has the image's dims in the image's order.
//
// Options (pool2d_options): the window is required (a call without one
// throws shape_error saying so: no size suits both AlexNet's 3x3 and
// Inception's 8x8 pools); the strides default to the window (non-overlapping
// windows, as Mesh-TensorFlow's and Keras's pooling); padding defaults to
// VALID. Padding and output sizes are as for conv2d (layers/conv2d.hpp).
// Padding never enters a result: a max is over the window's elements inside
// the image, and an average divides by their count (as TensorFlow does with
// SAME padding).
//
// Gradients: max pooling sends each output's gradient to the element that
// was the maximum (the first in window order on ties); average pooling
// spreads it evenly over the elements averaged.
//
// The other dims may be split over mesh axes; nothing is summed across
// devices, so pooling never communicates. Height and width must be whole.
//
// The local kernels (backend/pooling.hpp, in the mesh's space) read this
// device's slice as [outer..., height, width, inner...]: the dims before the
// height in the image's order are the outer ones, the rest the inner ones
// (NHWC: batch outer, channels inner; NCHW: batch and channels outer). It is
// used in place when the width follows the height directly, and transposed
// locally (and the results back) when not. The forward kernels run one
// index per output pixel. The average's gradient runs one per input pixel,
// gathering from the windows that hold it; the maximum's runs one per output
// pixel where windows do not overlap, else one per image and block of
// channels (a gather would compare every element with each window's choice).
// Either way each element's sum runs in the order of a sequential loop over
// the outputs, so the results are that loop's bits on any number of threads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>

#include "typemesh/backend/pooling.hpp"
#include "typemesh/backend/storage.hpp"
#include "typemesh/layers/conv2d.hpp"

namespace typemesh {

// The size of a pooling window along the image's height and width; 0 x 0
// until given.
struct window {
  std::int64_t h = 0;
  std::int64_t w = 0;
};

// max_pool2d's and avg_pool2d's options:
//   max_pool2d<h, w>(x, {.window = {3, 3}, .strides = {2, 2}, .padding = typemesh::padding::same})
struct pool2d_options {
  typemesh::window window{};                       // required
  typemesh::strides strides{window.h, window.w};  // default: the window
  typemesh::padding padding = typemesh::padding::valid;
};
using max_pool2d_options = pool2d_options;
using avg_pool2d_options = pool2d_options;

namespace pool_detail {

// This device's part of a pooling (backend/pooling.hpp): the local images
// and channels, and the two window axes.
using pool_geometry = backend::pool_geometry;

template <class S>
std::string context(std::string_view op, const S& s, const window& win) {
  return detail::cat(" (", op, " of image ", s.describe(), " with window ", win.h, "x", win.w, ")");
}

template <class H, class W, class OutH, class OutW, class S, class L>
consteval bool check_pool() {
  using conv_detail::not_named;
  if constexpr (!diagnostic::pool2d_roles_not_named<H, W, std::is_same_v<H, not_named> ||
                                                              std::is_same_v<W, not_named>>::passed) {
    return false;
  } else {
    return conv_detail::check_image<S, L, H, W, OutH, OutW, S>();
  }
}

// S's dims before H (in S's order), W left out.
template <class S, class H, class W>
struct outer_dims;
template <class... Ds, class H, class W>
struct outer_dims<shape<Ds...>, H, W> {
  template <class D>
  using before_h = std::bool_constant<(detail::index_of<D, Ds...> < detail::index_of<H, Ds...>)>;
  using type = shape_without<typename detail::filter_dims<before_h, Ds...>::type, W>;
};

// The output's type, the kernel's order and this device's geometry, shared
// by both poolings.
template <class H, class W, class OutH, class OutW, class T, class S, class L, class M>
struct pooling {
  // The kernel's order: [outer..., H, W, inner...].
  using outer = typename outer_dims<S, H, W>::type;
  using PN = shape_union<shape_append<outer, H, W>, S>;
  using inner = shape_minus<PN, shape_append<outer, H, W>>;
  using Out = shape_replace<shape_replace<S, H, OutH>, W, OutW>;
  using ON = shape_replace<shape_replace<PN, H, OutH>, W, OutW>;
  using OutL = canonical<Out, typename ops_detail::output_layout<Out, L>::type>;
  using out_t = tensor<T, Out, OutL, M>;
  using in_t = tensor<T, S, canonical<S, L>, M>;

  pool_geometry g;
  Out out_shape;

  pooling(std::string_view op, const tensor<T, S, L, M>& x, const pool2d_options& o) {
    const std::string where = context(op, x.shape(), o.window);
    if (o.window.h == 0 && o.window.w == 0) {
      throw shape_error(detail::cat(op, ": the options give no window; pooling needs its size, e.g. ", op, "<",
                                    H::name, ", ", W::name, ">(x, {.window = {2, 2}})", where));
    }
    g.h = conv_detail::slide(op, H::name, x.shape().template size<H>(), detail::cat("window height ", o.window.h),
                             o.window.h, o.strides.h, o.padding, where);
    g.w = conv_detail::slide(op, W::name, x.shape().template size<W>(), detail::cat("window width ", o.window.w),
                             o.window.w, o.strides.w, o.padding, where);
    g.images = conv_detail::local_product<outer>(x);
    g.channels = conv_detail::local_product<inner>(x);
    out_shape = shape_from<Out>(shape<OutH, OutW>{g.h.out, g.w.out}, x.shape());
  }
};

}  // namespace pool_detail

// The maximum of each window: x's dims, H and W renamed OutH and OutW (by
// default kept), with the output's sizes.
template <class H = conv_detail::not_named, class W = conv_detail::not_named, class OutH = H, class OutW = W, class T,
          class S, class L, class M>
auto max_pool2d(const tensor<T, S, L, M>& x, const pool2d_options& options) {
  if constexpr (!pool_detail::check_pool<H, W, OutH, OutW, S, L>()) {
    return diagnostic::after_failure<tensor<T, S, canonical<S, L>, M>>();  // the check has said why
  } else {
    using P = pool_detail::pooling<H, W, OutH, OutW, T, S, L, M>;
    using out_t = typename P::out_t;
    using in_t = typename P::in_t;
    const P p("max_pool2d", x, options);
    auto&& xn = conv_detail::in_order<typename P::PN>(x);
    using argmax_t = backend::storage<std::int64_t, space_of<M>>;
    std::shared_ptr<argmax_t> argmax;
    // Every window holds an element of the image, so every output is written.
    out_t out = conv_detail::filled_in_order<out_t, typename P::ON, conv_detail::start::unwritten>(
        x.mesh(), p.out_shape, [&](auto& y) {
      argmax = std::make_shared<argmax_t>(static_cast<std::size_t>(y.local_size()));
      backend::max_pool_forward(y.space(), xn.data(), y.data(), backend::view(*argmax).data(), p.g);
    });
    if (!autodiff::recording() || !x.tracked()) return out;
    return record(std::move(out), "max_pool2d", gradient_of(x, [argmax, g = p.g, xs = x.shape()](const out_t& dy) {
                    auto&& dyn = conv_detail::in_order<typename P::ON>(dy);
                    return conv_detail::filled_in_order<in_t, typename P::PN, conv_detail::start::unwritten>(
                        dy.mesh(), xs, [&](auto& dx) {
                      backend::max_pool_grad(dx.space(), dyn.data(), backend::view(*argmax).data(), dx.data(), g);
                    });
                  }));
  }
}

// The mean of each window's elements inside the image: x's dims, H and W
// renamed OutH and OutW (by default kept), with the output's sizes.
template <class H = conv_detail::not_named, class W = conv_detail::not_named, class OutH = H, class OutW = W, class T,
          class S, class L, class M>
auto avg_pool2d(const tensor<T, S, L, M>& x, const pool2d_options& options) {
  if constexpr (!pool_detail::check_pool<H, W, OutH, OutW, S, L>()) {
    return diagnostic::after_failure<tensor<T, S, canonical<S, L>, M>>();  // the check has said why
  } else {
    using P = pool_detail::pooling<H, W, OutH, OutW, T, S, L, M>;
    using out_t = typename P::out_t;
    using in_t = typename P::in_t;
    const P p("avg_pool2d", x, options);
    auto&& xn = conv_detail::in_order<typename P::PN>(x);
    out_t out = conv_detail::filled_in_order<out_t, typename P::ON>(x.mesh(), p.out_shape, [&](auto& y) {
      backend::avg_pool_forward(y.space(), xn.data(), y.data(), p.g);
    });
    if (!autodiff::recording() || !x.tracked()) return out;
    return record(std::move(out), "avg_pool2d", gradient_of(x, [g = p.g, xs = x.shape()](const out_t& dy) {
                    auto&& dyn = conv_detail::in_order<typename P::ON>(dy);
                    return conv_detail::filled_in_order<in_t, typename P::PN>(dy.mesh(), xs, [&](auto& dx) {
                      backend::avg_pool_grad(dx.space(), dyn.data(), dx.data(), g);
                    });
                  }));
  }
}

}  // namespace typemesh

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
// The local kernel reads this device's slice as [outer..., height, width,
// inner...]: the dims before the height in the image's order are the outer
// ones, the rest the inner ones (NHWC: batch outer, channels inner; NCHW:
// batch and channels outer). It is used in place when the width follows the
// height directly, and transposed locally (and the results back) when not.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

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

// This device's part of a pooling: `images` local images of h.in x w.in with
// `channels` local channels; arrays row-major [images, h, w, channels].
struct pool_geometry {
  std::int64_t images = 0;
  std::int64_t channels = 0;
  conv_detail::window_axis h, w;
};

// Calls f(out_offset, count) for each output pixel, and for each of its
// window's elements inside the image g(out_offset, in_offset); offsets are
// of `channels` consecutive elements. `count` is how many elements the
// window holds inside the image.
template <class PerPixel, class PerElement>
void for_each_window(const pool_geometry& g, PerPixel&& pixel, PerElement&& element) {
  const std::int64_t c = g.channels;
  std::int64_t out = 0;
  for (std::int64_t b = 0; b < g.images; ++b) {
    for (std::int64_t oh = 0; oh < g.h.out; ++oh) {
      for (std::int64_t ow = 0; ow < g.w.out; ++ow, out += c) {
        const std::int64_t h0 = g.h.first(oh), h1 = g.h.last(oh), w0 = g.w.first(ow), w1 = g.w.last(ow);
        pixel(out, (h1 - h0) * (w1 - w0));
        for (std::int64_t ih = h0; ih < h1; ++ih) {
          for (std::int64_t iw = w0; iw < w1; ++iw) element(out, ((b * g.h.in + ih) * g.w.in + iw) * c);
        }
      }
    }
  }
}

// y = the window maxima; argmax[i] = the local offset in x of y[i]'s maximum.
template <class T>
void max_pool_forward(const T* x, T* y, std::int64_t* argmax, const pool_geometry& g) {
  const std::int64_t c = g.channels;
  bool first = true;
  for_each_window(
      g, [&](std::int64_t, std::int64_t) { first = true; },
      [&](std::int64_t out, std::int64_t in) {
        for (std::int64_t k = 0; k < c; ++k) {
          if (first || y[out + k] < x[in + k]) {
            y[out + k] = x[in + k];
            argmax[out + k] = in + k;
          }
        }
        first = false;
      });
}

// dx[argmax[i]] += dy[i] for the n outputs.
template <class T>
void max_pool_grad(const T* dy, const std::int64_t* argmax, std::size_t n, T* dx) {
  for (std::size_t i = 0; i < n; ++i) dx[argmax[i]] += dy[i];
}

// y = the window means over the elements inside the image.
template <class T>
void avg_pool_forward(const T* x, T* y, const pool_geometry& g) {
  const std::int64_t c = g.channels;
  T inverse{};
  for_each_window(
      g, [&](std::int64_t, std::int64_t count) { inverse = T{1} / static_cast<T>(count); },
      [&](std::int64_t out, std::int64_t in) {
        for (std::int64_t k = 0; k < c; ++k) y[out + k] += inverse * x[in + k];
      });
}

// dx += dy spread evenly over each window's elements inside the image.
template <class T>
void avg_pool_grad(const T* dy, T* dx, const pool_geometry& g) {
  const std::int64_t c = g.channels;
  T inverse{};
  for_each_window(
      g, [&](std::int64_t, std::int64_t count) { inverse = T{1} / static_cast<T>(count); },
      [&](std::int64_t out, std::int64_t in) {
        for (std::int64_t k = 0; k < c; ++k) dx[in + k] += inverse * dy[out + k];
      });
}

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
    std::shared_ptr<std::vector<std::int64_t>> argmax;
    out_t out = conv_detail::filled_in_order<out_t, typename P::ON>(x.mesh(), p.out_shape, [&](auto& y) {
      argmax = std::make_shared<std::vector<std::int64_t>>(y.local().size());
      pool_detail::max_pool_forward(xn.local().data(), y.local().data(), argmax->data(), p.g);
    });
    if (!autodiff::recording() || !x.tracked()) return out;
    return record(std::move(out), "max_pool2d", gradient_of(x, [argmax, xs = x.shape()](const out_t& dy) {
                    auto&& dyn = conv_detail::in_order<typename P::ON>(dy);
                    return conv_detail::filled_in_order<in_t, typename P::PN>(dy.mesh(), xs, [&](auto& dx) {
                      pool_detail::max_pool_grad(dyn.local().data(), argmax->data(), dyn.local().size(),
                                                 dx.local().data());
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
      pool_detail::avg_pool_forward(xn.local().data(), y.local().data(), p.g);
    });
    if (!autodiff::recording() || !x.tracked()) return out;
    return record(std::move(out), "avg_pool2d", gradient_of(x, [g = p.g, xs = x.shape()](const out_t& dy) {
                    auto&& dyn = conv_detail::in_order<typename P::ON>(dy);
                    return conv_detail::filled_in_order<in_t, typename P::PN>(dy.mesh(), xs, [&](auto& dx) {
                      pool_detail::avg_pool_grad(dyn.local().data(), dx.local().data(), g);
                    });
                  }));
  }
}

}  // namespace typemesh

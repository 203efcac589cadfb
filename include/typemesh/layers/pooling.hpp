// Max and average pooling over images in NHWC order, per channel:
//
//   // x: shape<batch, h, w, c>  ->  shape<batch, h, w, c> (the output's h and w are smaller)
//   auto y = typemesh::max_pool2d(x, typemesh::window{3, 3}, typemesh::strides{2, 2}, typemesh::padding::valid);
//   auto z = typemesh::avg_pool2d<oh, ow>(x, typemesh::window{2, 2}, typemesh::strides{2, 2},
//                                         typemesh::padding::same);
//
// Dims, output names, padding and output sizes are as for conv2d
// (layers/conv2d.hpp). Padding never enters a result: a max is over the
// window's elements inside the image, and an average divides by their count
// (as TensorFlow does with SAME padding).
//
// Gradients: max pooling sends each output's gradient to the element that
// was the maximum (the first in window order on ties); average pooling
// spreads it evenly over the elements averaged.
//
// Batch and channels may be split over mesh axes; nothing is summed across
// devices, so pooling never communicates. Height and width must be whole.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "typemesh/layers/conv2d.hpp"

namespace typemesh {

// The size of a pooling window along the image's height and width.
struct window {
  std::int64_t h = 1;
  std::int64_t w = 1;
};

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

// The output's type and this device's geometry, shared by both poolings.
template <class OutH, class OutW, class T, class S, class L, class M>
struct pooling {
  using I = conv_detail::image_dims<S>;
  using B = typename I::batch;
  using H = typename I::height;
  using W = typename I::width;
  using C = typename I::channels;
  using Out = shape<B, conv_detail::out_dim<OutH, H>, conv_detail::out_dim<OutW, W>, C>;
  using OutL = canonical<Out, typename ops_detail::output_layout<Out, L>::type>;
  using out_t = tensor<T, Out, OutL, M>;
  using in_t = tensor<T, S, canonical<S, L>, M>;

  pool_geometry g;
  Out out_shape;

  pooling(std::string_view op, const tensor<T, S, L, M>& x, window win, strides step, padding pad) {
    const std::string where = context(op, x.shape(), win);
    g.h = conv_detail::slide(op, H::name, x.shape().template size<H>(), detail::cat("window height ", win.h), win.h,
                             step.h, pad, where);
    g.w = conv_detail::slide(op, W::name, x.shape().template size<W>(), detail::cat("window width ", win.w), win.w,
                             step.w, pad, where);
    g.images = x.template local_extent<B>();
    g.channels = x.template local_extent<C>();
    out_shape = Out{x.shape().template size<B>(), g.h.out, g.w.out, x.shape().template size<C>()};
  }
};

}  // namespace pool_detail

// The maximum of each window, per channel: [batch, OutH, OutW, c].
template <class OutH = void, class OutW = void, class T, class S, class L, class M>
auto max_pool2d(const tensor<T, S, L, M>& x, window win, strides step, padding pad) {
  if constexpr (!conv_detail::check_image<S, L, OutH, OutW, S>()) {
    return;  // the check has reported the mistake
  } else {
    using P = pool_detail::pooling<OutH, OutW, T, S, L, M>;
    using out_t = typename P::out_t;
    const P p("max_pool2d", x, win, step, pad);
    out_t out(x.mesh(), p.out_shape);
    auto argmax = std::make_shared<std::vector<std::int64_t>>(out.local().size());
    pool_detail::max_pool_forward(x.local().data(), out.local().data(), argmax->data(), p.g);
    if (!autodiff::recording() || !x.tracked()) return out;
    return record(std::move(out), "max_pool2d",
                  gradient_of(x, [argmax, xs = x.shape()](const out_t& dy) {
                    typename P::in_t dx(dy.mesh(), xs);
                    auto d = dx.local();
                    auto up = dy.local();
                    for (std::size_t i = 0; i < up.size(); ++i) d[(*argmax)[i]] += up[i];
                    return dx;
                  }));
  }
}

// The mean of each window's elements inside the image, per channel:
// [batch, OutH, OutW, c].
template <class OutH = void, class OutW = void, class T, class S, class L, class M>
auto avg_pool2d(const tensor<T, S, L, M>& x, window win, strides step, padding pad) {
  if constexpr (!conv_detail::check_image<S, L, OutH, OutW, S>()) {
    return;  // the check has reported the mistake
  } else {
    using P = pool_detail::pooling<OutH, OutW, T, S, L, M>;
    using out_t = typename P::out_t;
    const P p("avg_pool2d", x, win, step, pad);
    out_t out(x.mesh(), p.out_shape);
    pool_detail::avg_pool_forward(x.local().data(), out.local().data(), p.g);
    if (!autodiff::recording() || !x.tracked()) return out;
    return record(std::move(out), "avg_pool2d", gradient_of(x, [g = p.g, xs = x.shape()](const out_t& dy) {
                    typename P::in_t dx(dy.mesh(), xs);
                    pool_detail::avg_pool_grad(dy.local().data(), dx.local().data(), g);
                    return dx;
                  }));
  }
}

}  // namespace typemesh

// Element functions that kernels apply, as named function objects: unlike
// lambdas, they compile for the GPU from any enclosing function (nvcc's
// extended lambdas may not sit in functions with deduced return types or in
// generic lambdas, which the ops layer is full of).
#pragma once

#include <cmath>

#include "typemesh/backend/config.hpp"

namespace typemesh::backend {

template <class T>
struct plus {
  TYPEMESH_KERNEL T operator()(T a, T b) const { return a + b; }
};
template <class T>
struct maximum {
  TYPEMESH_KERNEL T operator()(T a, T b) const { return a < b ? b : a; }
};
template <class T>
struct minimum {
  TYPEMESH_KERNEL T operator()(T a, T b) const { return b < a ? b : a; }
};

struct first_of {
  template <class T>
  TYPEMESH_KERNEL T operator()(T a, T) const {
    return a;
  }
};
struct second_of {
  template <class T>
  TYPEMESH_KERNEL T operator()(T, T b) const {
    return b;
  }
};

template <class T>
struct times {
  T factor;
  TYPEMESH_KERNEL T operator()(T v) const { return v * factor; }
};
template <class T>
struct plus_constant {
  T c;
  TYPEMESH_KERNEL T operator()(T v) const { return v + c; }
};
template <class U>
struct cast_to {
  template <class T>
  TYPEMESH_KERNEL U operator()(T v) const {
    return static_cast<U>(v);
  }
};

// Products, differences and quotients of two elements; exp(a - b), the
// softmax numerator after subtracting the row's maximum.
struct multiplies {
  template <class T>
  TYPEMESH_KERNEL T operator()(T a, T b) const {
    return a * b;
  }
};
struct minus {
  template <class T>
  TYPEMESH_KERNEL T operator()(T a, T b) const {
    return a - b;
  }
};
struct divides {
  template <class T>
  TYPEMESH_KERNEL T operator()(T a, T b) const {
    return a / b;
  }
};
struct exp_of_difference {
  template <class T>
  TYPEMESH_KERNEL T operator()(T a, T b) const {
    return std::exp(a - b);
  }
};

// 1 where v equals the maximum it is compared with, else 0.
struct is_maximum {
  template <class T>
  TYPEMESH_KERNEL T operator()(T v, T top) const {
    return v == top ? T{1} : T{0};
  }
};

}  // namespace typemesh::backend

// The headers that most compile-fail cases parse, precompiled once for all of
// them when the compiler is g++ (register.cmake, check.cmake MODE=prelude):
// every case is then compiled with `-include` of this header. Parsing these
// headers is most of a case's compile; larger preludes (the layers too) load
// more slowly than the cases save.
#pragma once

#include "common.hpp"

#include <typemesh/convert/replace_mesh.hpp>
#include <typemesh/ops/binary.hpp>
#include <typemesh/ops/collectives.hpp>
#include <typemesh/ops/einsum.hpp>
#include <typemesh/ops/shape_ops.hpp>
#include <typemesh/tensor/tensor.hpp>

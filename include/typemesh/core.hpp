// The compile-time vocabulary alone (no runtime or Thrust): dims, axes,
// shapes, meshes, layouts and slice geometry.
#pragma once

#include "typemesh/core/devices.hpp"
#include "typemesh/core/dim.hpp"
#include "typemesh/core/error.hpp"
#include "typemesh/core/group.hpp"
#include "typemesh/core/layout.hpp"
#include "typemesh/core/mesh.hpp"
#include "typemesh/core/placement.hpp"
#include "typemesh/core/shape.hpp"
#include "typemesh/core/shape_algebra.hpp"
#include "typemesh/core/type_list.hpp"

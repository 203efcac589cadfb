// typemesh: hybrid-parallel tensors whose dims, mesh axes and layouts are
// types. This header brings in the whole library.
#pragma once

// core: dims, axes, shapes, meshes, layouts, slices, diagnostics
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

// runtime: devices, communicators, the launcher
#include "typemesh/runtime/communicator.hpp"
#include "typemesh/runtime/device.hpp"
#include "typemesh/runtime/host_world.hpp"
#include "typemesh/runtime/launch.hpp"

// backend and tensor
#include "typemesh/backend/kernels.hpp"
#include "typemesh/tensor/collectives.hpp"
#include "typemesh/tensor/elementwise.hpp"
#include "typemesh/tensor/host_tensor.hpp"
#include "typemesh/tensor/import_export.hpp"
#include "typemesh/tensor/tensor.hpp"

// convert: relayout and mesh replacement
#include "typemesh/convert/relayout.hpp"
#include "typemesh/convert/replace_mesh.hpp"
#include "typemesh/convert/transfer.hpp"
#include "typemesh/convert/transfer_plan.hpp"

// ops and autodiff: typed operations that insert the collectives their
// layouts need, and reverse-mode gradients
#include "typemesh/tensor/tape_node.hpp"
#include "typemesh/autodiff/tape.hpp"
#include "typemesh/ops/binary.hpp"
#include "typemesh/ops/collectives.hpp"
#include "typemesh/ops/einsum.hpp"
#include "typemesh/ops/random.hpp"
#include "typemesh/ops/reduce.hpp"
#include "typemesh/ops/shape_ops.hpp"
#include "typemesh/ops/unary.hpp"

// layers and optimizers
#include "typemesh/layers/attention.hpp"
#include "typemesh/layers/conv2d.hpp"
#include "typemesh/layers/dense.hpp"
#include "typemesh/layers/dropout.hpp"
#include "typemesh/layers/embedding.hpp"
#include "typemesh/layers/layer_norm.hpp"
#include "typemesh/layers/lstm.hpp"
#include "typemesh/layers/pooling.hpp"
#include "typemesh/layers/softmax_cross_entropy.hpp"
#include "typemesh/layers/variable.hpp"
#include "typemesh/optim/optimizers.hpp"

#include "typemesh/version.hpp"

// Readable compile errors. Each check is a class template whose name says what
// is wrong and whose arguments are the dims, axes, layouts and meshes
// involved; it is instantiated only when the check fails, so the compiler's
// first lines read, for example:
//
//   In instantiation of 'struct typemesh::diagnostic::dim_mapped_twice<batch, ...>'
//   error: static assertion failed: typemesh: a dim is mapped to two mesh axes ...
#pragma once

namespace typemesh::diagnostic {

template <class...>
inline constexpr bool fires = false;

// Each template below is empty when Failed is false.
#define TYPEMESH_DIAGNOSTIC(NAME, PARAMS, ARGS, MESSAGE) \
  template <PARAMS, bool Failed = true>                  \
  struct NAME {};                                        \
  template <PARAMS>                                      \
  struct NAME<ARGS, true> {                              \
    static_assert(fires<ARGS>, "typemesh: " MESSAGE);    \
  }

#define TYPEMESH_P2(A, B) class A, class B
#define TYPEMESH_P3(A, B, C) class A, class B, class C
#define TYPEMESH_A2(A, B) A, B
#define TYPEMESH_A3(A, B, C) A, B, C

// Layout entries.
TYPEMESH_DIAGNOSTIC(not_a_layout_entry, TYPEMESH_P2(Entry, Layout), TYPEMESH_A2(Entry, Layout),
                    "a layout entry must read dim(axis), as in layout<batch(axis0)>; "
                    "the entry is the first argument above");
TYPEMESH_DIAGNOSTIC(dim_mapped_twice, TYPEMESH_P2(Dim, Layout), TYPEMESH_A2(Dim, Layout),
                    "a dim is mapped to two mesh axes in one layout; "
                    "the dim is the first argument above");
TYPEMESH_DIAGNOSTIC(axis_used_twice, TYPEMESH_P2(Axis, Layout), TYPEMESH_A2(Axis, Layout),
                    "one mesh axis splits two dims of a tensor; "
                    "the axis is the first argument above");

// Shapes and meshes.
TYPEMESH_DIAGNOSTIC(dim_repeated_in_shape, TYPEMESH_P2(Dim, Shape), TYPEMESH_A2(Dim, Shape),
                    "a shape names the same dim twice; the dim is the first argument above");
TYPEMESH_DIAGNOSTIC(axis_repeated_in_mesh, TYPEMESH_P2(Axis, Mesh), TYPEMESH_A2(Axis, Mesh),
                    "a mesh names the same axis twice; the axis is the first argument above");

// A layout against the tensor's shape and mesh.
TYPEMESH_DIAGNOSTIC(layout_dim_not_in_shape, TYPEMESH_P3(Dim, Shape, Layout),
                    TYPEMESH_A3(Dim, Shape, Layout),
                    "the layout maps a dim that the tensor's shape does not have; "
                    "the dim and the shape are the first two arguments above");
TYPEMESH_DIAGNOSTIC(layout_axis_not_in_mesh, TYPEMESH_P3(Axis, Mesh, Layout),
                    TYPEMESH_A3(Axis, Mesh, Layout),
                    "the layout uses an axis that the mesh does not have; "
                    "the axis and the mesh are the first two arguments above");

// Combining tensors.
TYPEMESH_DIAGNOSTIC(different_meshes, TYPEMESH_P2(MeshA, MeshB), TYPEMESH_A2(MeshA, MeshB),
                    "tensors on two different meshes cannot be combined; "
                    "move one onto the other's mesh with a mesh replacement first");
TYPEMESH_DIAGNOSTIC(different_shapes, TYPEMESH_P2(ShapeA, ShapeB), TYPEMESH_A2(ShapeA, ShapeB),
                    "elementwise operands must have the same dims in the same order; "
                    "the two shapes are the arguments above");
TYPEMESH_DIAGNOSTIC(conflicting_layouts, TYPEMESH_P3(Dim, LayoutA, LayoutB),
                    TYPEMESH_A3(Dim, LayoutA, LayoutB),
                    "the tensors disagree on the mesh axis of a dim; relayout one of them first; "
                    "the dim is the first argument above");

// Collectives along a dim or an axis.
TYPEMESH_DIAGNOSTIC(dim_not_split, TYPEMESH_P2(Dim, Layout), TYPEMESH_A2(Dim, Layout),
                    "the collective needs a dim that is split over a mesh axis, "
                    "but this dim is whole in the layout; the dim is the first argument above");
TYPEMESH_DIAGNOSTIC(dim_already_split, TYPEMESH_P2(Dim, Layout), TYPEMESH_A2(Dim, Layout),
                    "the collective needs a dim that is whole, but this dim is already split "
                    "in the layout; the dim is the first argument above");
TYPEMESH_DIAGNOSTIC(axis_already_used, TYPEMESH_P2(Axis, Layout), TYPEMESH_A2(Axis, Layout),
                    "the collective needs a mesh axis that holds replicas, but this axis "
                    "already splits a dim of the tensor; the axis is the first argument above");
TYPEMESH_DIAGNOSTIC(dim_not_in_shape, TYPEMESH_P2(Dim, Shape), TYPEMESH_A2(Dim, Shape),
                    "the operation names a dim that the tensor's shape does not have; "
                    "the dim and the shape are the arguments above");
TYPEMESH_DIAGNOSTIC(axis_not_in_mesh, TYPEMESH_P2(Axis, Mesh), TYPEMESH_A2(Axis, Mesh),
                    "the operation names an axis that the mesh does not have; "
                    "the axis and the mesh are the arguments above");

// Mesh replacements of a named kind.
TYPEMESH_DIAGNOSTIC(replication_of_a_split_tensor, TYPEMESH_P2(Dim, Layout), TYPEMESH_A2(Dim, Layout),
                    "the replication kind moves fully replicated tensors, but this layout splits a dim; "
                    "the dim is the first argument above");
TYPEMESH_DIAGNOSTIC(split_in_both_layouts, TYPEMESH_P3(Dim, OldLayout, NewLayout),
                    TYPEMESH_A3(Dim, OldLayout, NewLayout),
                    "the independent-axes kind needs every dim split in at most one of the old and new "
                    "layouts, but this dim is split in both; the dim is the first argument above");
TYPEMESH_DIAGNOSTIC(dim_changes_axis, TYPEMESH_P3(Dim, OldLayout, NewLayout), TYPEMESH_A3(Dim, OldLayout, NewLayout),
                    "this kind of mesh replacement keeps every dim on the same mesh axis, but this dim "
                    "moves; the dim is the first argument above");
TYPEMESH_DIAGNOSTIC(not_split_on_leading_axis, TYPEMESH_P2(Layout, Mesh), TYPEMESH_A2(Layout, Mesh),
                    "the concat-split and pipeline kinds need exactly one split dim, on the mesh's first "
                    "axis; the layout and the mesh are the arguments above");

#undef TYPEMESH_P2
#undef TYPEMESH_P3
#undef TYPEMESH_A2
#undef TYPEMESH_A3
#undef TYPEMESH_DIAGNOSTIC

}  // namespace typemesh::diagnostic

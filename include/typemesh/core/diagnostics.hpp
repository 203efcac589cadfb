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

// One error per mistake. A function whose checks failed must not go on to
// compile its body: every line after the first diagnostic would add errors
// of its own (a page of them, about the library's internals). The idiom:
//
//   constexpr bool ok = <checks, each a diagnostic that fires on failure>;
//   if constexpr (!ok) {
//     return diagnostic::after_failure<result_t>();   // the check has said why
//   } else {
//     ... the body ...
//   }
//
// after_failure<R>() has the type the call would have returned, so the
// caller's next statements do not fail too. It is never run: a program in
// which a check fired does not compile.
// What a call returns after a check failed when its result type cannot be
// formed (the failed check was about the types it needs).
struct failed {};

template <class R = failed>
R after_failure() {
  static_assert(!fires<R>);
  return *static_cast<R*>(nullptr);
}

// TYPEMESH_DIAGNOSTIC(name, (class A, class B), (A, B), "message") declares a
// check: name<A, B, Failed>::passed is true when Failed is false; when Failed
// is true, naming ::passed fails with "typemesh: message" (and is false).
// Every layer of the library declares its checks with it, in namespace
// typemesh::diagnostic; a program's own layers may declare theirs in any
// namespace. A check function returns the conjunction of its
// checks' ::passed, so that the caller can stop (see after_failure below);
// a lone check can also be written static_assert(sizeof(name<...>)), which
// fires the message without a second error.
#define TYPEMESH_UNPAREN(...) __VA_ARGS__
#define TYPEMESH_DIAGNOSTIC(NAME, PARAMS, ARGS, MESSAGE)                      \
  template <TYPEMESH_UNPAREN PARAMS, bool Failed = true>                     \
  struct NAME {                                                              \
    static constexpr bool passed = true;                                     \
  };                                                                         \
  template <TYPEMESH_UNPAREN PARAMS>                                         \
  struct NAME<TYPEMESH_UNPAREN ARGS, true> {                                 \
    static_assert(::typemesh::diagnostic::fires<TYPEMESH_UNPAREN ARGS>, "typemesh: " MESSAGE);       \
    static constexpr bool passed = false;                                    \
  }

// Layout entries.
TYPEMESH_DIAGNOSTIC(not_a_layout_entry, (class Entry, class Layout), (Entry, Layout),
                    "a layout entry must read dim(axis), as in layout<batch(axis0)>; "
                    "the entry is the first argument above");
TYPEMESH_DIAGNOSTIC(dim_mapped_twice, (class Dim, class Layout), (Dim, Layout),
                    "a dim is mapped to two mesh axes in one layout; "
                    "the dim is the first argument above");
TYPEMESH_DIAGNOSTIC(axis_used_twice, (class Axis, class Layout), (Axis, Layout),
                    "one mesh axis splits two dims of a tensor; "
                    "the axis is the first argument above");

// Shapes and meshes.
TYPEMESH_DIAGNOSTIC(dim_repeated_in_shape, (class Dim, class Shape), (Dim, Shape),
                    "a shape names the same dim twice; the dim is the first argument above");
TYPEMESH_DIAGNOSTIC(axis_repeated_in_mesh, (class Axis, class Mesh), (Axis, Mesh),
                    "a mesh names the same axis twice; the axis is the first argument above");

// A layout against the tensor's shape and mesh.
TYPEMESH_DIAGNOSTIC(layout_dim_not_in_shape, (class Dim, class Shape, class Layout),
                    (Dim, Shape, Layout),
                    "the layout maps a dim that the tensor's shape does not have; "
                    "the dim and the shape are the first two arguments above");
TYPEMESH_DIAGNOSTIC(layout_axis_not_in_mesh, (class Axis, class Mesh, class Layout),
                    (Axis, Mesh, Layout),
                    "the layout uses an axis that the mesh does not have; "
                    "the axis and the mesh are the first two arguments above");

// Combining tensors.
TYPEMESH_DIAGNOSTIC(different_meshes, (class MeshA, class MeshB), (MeshA, MeshB),
                    "tensors on two different meshes cannot be combined; "
                    "move one onto the other's mesh with a mesh replacement first");
TYPEMESH_DIAGNOSTIC(different_shapes, (class ShapeA, class ShapeB), (ShapeA, ShapeB),
                    "elementwise operands must have the same dims in the same order; "
                    "the two shapes are the arguments above");
TYPEMESH_DIAGNOSTIC(conflicting_layouts, (class Dim, class LayoutA, class LayoutB),
                    (Dim, LayoutA, LayoutB),
                    "the tensors disagree on the mesh axis of a dim; relayout one of them first; "
                    "the dim is the first argument above");

// Collectives along a dim or an axis.
TYPEMESH_DIAGNOSTIC(dim_not_split, (class Dim, class Layout), (Dim, Layout),
                    "the collective needs a dim that is split over a mesh axis, "
                    "but this dim is whole in the layout; the dim is the first argument above");
TYPEMESH_DIAGNOSTIC(dim_already_split, (class Dim, class Layout), (Dim, Layout),
                    "the collective needs a dim that is whole, but this dim is already split "
                    "in the layout; the dim is the first argument above");
TYPEMESH_DIAGNOSTIC(axis_already_used, (class Axis, class Layout), (Axis, Layout),
                    "the collective needs a mesh axis that holds replicas, but this axis "
                    "already splits a dim of the tensor; the axis is the first argument above");
TYPEMESH_DIAGNOSTIC(dim_not_in_shape, (class Dim, class Shape), (Dim, Shape),
                    "the operation names a dim that the tensor's shape does not have; "
                    "the dim and the shape are the arguments above");
TYPEMESH_DIAGNOSTIC(axis_not_in_mesh, (class Axis, class Mesh), (Axis, Mesh),
                    "the operation names an axis that the mesh does not have; "
                    "the axis and the mesh are the arguments above");

// Mesh replacements of a named kind.
TYPEMESH_DIAGNOSTIC(replication_of_a_split_tensor, (class Dim, class Layout), (Dim, Layout),
                    "the replication kind moves fully replicated tensors, but this layout splits a dim; "
                    "the dim is the first argument above");
TYPEMESH_DIAGNOSTIC(split_in_both_layouts, (class Dim, class OldLayout, class NewLayout),
                    (Dim, OldLayout, NewLayout),
                    "the independent-axes kind needs every dim split in at most one of the old and new "
                    "layouts, but this dim is split in both; the dim is the first argument above");
TYPEMESH_DIAGNOSTIC(dim_changes_axis, (class Dim, class OldLayout, class NewLayout), (Dim, OldLayout, NewLayout),
                    "this kind of mesh replacement keeps every dim on the same mesh axis, but this dim "
                    "moves; the dim is the first argument above");
TYPEMESH_DIAGNOSTIC(not_split_on_leading_axis, (class Layout, class Mesh), (Layout, Mesh),
                    "the concat-split and pipeline kinds need exactly one split dim, on the mesh's first "
                    "axis; the layout and the mesh are the arguments above");


}  // namespace typemesh::diagnostic

#pragma once

#define TYPEMESH_VERSION_MAJOR 0
#define TYPEMESH_VERSION_MINOR 1
#define TYPEMESH_VERSION_PATCH 0

namespace typemesh {
constexpr const char* version_string() { return "0.1.0"; }
}  // namespace typemesh

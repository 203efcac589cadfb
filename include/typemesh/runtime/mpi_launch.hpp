// Kept for programs that include it by this name; the MPI launcher is
// runtime/mpi_launcher.hpp.
#pragma once

#include "typemesh/runtime/mpi_launcher.hpp"

# How this project's tests start a program under MPI: one place for the
# launcher's flags, included by tests/mpi/register.cmake and bench/CMakeLists.txt.
# Needs find_package(MPI) to have run (the typemesh::mpi target exists).
#
#   typemesh_mpiexec(<var> <ranks>)
#     sets <var> to the command line that starts <ranks> ranks, up to the
#     program: ${MPIEXEC_EXECUTABLE} <flags> ${MPIEXEC_NUMPROC_FLAG} <ranks>.
#     Append the program, ${MPIEXEC_POSTFLAGS} and the program's arguments.
#     Also sets TYPEMESH_MPIEXEC_IS_OPEN_MPI in the caller's scope (tests
#     that use Open MPI's own flags check it).
include_guard(GLOBAL)

function(typemesh_mpiexec var ranks)
  # Asking the launcher for its version runs it, so ask once per configure.
  get_property(_known GLOBAL PROPERTY TYPEMESH_MPIEXEC_FLAGS SET)
  if(NOT _known)
    set(_flags ${MPIEXEC_PREFLAGS})
    # Open MPI refuses root and more ranks than cores unless told (CI runs as
    # root on 2 cores).
    execute_process(COMMAND ${MPIEXEC_EXECUTABLE} --version OUTPUT_VARIABLE _version ERROR_QUIET)
    if(_version MATCHES "Open MPI|OpenRTE")
      list(PREPEND _flags --allow-run-as-root --oversubscribe)
      set_property(GLOBAL PROPERTY TYPEMESH_MPIEXEC_IS_OPEN_MPI ON)
    endif()
    set_property(GLOBAL PROPERTY TYPEMESH_MPIEXEC_FLAGS "${_flags}")
  endif()
  get_property(_flags GLOBAL PROPERTY TYPEMESH_MPIEXEC_FLAGS)
  set(${var} ${MPIEXEC_EXECUTABLE} ${_flags} ${MPIEXEC_NUMPROC_FLAG} ${ranks} PARENT_SCOPE)
  get_property(_open_mpi GLOBAL PROPERTY TYPEMESH_MPIEXEC_IS_OPEN_MPI)
  set(TYPEMESH_MPIEXEC_IS_OPEN_MPI "${_open_mpi}" PARENT_SCOPE)
endfunction()

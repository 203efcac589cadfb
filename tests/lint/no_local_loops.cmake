# lint.kernels_only_in_backend: ops, layers and optimizers do not touch a
# tensor's local elements themselves; every local computation goes through
# the kernel set in include/typemesh/backend/ (docs/backend.md). A line of
# include/typemesh/{ops,layers,optim}/ fails the check when it
#   - calls local() (a partial result is completed with
#     allreduce_in_place(tensor, group), tensor/tensor.hpp), or
#   - indexes the raw pointer data() returns, or
#   - loops (for/while) over local_size().
# A heuristic, not a proof: it catches the usual shapes of a loop over local
# data, which is what crept back in before.
#
#   cmake -DSOURCE_DIR=<repository> -P no_local_loops.cmake
if(NOT SOURCE_DIR)
  message(FATAL_ERROR "no_local_loops.cmake: pass -DSOURCE_DIR=<repository root>")
endif()
file(GLOB _headers "${SOURCE_DIR}/include/typemesh/ops/*.hpp" "${SOURCE_DIR}/include/typemesh/layers/*.hpp"
     "${SOURCE_DIR}/include/typemesh/optim/*.hpp")
list(LENGTH _headers _count)
if(_count EQUAL 0)
  message(FATAL_ERROR "no_local_loops.cmake: no headers under ${SOURCE_DIR}/include/typemesh/{ops,layers,optim}")
endif()
set(_found "")
foreach(_header IN LISTS _headers)
  file(STRINGS "${_header}" _lines)
  set(_number 0)
  foreach(_line IN LISTS _lines)
    math(EXPR _number "${_number} + 1")
    string(REGEX REPLACE "//.*$" "" _code "${_line}")
    set(_bad "")
    if(_code MATCHES "local\\(\\)")
      set(_bad "uses local()")
    elseif(_code MATCHES "data\\(\\)\\[")
      set(_bad "indexes data()")
    elseif(_code MATCHES "(for|while) *\\(.*local_size\\(\\)")
      set(_bad "loops over local_size()")
    endif()
    if(_bad)
      file(RELATIVE_PATH _rel "${SOURCE_DIR}" "${_header}")
      string(STRIP "${_line}" _shown)
      string(APPEND _found "  ${_rel}:${_number}: ${_bad}: ${_shown}\n")
    endif()
  endforeach()
endforeach()
if(_found)
  message(FATAL_ERROR "local computation outside the kernel set (move it into include/typemesh/backend/, "
                      "see docs/backend.md):\n${_found}")
endif()
message(STATUS "${_count} headers of ops/, layers/ and optim/ leave local computation to the kernel set")

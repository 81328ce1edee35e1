# The shared kernels of opforge: the opforge-spec source, include/ (header-only math) beside cmake/
# (the CMake helpers of the opforge packages). trt_plugin carries the same file: the one place the
# packages share is what this finds. Used before project(): the CUDA arch helper lives there.

# opforge_input(NAME DEFAULT): NAME from -DNAME=..., else the environment variable NAME, else DEFAULT.
macro(opforge_input name default)
  if(NOT DEFINED ${name})
    if(NOT "$ENV{${name}}" STREQUAL "")
      set(${name} "$ENV{${name}}")
    else()
      set(${name} "${default}")
    endif()
  endif()
endmacro()

# Sets OPFORGE_KERNELS_INCLUDE_DIR (-D or environment; unset: ../../kernels/include of an opforge
# checkout) and OPFORGE_KERNELS_CMAKE_DIR (the cmake/ folder beside it). `who` prefixes errors.
function(opforge_locate_kernels who)
  get_filename_component(in_checkout "${CMAKE_CURRENT_SOURCE_DIR}/../../kernels/include" ABSOLUTE)
  if(NOT EXISTS "${in_checkout}/opforge/kernels/math.h")
    set(in_checkout "")
  endif()
  opforge_input(OPFORGE_KERNELS_INCLUDE_DIR "${in_checkout}")
  set(how "set OPFORGE_KERNELS_INCLUDE_DIR (environment or -D) to the include/ folder of opforge's "
          "kernels: kernels/include of an opforge checkout, or include/ of the unpacked opforge-spec "
          "sdist (its cmake/ folder beside it)")
  if(NOT OPFORGE_KERNELS_INCLUDE_DIR)
    message(FATAL_ERROR "${who}: the shared kernels were not found (this is not an opforge checkout): ${how}")
  endif()
  get_filename_component(include_dir "${OPFORGE_KERNELS_INCLUDE_DIR}" ABSOLUTE)
  get_filename_component(cmake_dir "${include_dir}/../cmake" ABSOLUTE)
  foreach(needed "${include_dir}/opforge/kernels/math.h" "${cmake_dir}/opforge_package.cmake")
    if(NOT EXISTS "${needed}")
      message(FATAL_ERROR "${who}: OPFORGE_KERNELS_INCLUDE_DIR=${include_dir}: expected ${needed}, "
                          "found none; ${how}")
    endif()
  endforeach()
  set(OPFORGE_KERNELS_INCLUDE_DIR "${include_dir}" PARENT_SCOPE)
  set(OPFORGE_KERNELS_CMAKE_DIR "${cmake_dir}" PARENT_SCOPE)
endfunction()

# opforge-spec's CMake package: `find_package(opforge_kernels 0.1.0 CONFIG)` in every opforge package
# that compiles the shared kernels (ort_plugin, trt_plugin, loader).
#
# Where it is found: opforge-spec is a build requirement of those packages (pyproject.toml
# [build-system] requires); its wheel declares the scikit-build-core entry point
# `cmake.root: opforge_kernels = opforge_spec`, so a pip build sets opforge_kernels_ROOT to the
# installed package (this file is opforge_spec/cmake/ there, the headers opforge_spec/include/). In
# an opforge checkout the same file is kernels/cmake/, beside kernels/include/.
#
# Provides:
#   OPFORGE_KERNELS_INCLUDE_DIR  the folder holding opforge/kernels/*.h
#   OPFORGE_KERNELS_CMAKE_DIR    this folder
#   opforge::kernels             an INTERFACE target carrying that include directory
#   OPFORGE_KERNELS_DOMAIN, OPFORGE_KERNELS_DOMAIN_VERSION, OPFORGE_KERNELS_OPS
#                                the spec's ONNX domain, its version and its op names in spec order
#                                (opforge_kernels_ops.cmake, generated): each package makes its own
#                                declarations of them (manifests' ops, the loader's nn plugin OPS)
#   opforge_input(NAME DEFAULT)  NAME from -DNAME=..., else the environment variable NAME, else DEFAULT
#   the build support functions of the packages: opforge_cuda_architectures,
#   opforge_cuda_arch_guard (opforge_cuda_archs.cmake), opforge_install_library,
#   opforge_platform_floor, opforge_cudart_from_wheel (opforge_package.cmake)
# Usable before project(): the CUDA arch helper chooses CMAKE_CUDA_ARCHITECTURES.

get_filename_component(_opforge_kernels_include "${CMAKE_CURRENT_LIST_DIR}/../include" ABSOLUTE)
if(NOT EXISTS "${_opforge_kernels_include}/opforge/kernels/math.h")
  set(opforge_kernels_FOUND FALSE)
  set(opforge_kernels_NOT_FOUND_MESSAGE
      "${CMAKE_CURRENT_LIST_FILE}: expected the kernel headers at ${_opforge_kernels_include}/opforge/kernels/math.h, found none")
  return()
endif()
set(OPFORGE_KERNELS_INCLUDE_DIR "${_opforge_kernels_include}")
set(OPFORGE_KERNELS_CMAKE_DIR "${CMAKE_CURRENT_LIST_DIR}")
include("${CMAKE_CURRENT_LIST_DIR}/opforge_kernels_ops.cmake")
unset(_opforge_kernels_include)

if(NOT TARGET opforge::kernels)
  add_library(opforge::kernels INTERFACE IMPORTED)
  set_target_properties(opforge::kernels PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${OPFORGE_KERNELS_INCLUDE_DIR}")
endif()

macro(opforge_input name default)
  if(NOT DEFINED ${name})
    if(NOT "$ENV{${name}}" STREQUAL "")
      set(${name} "$ENV{${name}}")
    else()
      set(${name} "${default}")
    endif()
  endif()
endmacro()

include("${CMAKE_CURRENT_LIST_DIR}/opforge_cuda_archs.cmake")
include("${CMAKE_CURRENT_LIST_DIR}/opforge_package.cmake")

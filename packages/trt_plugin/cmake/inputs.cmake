# Build inputs of opforge_trt, each a CMake variable (-DNAME=...) or else the environment variable
# of the same name (opforge_input, of opforge-spec's CMake package opforge_kernels):
#   OPFORGE_TRT_INCLUDE_DIR      a folder holding NvInferRuntime.h (TensorRT >= 10). Unset: the
#                                TensorRT headers of the PyPI wheel cmake/trt_headers.py pins: those
#                                of the build's Python where that release is installed (through its
#                                package location), else downloaded (no dependencies) into $OPFORGE_CACHE
#   OPFORGE_KERNELS_INCLUDE_DIR  the shared kernels' override (CMakeLists.txt, already located)
opforge_input(OPFORGE_TRT_INCLUDE_DIR "")
if(OPFORGE_TRT_INCLUDE_DIR)
  set(OPFORGE_TRT_HEADERS_LABEL "OPFORGE_TRT_INCLUDE_DIR")
else()
  if(NOT DEFINED Python_EXECUTABLE)
    find_package(Python COMPONENTS Interpreter REQUIRED)
  endif()
  execute_process(
    COMMAND "${Python_EXECUTABLE}" "${CMAKE_CURRENT_SOURCE_DIR}/cmake/trt_headers.py"
    OUTPUT_VARIABLE _headers OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE _rc)
  if(NOT _rc EQUAL 0)
    message(FATAL_ERROR "opforge_trt: fetching the TensorRT headers cmake/trt_headers.py pins failed "
                        "(above); set OPFORGE_TRT_INCLUDE_DIR to a folder holding NvInferRuntime.h")
  endif()
  list(GET _headers 0 OPFORGE_TRT_INCLUDE_DIR)
  list(GET _headers 1 OPFORGE_TRT_HEADERS_LABEL)
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS "${CMAKE_CURRENT_SOURCE_DIR}/cmake/trt_headers.py")
endif()
if(NOT EXISTS "${OPFORGE_TRT_INCLUDE_DIR}/NvInferRuntime.h")
  message(FATAL_ERROR "opforge_trt: OPFORGE_TRT_INCLUDE_DIR=${OPFORGE_TRT_INCLUDE_DIR}: expected "
                      "NvInferRuntime.h there, found none")
endif()
file(STRINGS "${OPFORGE_TRT_INCLUDE_DIR}/NvInferVersion.h" _trt_lines REGEX "^#define TRT_(MAJOR|MINOR|PATCH)_ENTERPRISE [0-9]+")
foreach(_part MAJOR MINOR PATCH)
  string(REGEX MATCH "TRT_${_part}_ENTERPRISE ([0-9]+)" _m "${_trt_lines}")
  set(OPFORGE_TRT_${_part} "${CMAKE_MATCH_1}")
endforeach()
if(NOT OPFORGE_TRT_MAJOR OR OPFORGE_TRT_MAJOR LESS 10)
  message(FATAL_ERROR "opforge_trt: headers in ${OPFORGE_TRT_INCLUDE_DIR} are TensorRT '${OPFORGE_TRT_MAJOR}'; "
                      "IPluginV3 needs TensorRT >= 10")
endif()
set(OPFORGE_TRT_HEADER_VERSION "${OPFORGE_TRT_MAJOR}.${OPFORGE_TRT_MINOR}.${OPFORGE_TRT_PATCH}")

message(STATUS "opforge_trt: TensorRT headers ${OPFORGE_TRT_INCLUDE_DIR} "
               "(TensorRT ${OPFORGE_TRT_HEADER_VERSION}, ${OPFORGE_TRT_HEADERS_LABEL}); "
               "kernels ${OPFORGE_KERNELS_INCLUDE_DIR}")

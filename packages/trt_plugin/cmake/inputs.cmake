# Build inputs, all pinned outside this package:
#   OPFORGE_TRT_INCLUDE_DIR      env OPFORGE_TRT_INCLUDE_DIR, else the PyPI header wheel matrix.yaml
#                                pins (sources.trt_headers), fetched by cmake/trt_headers.py
#   OPFORGE_KERNELS_INCLUDE_DIR  env OPFORGE_KERNELS_INCLUDE_DIR, else <repo>/kernels/include
if(DEFINED ENV{OPFORGE_REPO_ROOT})
  set(OPFORGE_REPO_ROOT "$ENV{OPFORGE_REPO_ROOT}")
else()
  get_filename_component(OPFORGE_REPO_ROOT "${CMAKE_CURRENT_SOURCE_DIR}/../.." ABSOLUTE)
endif()

if(NOT DEFINED Python_EXECUTABLE)
  find_package(Python COMPONENTS Interpreter REQUIRED)
endif()

if(DEFINED ENV{OPFORGE_TRT_INCLUDE_DIR} AND NOT "$ENV{OPFORGE_TRT_INCLUDE_DIR}" STREQUAL "")
  set(OPFORGE_TRT_INCLUDE_DIR "$ENV{OPFORGE_TRT_INCLUDE_DIR}")
  set(OPFORGE_TRT_HEADERS_LABEL "OPFORGE_TRT_INCLUDE_DIR")
elseif(EXISTS "${OPFORGE_REPO_ROOT}/matrix.yaml")
  execute_process(
    COMMAND "${Python_EXECUTABLE}" "${CMAKE_CURRENT_SOURCE_DIR}/cmake/trt_headers.py" "${OPFORGE_REPO_ROOT}"
    OUTPUT_VARIABLE _headers OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE _rc)
  if(NOT _rc EQUAL 0)
    message(FATAL_ERROR "opforge_trt: fetching the TensorRT headers pinned in matrix.yaml failed; "
                        "set OPFORGE_TRT_INCLUDE_DIR to a folder holding NvInferRuntime.h")
  endif()
  list(GET _headers 0 OPFORGE_TRT_INCLUDE_DIR)
  list(GET _headers 1 OPFORGE_TRT_HEADERS_LABEL)
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS "${OPFORGE_REPO_ROOT}/matrix.yaml")
else()
  message(FATAL_ERROR "opforge_trt: no TensorRT headers: no ${OPFORGE_REPO_ROOT}/matrix.yaml "
                      "(sources.trt_headers) and OPFORGE_TRT_INCLUDE_DIR unset")
endif()
if(NOT EXISTS "${OPFORGE_TRT_INCLUDE_DIR}/NvInferRuntime.h")
  message(FATAL_ERROR "opforge_trt: ${OPFORGE_TRT_INCLUDE_DIR}/NvInferRuntime.h not found")
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

include("${OPFORGE_REPO_ROOT}/kernels/cmake/opforge_package.cmake")
opforge_find_kernels(opforge_trt "${OPFORGE_REPO_ROOT}")

message(STATUS "opforge_trt: TensorRT headers ${OPFORGE_TRT_INCLUDE_DIR} "
               "(TensorRT ${OPFORGE_TRT_HEADER_VERSION}, ${OPFORGE_TRT_HEADERS_LABEL})")

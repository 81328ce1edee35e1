# Build inputs, all pinned outside this package:
#   OPFORGE_ORT_MIN_API       matrix.yaml sources.ort_min_api (or env OPFORGE_ORT_MIN_API)
#   OPFORGE_ORT_INCLUDE_DIR   env OPFORGE_ORT_INCLUDE_DIR, else the Debian package matrix.yaml pins,
#                             fetched by ci/debian.py (headers are never copied into the repo)
#   OPFORGE_KERNELS_INCLUDE_DIR  env OPFORGE_KERNELS_INCLUDE_DIR, else <repo>/kernels/include
if(DEFINED ENV{OPFORGE_REPO_ROOT})
  set(OPFORGE_REPO_ROOT "$ENV{OPFORGE_REPO_ROOT}")
else()
  get_filename_component(OPFORGE_REPO_ROOT "${CMAKE_CURRENT_SOURCE_DIR}/../.." ABSOLUTE)
endif()

if(NOT DEFINED Python_EXECUTABLE)
  find_package(Python COMPONENTS Interpreter REQUIRED)
endif()

set(_matrix "${OPFORGE_REPO_ROOT}/matrix.yaml")
if(EXISTS "${_matrix}")
  execute_process(
    COMMAND "${Python_EXECUTABLE}" "${CMAKE_CURRENT_SOURCE_DIR}/cmake/matrix_sources.py" "${OPFORGE_REPO_ROOT}"
    OUTPUT_VARIABLE _matrix_sets ERROR_VARIABLE _matrix_err RESULT_VARIABLE _rc)
  if(NOT _rc EQUAL 0)
    message(FATAL_ERROR "opforge_ort: cannot read ${_matrix}: ${_matrix_err}")
  endif()
  cmake_language(EVAL CODE "${_matrix_sets}")
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS "${_matrix}")
endif()
if(DEFINED ENV{OPFORGE_ORT_MIN_API})
  set(OPFORGE_ORT_MIN_API "$ENV{OPFORGE_ORT_MIN_API}")
endif()
if(NOT OPFORGE_ORT_MIN_API MATCHES "^[0-9]+$")
  message(FATAL_ERROR "opforge_ort: minimum ORT API unknown: no ${_matrix} (sources.ort_min_api); "
                      "set OPFORGE_ORT_MIN_API, e.g. 17 for ONNX Runtime 1.17")
endif()

if(DEFINED ENV{OPFORGE_ORT_INCLUDE_DIR} AND NOT "$ENV{OPFORGE_ORT_INCLUDE_DIR}" STREQUAL "")
  set(OPFORGE_ORT_INCLUDE_DIR "$ENV{OPFORGE_ORT_INCLUDE_DIR}")
  set(OPFORGE_ORT_HEADERS_LABEL "OPFORGE_ORT_INCLUDE_DIR")
elseif(DEFINED OPFORGE_ORT_HEADERS_PACKAGE)
  execute_process(
    COMMAND "${Python_EXECUTABLE}" "${OPFORGE_REPO_ROOT}/ci/debian.py"
            "${OPFORGE_ORT_HEADERS_PACKAGE}" "${OPFORGE_ORT_HEADERS_VERSION}" --suite "${OPFORGE_ORT_HEADERS_SUITE}"
    OUTPUT_VARIABLE _root OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE _rc)
  if(NOT _rc EQUAL 0)
    message(FATAL_ERROR "opforge_ort: fetching ${OPFORGE_ORT_HEADERS_PACKAGE}=${OPFORGE_ORT_HEADERS_VERSION} failed; "
                        "set OPFORGE_ORT_INCLUDE_DIR to a folder holding onnxruntime_c_api.h")
  endif()
  set(OPFORGE_ORT_INCLUDE_DIR "${_root}/usr/include/onnxruntime")
  set(OPFORGE_ORT_HEADERS_LABEL "${OPFORGE_ORT_HEADERS_PACKAGE}=${OPFORGE_ORT_HEADERS_VERSION}")
else()
  message(FATAL_ERROR "opforge_ort: no ONNX Runtime headers: set OPFORGE_ORT_INCLUDE_DIR")
endif()
if(NOT EXISTS "${OPFORGE_ORT_INCLUDE_DIR}/onnxruntime_c_api.h")
  message(FATAL_ERROR "opforge_ort: ${OPFORGE_ORT_INCLUDE_DIR}/onnxruntime_c_api.h not found")
endif()
file(STRINGS "${OPFORGE_ORT_INCLUDE_DIR}/onnxruntime_c_api.h" _api_line REGEX "^#define ORT_API_VERSION [0-9]+")
string(REGEX MATCH "[0-9]+$" OPFORGE_ORT_HEADER_API "${_api_line}")
if(OPFORGE_ORT_HEADER_API LESS OPFORGE_ORT_MIN_API)
  message(FATAL_ERROR "opforge_ort: headers have ORT_API_VERSION ${OPFORGE_ORT_HEADER_API} < minimum ${OPFORGE_ORT_MIN_API}")
endif()

include("${OPFORGE_REPO_ROOT}/kernels/cmake/opforge_package.cmake")
opforge_find_kernels(opforge_ort "${OPFORGE_REPO_ROOT}")

message(STATUS "opforge_ort: ORT headers ${OPFORGE_ORT_INCLUDE_DIR} (API ${OPFORGE_ORT_HEADER_API}, ${OPFORGE_ORT_HEADERS_LABEL}); "
               "requesting ORT API ${OPFORGE_ORT_MIN_API} at run time (ONNX Runtime >= 1.${OPFORGE_ORT_MIN_API})")

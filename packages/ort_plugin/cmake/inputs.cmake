# Build inputs of opforge_ort, each a CMake variable (-DNAME=...) or else the environment variable
# of the same name (opforge_input, of opforge-spec's CMake package opforge_kernels):
#   OPFORGE_ORT_INCLUDE_DIR      required: a folder holding ONNX Runtime's onnxruntime_c_api.h. No
#                                Python package ships these headers; its ORT_API_VERSION only bounds
#                                what may be requested.
#   OPFORGE_ORT_MIN_API          the ORT C API version requested at run time; the library serves
#                                ONNX Runtime >= 1.<it>. Default: this package's floor below.
#   OPFORGE_KERNELS_INCLUDE_DIR  the shared kernels' override (CMakeLists.txt, already located)
set(OPFORGE_ORT_API_FLOOR 17)  # the oldest API whose functions csrc/ uses (csrc/ops.cc asserts it)

opforge_input(OPFORGE_ORT_MIN_API "${OPFORGE_ORT_API_FLOOR}")
if(NOT OPFORGE_ORT_MIN_API MATCHES "^[0-9]+$" OR OPFORGE_ORT_MIN_API LESS OPFORGE_ORT_API_FLOOR)
  message(FATAL_ERROR "opforge_ort: OPFORGE_ORT_MIN_API: expected an integer >= ${OPFORGE_ORT_API_FLOOR} "
                      "(ONNX Runtime 1.${OPFORGE_ORT_API_FLOOR}), got '${OPFORGE_ORT_MIN_API}'")
endif()

opforge_input(OPFORGE_ORT_INCLUDE_DIR "")
if(NOT OPFORGE_ORT_INCLUDE_DIR)
  message(FATAL_ERROR "opforge_ort: OPFORGE_ORT_INCLUDE_DIR is not set: set it (environment or -D) to a "
                      "folder holding ONNX Runtime's onnxruntime_c_api.h with ORT_API_VERSION >= "
                      "${OPFORGE_ORT_MIN_API}. No Python package ships these headers. In an opforge checkout "
                      "get the pinned ones CI builds with: `python3 ci/bootstrap.py --version`, then "
                      "`export OPFORGE_ORT_INCLUDE_DIR=$(.nox/_bootstrap/bin/python -m ci.debian "
                      "--ort-include)`; elsewhere a distribution's libonnxruntime-dev "
                      "(/usr/include/onnxruntime; Debian 12 has none) or the include/ folder of an "
                      "ONNX Runtime release archive (onnxruntime-linux-x64-<version>.tgz)")
endif()
set(_c_api "${OPFORGE_ORT_INCLUDE_DIR}/onnxruntime_c_api.h")
if(NOT EXISTS "${_c_api}")
  message(FATAL_ERROR "opforge_ort: OPFORGE_ORT_INCLUDE_DIR=${OPFORGE_ORT_INCLUDE_DIR}: expected "
                      "onnxruntime_c_api.h there, found none")
endif()
file(STRINGS "${_c_api}" _api_line REGEX "^#define ORT_API_VERSION [0-9]+")
string(REGEX MATCH "[0-9]+$" OPFORGE_ORT_HEADER_API "${_api_line}")
if(NOT OPFORGE_ORT_HEADER_API OR OPFORGE_ORT_HEADER_API LESS OPFORGE_ORT_MIN_API)
  message(FATAL_ERROR "opforge_ort: ${_c_api}: expected ORT_API_VERSION >= ${OPFORGE_ORT_MIN_API} "
                      "(OPFORGE_ORT_MIN_API), got '${OPFORGE_ORT_HEADER_API}'")
endif()
set(OPFORGE_ORT_HEADERS_LABEL "OPFORGE_ORT_INCLUDE_DIR (ORT_API_VERSION ${OPFORGE_ORT_HEADER_API})")

message(STATUS "opforge_ort: ORT headers ${OPFORGE_ORT_INCLUDE_DIR} (API ${OPFORGE_ORT_HEADER_API}); "
               "requesting ORT API ${OPFORGE_ORT_MIN_API} at run time (ONNX Runtime >= 1.${OPFORGE_ORT_MIN_API}); "
               "kernels ${OPFORGE_KERNELS_INCLUDE_DIR}")

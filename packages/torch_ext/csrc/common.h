// Shared by the CPU and CUDA translation units: LibTorch stable-ABI includes, argument checks
// with the canonical opforge error text, and small helpers. Only torch/csrc/stable and
// torch/headeronly are used, so the binary serves every torch from TORCH_TARGET_VERSION on.
#pragma once

#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>
#include <torch/headeronly/core/ScalarType.h>

#include <cstdint>
#include <string>
#include <tuple>

namespace opforge_torch {

using torch::headeronly::ScalarType;
using torch::stable::Tensor;

enum class Backend { CPU, CUDA };

// Names used in messages: the ONNX op names, so every layer reports the same text.
inline constexpr const char* kSwish = "Swish";
inline constexpr const char* kRMSNorm = "RMSNorm";

// `opforge.<Op>: <what>: expected <expected>, got <got>` thrown as std::runtime_error,
// which torch surfaces as RuntimeError.
[[noreturn]] void fail(const char* op, const std::string& what, const std::string& expected,
                       const std::string& got);

void check_swish(Backend backend, const Tensor& x, double beta);
void check_swish_backward(Backend backend, const Tensor& dy, const Tensor& x, double beta);
void check_rms_norm(Backend backend, const Tensor& x, const Tensor& w, double epsilon);
void check_rms_norm_backward(Backend backend, const Tensor& dy, const Tensor& x, const Tensor& w,
                             double epsilon);

// Row view of a tensor normalised over its last axis: [rows, cols].
struct RowShape {
  int64_t rows;
  int64_t cols;
};
RowShape row_shape(const Tensor& x);

}  // namespace opforge_torch

// Shared by the CPU and CUDA translation units: LibTorch stable-ABI includes, argument checks
// with the canonical opforge error text, and small helpers. Only torch/csrc/stable and
// torch/headeronly are used, so the binary serves every torch from TORCH_TARGET_VERSION on.
#pragma once

#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>
#include <torch/headeronly/core/ScalarType.h>

#include <opforge/kernels/attrs.h>

#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

namespace opforge_torch {

using torch::headeronly::ScalarType;
using torch::stable::Tensor;

enum class Backend { CPU, CUDA };

// Names used in messages: the ONNX op names, so every layer reports the same text.
inline constexpr const char* kSwish = opforge::kernels::kSwishOp.name;
inline constexpr const char* kRMSNorm = opforge::kernels::kRMSNormOp.name;
inline constexpr const char* kSwiGLU = opforge::kernels::kSwiGLUOp.name;

// `opforge.<Op>: <what>: expected <expected>, got <got>` thrown as std::runtime_error,
// which torch surfaces as RuntimeError.
[[noreturn]] void fail(const char* op, const std::string& what, const std::string& expected,
                       const std::string& got);

void check_swish(Backend backend, const Tensor& x, double beta);
void check_swish_backward(Backend backend, const Tensor& dy, const Tensor& x, double beta);
void check_rms_norm(Backend backend, const Tensor& x, const Tensor& w, double epsilon);
void check_rms_norm_backward(Backend backend, const Tensor& dy, const Tensor& x, const Tensor& w,
                             double epsilon);

void check_swiglu(Backend backend, const Tensor& x, double beta);
void check_swiglu_backward(Backend backend, const Tensor& dy, const Tensor& x, double beta);
// `out` of an .out overload: X's device and dtype, the output's shape.
void check_out(const char* op, const Tensor& out, const Tensor& x, const std::vector<int64_t>& shape);

std::vector<int64_t> shape_of(const Tensor& t);
// SwiGLU: X [..., 2d] -> Y [..., d]
std::vector<int64_t> swiglu_output_shape(const Tensor& x);

// Runs `compute(y)` on a contiguous y and returns `out` holding the result: y is `out` itself
// when it is contiguous, else a temporary copied into it.
template <class Compute>
Tensor write_into(Tensor out, const Tensor& like, const std::vector<int64_t>& shape,
                  Compute&& compute) {
  if (out.is_contiguous()) {
    compute(out);
    return out;
  }
  Tensor y = torch::stable::new_empty(like, shape);
  compute(y);
  torch::stable::copy_(out, y);
  return out;
}

// Row view of a tensor normalised over its last axis: [rows, cols].
struct RowShape {
  int64_t rows;
  int64_t cols;
};
RowShape row_shape(const Tensor& x);

}  // namespace opforge_torch

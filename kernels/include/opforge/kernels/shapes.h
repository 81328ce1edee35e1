// The shape rules of the op descriptors (attrs.h), shared by every C++ layer: X's rule with its
// canonical error text, W's rule (a 1-D per-column weight), Y's shape and the rows view the
// kernels take. Host-only. The Python twin is OpSpec.x_error / output_shape (opforge_spec).
// A negative extent means "not known yet" (TensorRT at build time): rules on it are deferred.
#pragma once

#include <cstdint>
#include <string>

#include "opforge/kernels/attrs.h"

namespace opforge::kernels {

// X as rows of `cols` elements; an elementwise op's row is one element.
struct RowView {
  int64_t rows;
  int64_t cols;
};

inline int64_t element_count(const int64_t* shape, int32_t rank) {
  int64_t n = 1;
  for (int32_t i = 0; i < rank; ++i) n *= shape[i];
  return n;
}

// Whether an output holds one value per row (OutShape::kRow): its rows are written even when X's
// rows are empty (cols == 0), so such an op's row view keeps them.
inline bool has_row_output(const OpDesc& op) {
  for (int32_t i = 0; i < op.nb_outputs; ++i)
    if (op.output_descs != nullptr && op.output_descs[i].shape == OutShape::kRow) return true;
  return false;
}

inline RowView row_view(const OpDesc& op, const int64_t* shape, int32_t rank) {
  const int64_t n = element_count(shape, rank);
  if (op.layout == Layout::kElementwise) return {n, 1};
  const int64_t cols = shape[rank - 1];
  if (cols == 0 && has_row_output(op)) return {element_count(shape, rank - 1), 0};
  return {cols == 0 ? 0 : n / cols, cols};
}

inline std::string shape_text(const int64_t* shape, int32_t rank) {
  std::string text = "[";
  for (int32_t i = 0; i < rank; ++i) text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + "]";
}

// Empty when X's shape is valid for `op`, else the canonical error text. `rank0` is how the
// layer names a rank-0 X that a row op refuses.
inline std::string x_shape_error(const OpDesc& op, const int64_t* shape, int32_t rank,
                                 const char* rank0 = "rank 0") {
  if (op.split > 1) {
    const int64_t last = rank >= 1 ? shape[rank - 1] : 0;
    if (rank >= 1 && (last < 0 || (last >= op.split && last % op.split == 0))) return {};
    return error_text(op.name, "X", op.x_expected,
                      rank == 0 ? std::string("rank 0") : "shape " + shape_text(shape, rank));
  }
  if (op.layout == Layout::kRows && rank < 1) return error_text(op.name, "X", kRankAtLeast1, rank0);
  return {};
}

// Empty when W fits X (checked X first), else the canonical error text.
inline std::string w_shape_error(const OpDesc& op, const int64_t* x_shape, int32_t x_rank,
                                 const int64_t* w_shape, int32_t w_rank) {
  const int64_t cols = x_shape[x_rank - 1];
  const bool length_known = cols >= 0 && w_rank == 1 && w_shape[0] >= 0;
  if (w_rank == 1 && (!length_known || w_shape[0] == cols)) return {};
  const std::string expected = cols >= 0 ? kWeightExpected + std::to_string(cols) + kWeightSuffix
                                         : std::string("1-D tensor (length = last dim of X)");
  return error_text(op.name, "W", expected, "shape " + shape_text(w_shape, w_rank));
}

// W's dtype rule: X's dtype, or float32 with a float16 or bfloat16 X (a mixed-dtype call: the row
// is computed in float32 with the weight as given, as HF's Gemma keeps its norm weight in float32;
// rounding 1 + w to bfloat16 moved 27% of its outputs). The Python twin is opforge_spec.weight_dtypes.
inline bool weight_may_be_float32(ElemType x) { return x == ElemType::kFloat16 || x == ElemType::kBFloat16; }

inline bool weight_dtype_ok(ElemType x, ElemType w) {
  return w == x || (w == ElemType::kFloat32 && weight_may_be_float32(x));
}

// Empty when W's dtype fits X's, else the canonical error text ("opforge.RMSNorm: W: expected dtype
// bfloat16 (dtype of X) or float32, got float64").
inline std::string weight_dtype_error(const OpDesc& op, ElemType x, ElemType w) {
  if (weight_dtype_ok(x, w)) return {};
  std::string expected = std::string("dtype ") + elem_type_name(x) + " (dtype of X)";
  if (weight_may_be_float32(x)) expected += " or float32";
  const char* got = elem_type_name(w);
  return error_text(op.name, "W", expected, *got ? got : "dtype code " + std::to_string(int32_t(w)));
}

// An op's tensor inputs by position: X, then a residual R of X's shape (three inputs), then a
// per-column weight W (two or three).
constexpr bool has_residual(const OpDesc& op) { return op.nb_inputs == 3; }
constexpr bool has_weight(const OpDesc& op) { return op.nb_inputs >= 2; }

// Whether the .out overload's output `output` may be the input `input` itself (both by position).
constexpr bool may_overwrite(const OpDesc& op, int32_t output, int32_t input) {
  return (op.overwrites >> (output * op.nb_inputs + input)) & 1u;
}

// Empty when R has X's shape, else the canonical error text. Extents not known yet (< 0) match.
inline std::string r_shape_error(const OpDesc& op, const int64_t* x_shape, int32_t x_rank,
                                 const int64_t* r_shape, int32_t r_rank) {
  bool same = x_rank == r_rank;
  for (int32_t i = 0; same && i < x_rank; ++i) {
    same = x_shape[i] < 0 || r_shape[i] < 0 || x_shape[i] == r_shape[i];
  }
  if (same) return {};
  return error_text(op.name, "R", kResidualExpected + shape_text(x_shape, x_rank) + " (the shape of X)",
                    "shape " + shape_text(r_shape, r_rank));
}

// Y's shape from X's (same rank); unknown extents stay unknown. A second output H has X's shape.
inline void output_shape(const OpDesc& op, const int64_t* x_shape, int32_t rank, int64_t* y_shape) {
  for (int32_t i = 0; i < rank; ++i) y_shape[i] = x_shape[i];
  if (op.split > 1 && rank >= 1 && y_shape[rank - 1] > 0) y_shape[rank - 1] /= op.split;
}

// The shape of output `i` from X's (same rank) by its rule (OutputDesc::shape): the op's rule
// (output_shape), X's shape, or X's shape with the last dim 1. Unknown extents stay unknown.
inline void output_shape_at(const OpDesc& op, int32_t i, const int64_t* x_shape, int32_t rank, int64_t* shape) {
  const OutShape rule = op.output_descs[i].shape;
  if (rule == OutShape::kSplit) return output_shape(op, x_shape, rank, shape);
  for (int32_t d = 0; d < rank; ++d) shape[d] = x_shape[d];
  if (rule == OutShape::kRow && rank >= 1) shape[rank - 1] = 1;
}

}  // namespace opforge::kernels

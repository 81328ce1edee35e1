// CPU kernels: validation, contiguity and threading here; the math is kernels/ cpu.h.
#include <opforge/kernels/cpu.h>

#include <algorithm>

#include "common.h"

namespace opforge_torch {
namespace {

namespace k = opforge::kernels::cpu;

// ~32K elements per task: below that the thread hand-off costs more than the work.
constexpr int64_t kGrainElements = 32768;
// Upper bound on dW partial sums: fixed per shape, so the result does not depend on thread count.
constexpr int64_t kMaxRowBlocks = 64;

// Calls fn(T{}) with the kernel element type matching `t` (checks ran before).
template <class Fn>
void dispatch(ScalarType t, Fn&& fn) {
  switch (t) {
    case ScalarType::Float: return fn(float{});
    case ScalarType::Double: return fn(double{});
    case ScalarType::BFloat16: return fn(opforge::kernels::bfloat16{});
    default: fail("kernel", "dtype", "a checked dtype", torch::headeronly::toString(t));
  }
}

template <class T>
const T* in(const Tensor& t) { return static_cast<const T*>(t.const_data_ptr()); }
template <class T>
T* out(const Tensor& t) { return static_cast<T*>(t.mutable_data_ptr()); }

int64_t row_grain(int64_t cols) { return std::max<int64_t>(1, kGrainElements / std::max<int64_t>(cols, 1)); }

// y: contiguous, X's shape.
void swish_into(const Tensor& x, double beta, Tensor& y) {
  dispatch(x.scalar_type(), [&](auto tag) {
    using T = decltype(tag);
    const T* xp = in<T>(x);
    T* yp = out<T>(y);
    torch::stable::parallel_for(0, x.numel(), kGrainElements, [&](int64_t b, int64_t e) {
      k::swish_forward<T>(xp + b, yp + b, e - b, static_cast<float>(beta));
    });
  });
}

Tensor swish(const Tensor& x_in, double beta) {
  check_swish(Backend::CPU, x_in, beta);
  const Tensor x = torch::stable::contiguous(x_in);
  Tensor y = torch::stable::new_empty(x, x.sizes());
  swish_into(x, beta, y);
  return y;
}

Tensor swish_out(const Tensor& x_in, double beta, Tensor out) {
  check_swish(Backend::CPU, x_in, beta);
  check_out(kSwish, out, x_in, shape_of(x_in));
  const Tensor x = torch::stable::contiguous(x_in);
  return write_into(out, x, shape_of(x), [&](Tensor& y) { swish_into(x, beta, y); });
}

// y: contiguous, [..., d] for X [..., 2d].
void swiglu_into(const Tensor& x, double beta, Tensor& y) {
  const RowShape s = row_shape(x);
  const int64_t d = s.cols / 2;
  dispatch(x.scalar_type(), [&](auto tag) {
    using T = decltype(tag);
    const T* xp = in<T>(x);
    T* yp = out<T>(y);
    torch::stable::parallel_for(0, s.rows, row_grain(s.cols), [&](int64_t b, int64_t e) {
      k::swiglu_forward<T>(xp, yp, b, e, d, static_cast<float>(beta));
    });
  });
}

Tensor swiglu(const Tensor& x_in, double beta) {
  check_swiglu(Backend::CPU, x_in, beta);
  const Tensor x = torch::stable::contiguous(x_in);
  Tensor y = torch::stable::new_empty(x, swiglu_output_shape(x));
  swiglu_into(x, beta, y);
  return y;
}

Tensor swiglu_out(const Tensor& x_in, double beta, Tensor out) {
  check_swiglu(Backend::CPU, x_in, beta);
  check_out(kSwiGLU, out, x_in, swiglu_output_shape(x_in));
  const Tensor x = torch::stable::contiguous(x_in);
  return write_into(out, x, swiglu_output_shape(x), [&](Tensor& y) { swiglu_into(x, beta, y); });
}

Tensor swiglu_backward(const Tensor& dy_in, const Tensor& x_in, double beta) {
  check_swiglu_backward(Backend::CPU, dy_in, x_in, beta);
  const Tensor x = torch::stable::contiguous(x_in);
  const Tensor dy = torch::stable::contiguous(dy_in);
  Tensor dx = torch::stable::new_empty(x, x.sizes());
  const RowShape s = row_shape(x);
  dispatch(x.scalar_type(), [&](auto tag) {
    using T = decltype(tag);
    const T *dyp = in<T>(dy), *xp = in<T>(x);
    T* dxp = out<T>(dx);
    torch::stable::parallel_for(0, s.rows, row_grain(s.cols), [&](int64_t b, int64_t e) {
      k::swiglu_backward<T>(dyp, xp, dxp, b, e, s.cols / 2, static_cast<float>(beta));
    });
  });
  return dx;
}

Tensor swish_backward(const Tensor& dy_in, const Tensor& x_in, double beta) {
  check_swish_backward(Backend::CPU, dy_in, x_in, beta);
  const Tensor x = torch::stable::contiguous(x_in);
  const Tensor dy = torch::stable::contiguous(dy_in);
  Tensor dx = torch::stable::new_empty(x, x.sizes());
  dispatch(x.scalar_type(), [&](auto tag) {
    using T = decltype(tag);
    const T *dyp = in<T>(dy), *xp = in<T>(x);
    T* dxp = out<T>(dx);
    torch::stable::parallel_for(0, x.numel(), kGrainElements, [&](int64_t b, int64_t e) {
      k::swish_backward<T>(dyp + b, xp + b, dxp + b, e - b, static_cast<float>(beta));
    });
  });
  return dx;
}

void rms_norm_into(const Tensor& x, const Tensor& w, double epsilon, Tensor& y) {
  const RowShape s = row_shape(x);
  dispatch(x.scalar_type(), [&](auto tag) {
    using T = decltype(tag);
    const T *xp = in<T>(x), *wp = in<T>(w);
    T* yp = out<T>(y);
    torch::stable::parallel_for(0, s.rows, row_grain(s.cols), [&](int64_t b, int64_t e) {
      k::rms_norm_forward<T>(xp, wp, yp, b, e, s.cols, static_cast<float>(epsilon));
    });
  });
}

Tensor rms_norm(const Tensor& x_in, const Tensor& w_in, double epsilon) {
  check_rms_norm(Backend::CPU, x_in, w_in, epsilon);
  const Tensor x = torch::stable::contiguous(x_in);
  const Tensor w = torch::stable::contiguous(w_in);
  Tensor y = torch::stable::new_empty(x, x.sizes());
  rms_norm_into(x, w, epsilon, y);
  return y;
}

Tensor rms_norm_out(const Tensor& x_in, const Tensor& w_in, double epsilon, Tensor out) {
  check_rms_norm(Backend::CPU, x_in, w_in, epsilon);
  check_out(kRMSNorm, out, x_in, shape_of(x_in));
  const Tensor x = torch::stable::contiguous(x_in);
  const Tensor w = torch::stable::contiguous(w_in);
  return write_into(out, x, shape_of(x), [&](Tensor& y) { rms_norm_into(x, w, epsilon, y); });
}

// dX per row; dW as per-block partial sums (float, double for double) reduced by torch::stable::sum.
std::tuple<Tensor, Tensor> rms_norm_backward(const Tensor& dy_in, const Tensor& x_in,
                                             const Tensor& w_in, double epsilon) {
  check_rms_norm_backward(Backend::CPU, dy_in, x_in, w_in, epsilon);
  const Tensor x = torch::stable::contiguous(x_in);
  const Tensor w = torch::stable::contiguous(w_in);
  const Tensor dy = torch::stable::contiguous(dy_in);
  Tensor dx = torch::stable::new_empty(x, x.sizes());
  const RowShape s = row_shape(x);
  const bool is_double = x.scalar_type() == ScalarType::Double;
  const ScalarType acc_type = is_double ? ScalarType::Double : ScalarType::Float;
  const int64_t blocks = std::clamp<int64_t>(s.rows * s.cols / kGrainElements, 1, kMaxRowBlocks);
  const int64_t rows_per_block = s.rows == 0 ? 0 : (s.rows + blocks - 1) / blocks;
  Tensor partial = torch::stable::new_zeros(x, {blocks, s.cols}, acc_type);
  dispatch(x.scalar_type(), [&](auto tag) {
    using T = decltype(tag);
    using Acc = std::conditional_t<std::is_same_v<T, double>, double, float>;
    const T *dyp = in<T>(dy), *xp = in<T>(x), *wp = in<T>(w);
    T* dxp = out<T>(dx);
    Acc* acc = out<Acc>(partial);
    torch::stable::parallel_for(0, blocks, 1, [&](int64_t b, int64_t e) {
      for (int64_t blk = b; blk < e; ++blk) {
        const int64_t r0 = std::min(s.rows, blk * rows_per_block);
        const int64_t r1 = std::min(s.rows, r0 + rows_per_block);
        k::rms_norm_backward<T, Acc>(dyp, xp, wp, dxp, acc + blk * s.cols, r0, r1, s.cols,
                                     static_cast<float>(epsilon));
      }
    });
  });
  const int64_t reduce_dims[] = {0};
  Tensor dw = torch::stable::sum(partial, torch::headeronly::IntHeaderOnlyArrayRef(reduce_dims, 1));
  return {dx, torch::stable::to(dw, w.scalar_type())};
}

}  // namespace
}  // namespace opforge_torch

STABLE_TORCH_LIBRARY_IMPL(opforge, CPU, m) {
  m.impl("swish", TORCH_BOX(&opforge_torch::swish));
  m.impl("swish_backward", TORCH_BOX(&opforge_torch::swish_backward));
  m.impl("swish.out", TORCH_BOX(&opforge_torch::swish_out));
  m.impl("swiglu", TORCH_BOX(&opforge_torch::swiglu));
  m.impl("swiglu.out", TORCH_BOX(&opforge_torch::swiglu_out));
  m.impl("swiglu_backward", TORCH_BOX(&opforge_torch::swiglu_backward));
  m.impl("rms_norm", TORCH_BOX(&opforge_torch::rms_norm));
  m.impl("rms_norm.out", TORCH_BOX(&opforge_torch::rms_norm_out));
  m.impl("rms_norm_backward", TORCH_BOX(&opforge_torch::rms_norm_backward));
}

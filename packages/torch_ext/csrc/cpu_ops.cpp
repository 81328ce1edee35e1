// CPU kernels: validation, contiguity and threading here; the math is kernels/ cpu.h.
#include <opforge/kernels/cpu_ops.h>

#include <algorithm>

#include "common.h"

namespace opforge_torch {
namespace {

namespace k = opforge::kernels;

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

// ---- every op: forward, .out and (single-input ops) backward, from the op's kernel binding ----

// y: contiguous, Y's shape. reused_y: y is the caller's buffer (an `out=`), not one just
// allocated, so a large one is written with non-temporal stores (kernels/ cpu.h).
template <class Op>
void forward_into(const Tensor& x, const Tensor* w, const Attrs& attrs, Tensor& y, bool reused_y = false) {
  const k::RowView v = row_view(Op::desc, x);
  dispatch(x.scalar_type(), [&](auto tag) {
    using T = decltype(tag);
    const bool stream = reused_y && k::cpu::streaming_pays_off(y.numel() * int64_t(sizeof(T)));
    const k::cpu::Forward<T> args{in<T>(x), w ? in<T>(*w) : nullptr, out<T>(y), v.cols,
                                  kernel_attrs(Op::desc, attrs), stream};
    torch::stable::parallel_for(0, v.rows, row_grain(v.cols), [&](int64_t b, int64_t e) {
      Op::forward(args, b, e);
    });
  });
}

struct Cpu {
  template <class Op>
  static Tensor forward(const Tensor& x_in, const Tensor* w_in, const Attrs& attrs) {
    check_op(Backend::CPU, Op::desc, x_in, w_in, attrs);
    const Tensor x = torch::stable::contiguous(x_in);
    const Tensor w = w_in ? torch::stable::contiguous(*w_in) : x;
    Tensor y = torch::stable::new_empty(x, output_shape(Op::desc, x));
    forward_into<Op>(x, w_in ? &w : nullptr, attrs, y);
    return y;
  }

  template <class Op>
  static void forward_out(const Tensor& x_in, const Tensor* w_in, const Attrs& attrs, Tensor out) {
    check_op(Backend::CPU, Op::desc, x_in, w_in, attrs);
    check_out(Op::desc, out, x_in, w_in);
    const Tensor x = torch::stable::contiguous(x_in);
    const Tensor w = w_in ? torch::stable::contiguous(*w_in) : x;
    write_into(out, x, output_shape(Op::desc, x), [&](Tensor& y) {
      forward_into<Op>(x, w_in ? &w : nullptr, attrs, y, /*reused_y=*/y.const_data_ptr() == out.const_data_ptr());
    });
  }

  template <class Op>
  static Tensor backward(const Tensor& dy_in, const Tensor& x_in, const Attrs& attrs) {
    check_op_backward(Backend::CPU, Op::desc, dy_in, x_in, nullptr, attrs);
    const Tensor x = torch::stable::contiguous(x_in);
    const Tensor dy = torch::stable::contiguous(dy_in);
    Tensor dx = torch::stable::new_empty(x, x.sizes());
    const k::RowView v = row_view(Op::desc, x);
    dispatch(x.scalar_type(), [&](auto tag) {
      using T = decltype(tag);
      const k::cpu::Backward<T> args{in<T>(dy), in<T>(x), out<T>(dx), v.cols, kernel_attrs(Op::desc, attrs)};
      torch::stable::parallel_for(0, v.rows, row_grain(v.cols), [&](int64_t b, int64_t e) {
        Op::backward(args, b, e);
      });
    });
    return dx;
  }
};

// dX per row; dW as per-block partial sums (float, double for double) reduced by torch::stable::sum.
std::tuple<Tensor, Tensor> rms_norm_backward(const Tensor& dy_in, const Tensor& x_in,
                                             const Tensor& w_in, double epsilon) {
  check_op_backward(Backend::CPU, k::kRMSNormOp, dy_in, x_in, &w_in, Attrs{epsilon});
  const Tensor x = torch::stable::contiguous(x_in);
  const Tensor w = torch::stable::contiguous(w_in);
  const Tensor dy = torch::stable::contiguous(dy_in);
  Tensor dx = torch::stable::new_empty(x, x.sizes());
  const k::RowView s = row_view(k::kRMSNormOp, x);
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
        k::cpu::rms_norm_backward<T, Acc>(dyp, xp, wp, dxp, acc + blk * s.cols, r0, r1, s.cols,
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
  using opforge_torch::Cpu;
#define OPFORGE_REGISTER_CPU(Name) OPFORGE_TORCH_REGISTER(Cpu, opforge::kernels::cpu, Name)
  OPFORGE_FOR_EACH_OP(OPFORGE_REGISTER_CPU)
#undef OPFORGE_REGISTER_CPU
  m.impl("rms_norm_backward", TORCH_BOX(&opforge_torch::rms_norm_backward));
}

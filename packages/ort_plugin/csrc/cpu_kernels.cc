// CPU execution provider: the shared kernels (kernels/include/opforge/kernels/cpu_ops.h) called on
// chunks of rows from ORT's intra-op thread pool. The kernels are stateless.
#include <opforge/kernels/cpu_ops.h>

#include "ops.h"

namespace opforge_ort {
namespace {

namespace kc = opforge::kernels::cpu;
using bfloat16 = opforge::kernels::bfloat16;

// About 32K elements per task: far above the pool's per-task cost, small enough to spread
// mid-sized activations over the cores.
constexpr int64_t kGrain = int64_t{1} << 15;

template <class Op, class T>
OrtStatus* forward_typed(const Kernel& k, OrtKernelContext* ctx, const Tensor& x, const Tensor* w, void* y,
                         const opforge::kernels::RowView& v) {
  const kc::Forward<T> args{static_cast<const T*>(x.data), w ? static_cast<const T*>(w->data) : nullptr,
                            static_cast<T*>(y), v.cols, k.attrs};
  const int64_t rows_per_grain = v.cols >= kGrain ? 1 : kGrain / v.cols;
  return parallel_for(*k.api, ctx, v.rows, rows_per_grain,
                      [=](int64_t row_begin, int64_t row_end) { Op::forward(args, row_begin, row_end); });
}

template <class Op>
OrtStatus* forward(const Kernel& k, OrtKernelContext* ctx, const Tensor& x, const Tensor* w, void* y,
                   const opforge::kernels::RowView& v) {
  switch (x.type) {
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT: return forward_typed<Op, float>(k, ctx, x, w, y, v);
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_DOUBLE: return forward_typed<Op, double>(k, ctx, x, w, y, v);
    default: return forward_typed<Op, bfloat16>(k, ctx, x, w, y, v);  // validated: the only other CPU type
  }
}

// Every op's CPU kernel (ops_generated.h lists the ops).
struct Entry {
  const opforge::kernels::OpDesc* op;
  CpuKernel kernel;
};
#define OPFORGE_ORT_CPU_ENTRY(Name) {&kc::Name##Kernel::desc, forward<kc::Name##Kernel>},
constexpr Entry kKernels[] = {OPFORGE_FOR_EACH_OP(OPFORGE_ORT_CPU_ENTRY)};
#undef OPFORGE_ORT_CPU_ENTRY

}  // namespace

CpuKernel cpu_forward(const opforge::kernels::OpDesc& op) {
  for (const Entry& entry : kKernels)
    if (entry.op == &op) return entry.kernel;
  return nullptr;
}

}  // namespace opforge_ort

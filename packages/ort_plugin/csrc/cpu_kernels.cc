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

// The op's tensors by its descriptor (cpu_ops.h): X, R, W in; Y, H out (and every output in
// `outputs`, each of its own dtype); absent ones nullptr.
// w_float32: W is float32 (a bfloat16 X's mixed-dtype call), handed over as w_float32, w nullptr.
template <class Op, class T>
kc::Forward<T> forward_args(const Kernel& k, bool w_float32, const void* const* inputs, void* const* outputs,
                            int64_t cols) {
  constexpr const opforge::kernels::OpDesc& op = Op::desc;
  const auto input = [&](int32_t i) { return static_cast<const T*>(inputs[i]); };
  const bool has_w = opforge::kernels::has_weight(op);
  kc::Forward<T> args{input(0), has_w && !w_float32 ? input(op.nb_inputs - 1) : nullptr,
                      static_cast<T*>(outputs[0]), cols, k.attrs};
  if (has_w && w_float32) args.w_float32 = static_cast<const float*>(inputs[op.nb_inputs - 1]);
  if (opforge::kernels::has_residual(op)) args.r = input(1);
  if (op.nb_outputs > 1) args.h = static_cast<T*>(outputs[1]);
  args.outputs = outputs;  // every output, each of its own dtype (RMSNormQuant's Q and scale)
  return args;
}

template <class Op, class T>
OrtStatus* forward_typed(const Kernel& k, OrtKernelContext* ctx, bool w_float32, const void* const* inputs,
                         void* const* outputs, const opforge::kernels::RowView& v) {
  const kc::Forward<T> args = forward_args<Op, T>(k, w_float32, inputs, outputs, v.cols);
  const int64_t rows_per_grain = v.cols >= kGrain ? 1 : kGrain / (v.cols > 0 ? v.cols : 1);  // rows of no columns too
  return parallel_for(*k.api, ctx, v.rows, rows_per_grain,
                      [=](int64_t row_begin, int64_t row_end) { Op::forward(args, row_begin, row_end); });
}

template <class Op>
OrtStatus* forward(const Kernel& k, OrtKernelContext* ctx, ONNXTensorElementDataType type, bool w_float32,
                   const void* const* inputs, void* const* outputs, const opforge::kernels::RowView& v) {
  switch (type) {  // validated: w_float32 only with bfloat16
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT: return forward_typed<Op, float>(k, ctx, false, inputs, outputs, v);
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_DOUBLE: return forward_typed<Op, double>(k, ctx, false, inputs, outputs, v);
    default:  // the only other CPU type
      return forward_typed<Op, bfloat16>(k, ctx, w_float32, inputs, outputs, v);
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

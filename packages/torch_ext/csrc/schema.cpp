// The operator schemas, defined once; each backend file adds its kernels.
#include "common.h"

STABLE_TORCH_LIBRARY(opforge, m) {
  m.def("swish(Tensor x, float beta=1.0) -> Tensor");
  m.def("swish_backward(Tensor grad, Tensor x, float beta) -> Tensor");
  m.def("rms_norm(Tensor x, Tensor weight, float epsilon=1e-06) -> Tensor");
  m.def(
      "rms_norm_backward(Tensor grad, Tensor x, Tensor weight, float epsilon) "
      "-> (Tensor, Tensor)");
}

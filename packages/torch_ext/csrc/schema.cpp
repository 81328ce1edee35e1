// The operator schemas, generated from opforge_spec (schema_generated.h); each backend file adds
// its kernels.
#include "common.h"
#include "schema_generated.h"

STABLE_TORCH_LIBRARY(opforge, m) {
  for (const char* schema : opforge_torch::kSchemas) m.def(schema);
}

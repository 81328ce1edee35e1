// The operator schemas, generated from the opforge_spec this build compiles against
// (schema_generated.h: setup.py writes it into the build tree with gen_schema.py); each backend
// file adds its kernels.
#include "common.h"
#include "schema_generated.h"

STABLE_TORCH_LIBRARY(opforge, m) {
  for (const char* schema : opforge_torch::kSchemas) m.def(schema);
}

// Seed 000's example op, on the opforge SDK: Y = X * scale.
#include <opforge/plugin.h>

#include <cstdio>
#include <new>

namespace {

const int32_t kFloatTypes[] = {OPFORGE_DTYPE_FLOAT32, OPFORGE_DTYPE_FLOAT64};
const OpforgeIODesc kInputs[] = {{"X", 2, kFloatTypes}};
const OpforgeIODesc kOutputs[] = {{"Y", 2, kFloatTypes}};
const OpforgeAttrSchema kAttrs[] = {{"scale", OPFORGE_ATTR_FLOAT, 0, 1.0, 0, nullptr, "factor applied to every element"}};

struct ScaleOp {
  double scale;
};

int64_t numel(const OpforgeTensor& t) {
  int64_t n = 1;
  for (int32_t i = 0; i < t.rank; ++i) n *= t.shape[i];
  return n;
}

int32_t create(const OpforgeAttrValue* attrs, uint32_t, void** instance, char*, size_t) {
  *instance = new (std::nothrow) ScaleOp{attrs[0].f};
  return *instance ? OPFORGE_OK : OPFORGE_ERR_OUT_OF_MEMORY;
}

void destroy(void* instance) { delete static_cast<ScaleOp*>(instance); }

int32_t output_shapes(void*, const OpforgeTensor* in, uint32_t, OpforgeTensorDesc* out, uint32_t, char*, size_t) {
  out[0].dtype = in[0].dtype;
  out[0].rank = in[0].rank;
  for (int32_t i = 0; i < in[0].rank; ++i) out[0].shape[i] = in[0].shape[i];
  return OPFORGE_OK;
}

template <class T>
void scale_loop(const T* x, T* y, int64_t n, double s) {
  for (int64_t i = 0; i < n; ++i) y[i] = static_cast<T>(x[i] * s);
}

int32_t compute(void* instance, const OpforgeTensor* in, uint32_t, OpforgeTensor* out, uint32_t, char* err, size_t len) {
  const double s = static_cast<ScaleOp*>(instance)->scale;
  if (numel(out[0]) != numel(in[0]) || out[0].dtype != in[0].dtype) {
    std::snprintf(err, len, "opforge.Scale: Y: expected an output like X (%lld elements), got %lld elements",
                  static_cast<long long>(numel(in[0])), static_cast<long long>(numel(out[0])));
    return OPFORGE_ERR_INVALID_ARGUMENT;
  }
  if (in[0].dtype == OPFORGE_DTYPE_FLOAT32)
    scale_loop(static_cast<const float*>(in[0].data), static_cast<float*>(out[0].data), numel(in[0]), s);
  else
    scale_loop(static_cast<const double*>(in[0].data), static_cast<double*>(out[0].data), numel(in[0]), s);
  return OPFORGE_OK;
}

const OpforgeOpDef kOps[] = {{"example", "Scale", 1, 0, "Elementwise scale: Y = X * scale", 1, kInputs, 1, kOutputs, 1,
                              kAttrs, create, destroy, output_shapes, compute}};

const OpforgePlugin kPlugin = {OPFORGE_PLUGIN_API_VERSION, sizeof(OpforgePlugin), "example_scale", OPFORGE_PLUGIN_VERSION,
                               1, kOps, nullptr, nullptr};

}  // namespace

extern "C" OPFORGE_PLUGIN_EXPORT const OpforgePlugin* opforge_plugin_entry(void) { return &kPlugin; }

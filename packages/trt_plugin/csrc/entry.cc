// The C entry points TensorRT looks up in a plugin library loaded with
// IPluginRegistry::loadLibrary (trtexec --dynamicPlugins, trt.get_plugin_registry().load_library):
// getCreators (V3 creators), getPluginCreators (V2 creators: none here) and setLoggerFinder.
#include <NvInferRuntime.h>

#include "log.h"
#include "plugin.h"

#define OPFORGE_EXPORT extern "C" __attribute__((visibility("default")))

namespace {
opforge_trt::Creator g_swish(opforge_trt::kSwish);
opforge_trt::Creator g_rms_norm(opforge_trt::kRMSNorm);
opforge_trt::Creator g_swiglu(opforge_trt::kSwiGLU);
nvinfer1::IPluginCreatorInterface* const g_creators[] = {&g_swish, &g_rms_norm, &g_swiglu};
}  // namespace

OPFORGE_EXPORT void setLoggerFinder(nvinfer1::ILoggerFinder* finder) noexcept {
  opforge_trt::set_logger_finder(finder);
}

OPFORGE_EXPORT nvinfer1::IPluginCreatorInterface* const* getCreators(int32_t& nbCreators) noexcept {
  nbCreators = static_cast<int32_t>(sizeof g_creators / sizeof g_creators[0]);
  return g_creators;
}

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
OPFORGE_EXPORT nvinfer1::IPluginCreator* const* getPluginCreators(int32_t& nbCreators) noexcept {
  nbCreators = 0;  // every creator is a V3 one, handed out by getCreators
  return nullptr;
}
#pragma GCC diagnostic pop

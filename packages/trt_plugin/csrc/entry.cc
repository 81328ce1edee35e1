// The C entry points TensorRT looks up in a plugin library loaded with
// IPluginRegistry::loadLibrary (trtexec --dynamicPlugins, trt.get_plugin_registry().load_library):
// getCreators (V3 creators), getPluginCreators (V2 creators: none here) and setLoggerFinder.
#include <NvInferRuntime.h>

#include <deque>
#include <vector>

#include "log.h"
#include "plugin.h"

#define OPFORGE_EXPORT extern "C" __attribute__((visibility("default")))

namespace {
// One creator per op of the generated descriptors (kOps), made once and kept for the library's life.
struct Creators {
  std::deque<opforge_trt::Creator> owned;  // a deque never moves its elements (they point into themselves)
  std::vector<nvinfer1::IPluginCreatorInterface*> list;

  Creators() {
    for (const opforge::kernels::OpDesc* op : opforge::kernels::kOps) list.push_back(&owned.emplace_back(*op));
  }
};

const Creators& creators() {
  static const Creators all;
  return all;
}
}  // namespace

OPFORGE_EXPORT void setLoggerFinder(nvinfer1::ILoggerFinder* finder) noexcept {
  opforge_trt::set_logger_finder(finder);
}

OPFORGE_EXPORT nvinfer1::IPluginCreatorInterface* const* getCreators(int32_t& nbCreators) noexcept {
  const Creators& all = creators();
  nbCreators = static_cast<int32_t>(all.list.size());
  return all.list.data();
}

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
OPFORGE_EXPORT nvinfer1::IPluginCreator* const* getPluginCreators(int32_t& nbCreators) noexcept {
  nbCreators = 0;  // every creator is a V3 one, handed out by getCreators
  return nullptr;
}
#pragma GCC diagnostic pop

#include "log.h"

#include <opforge/kernels/attrs.h>

#include <atomic>
#include <cstdio>

namespace opforge_trt {
namespace {
std::atomic<nvinfer1::ILoggerFinder*> g_finder{nullptr};
}

void set_logger_finder(nvinfer1::ILoggerFinder* finder) noexcept { g_finder.store(finder); }

void log(nvinfer1::ILogger::Severity severity, const std::string& message) noexcept {
  // findLogger() answers for the calling thread: the logger of the builder/runtime calling us.
  nvinfer1::ILoggerFinder* finder = g_finder.load();
  nvinfer1::ILogger* logger = finder != nullptr ? finder->findLogger() : nullptr;
  if (logger != nullptr) {
    logger->log(severity, message.c_str());
  } else if (severity <= nvinfer1::ILogger::Severity::kWARNING) {
    std::fprintf(stderr, "%s\n", message.c_str());  // loaded without setLoggerFinder: still say it
  }
}

std::string report(const char* op, const std::string& what, const std::string& expected,
                   const std::string& got) noexcept {
  try {
    std::string message = opforge::kernels::error_text(op, what, expected, got);
    log(nvinfer1::ILogger::Severity::kERROR, message);
    return message;
  } catch (...) {  // std::bad_alloc: nothing sensible left to log
    return {};
  }
}

std::string dims_str(const nvinfer1::Dims& dims) {
  std::string s = "[";
  for (int32_t i = 0; i < dims.nbDims; ++i) s += (i ? ", " : "") + std::to_string(dims.d[i]);
  return s + "]";
}

}  // namespace opforge_trt

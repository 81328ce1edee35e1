// Error reporting for the plugins: TensorRT catches no exceptions across its plugin interfaces,
// so every failure is a return code plus one log line in the canonical opforge shape.
#pragma once

#include <NvInferRuntime.h>

#include <string>

namespace opforge_trt {

// Set by TensorRT (or a test host) through the exported setLoggerFinder().
void set_logger_finder(nvinfer1::ILoggerFinder* finder) noexcept;

// "opforge.<op>: <what>: expected <expected>, got <got>", logged as an error; returns the text.
std::string report(const char* op, const std::string& what, const std::string& expected,
                   const std::string& got) noexcept;

void log(nvinfer1::ILogger::Severity severity, const std::string& message) noexcept;

std::string dims_str(const nvinfer1::Dims& dims);

}  // namespace opforge_trt

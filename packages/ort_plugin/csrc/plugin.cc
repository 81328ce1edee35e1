// Entry point of libopforge_ort.so.1: the ONNX Runtime custom-op ABI's RegisterCustomOps.
// Requests the *minimum* ORT API (OPFORGE_ORT_MIN_API), so one build serves every ORT release
// from that one on; an older runtime gets an error status, never a crash.
#include <mutex>
#include <string>

#include "ops.h"

namespace {

constexpr const char* kDomain = opforge::kernels::kDomain;  // generated from the spec

// ORT keeps pointers to the domain for as long as sessions use it, and sessions may outlive the
// SessionOptions that registered it: create it once per process and never release it.
OrtStatus* shared_domain(const OrtApi& api, OrtCustomOpDomain** out) {
  static std::mutex mutex;
  static OrtCustomOpDomain* domain = nullptr;
  std::lock_guard<std::mutex> lock(mutex);
  if (domain == nullptr) {
    OrtCustomOpDomain* fresh = nullptr;
    OPFORGE_TRY(api.CreateCustomOpDomain(kDomain, &fresh));
    for (const OrtCustomOp* op : opforge_ort::custom_ops()) {
      if (OrtStatus* s = api.CustomOpDomain_Add(fresh, op)) {
        api.ReleaseCustomOpDomain(fresh);
        return s;
      }
    }
    domain = fresh;
  }
  *out = domain;
  return nullptr;
}

OrtStatus* too_old(const OrtApiBase* base) {
  const OrtApi* v1 = base->GetApi(1);  // CreateStatus exists in every API version
  if (v1 == nullptr) return nullptr;    // cannot report; ORT then fails on the missing domain
  const std::string message = std::string("opforge_ort: ONNX Runtime ") + base->GetVersionString() +
                              " is too old: libopforge_ort.so.1 needs ORT API version " +
                              std::to_string(OPFORGE_ORT_MIN_API) + " (ONNX Runtime >= 1." +
                              std::to_string(OPFORGE_ORT_MIN_API) + ")";
  return v1->CreateStatus(ORT_FAIL, message.c_str());
}

}  // namespace

extern "C" __attribute__((visibility("default"))) OrtStatus* ORT_API_CALL
RegisterCustomOps(OrtSessionOptions* options, const OrtApiBase* api_base) {
  const OrtApi* api = api_base->GetApi(OPFORGE_ORT_MIN_API);
  if (api == nullptr) return too_old(api_base);
  try {
    OrtCustomOpDomain* domain = nullptr;
    OPFORGE_TRY(shared_domain(*api, &domain));
    return api->AddCustomOpDomain(options, domain);
  } catch (...) {
    return api->CreateStatus(ORT_FAIL, "opforge_ort: RegisterCustomOps failed (out of memory?)");
  }
}

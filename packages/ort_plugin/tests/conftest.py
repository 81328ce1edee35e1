import onnxruntime as ort
import pytest
from ort_models import MIN_ORT, ORT_VERSION


def pytest_report_header(config):
    import opforge_ort

    info = opforge_ort.build_info()
    return (f"onnxruntime {ort.__version__}; opforge_ort {opforge_ort.library_path()} "
            f"(CUDA built: {info['cuda']} {info['cuda_architectures']}, min ORT API {info['ort_min_api']})")


def pytest_collection_modifyitems(config, items):
    if ORT_VERSION >= MIN_ORT:
        return
    # The library refuses runtimes older than its minimum API; test_library checks that refusal.
    skip = pytest.mark.skip(reason=f"onnxruntime {ort.__version__} < 1.17: the plugin refuses it by design")
    for item in items:
        if "old_runtime" not in item.keywords:
            item.add_marker(skip)


def pytest_configure(config):
    config.addinivalue_line("markers", "old_runtime: runs on onnxruntime older than the minimum too")

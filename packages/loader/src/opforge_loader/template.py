"""`opforge-loader new-plugin NAME DIR`: a standalone plugin project using only the installed SDK."""
from __future__ import annotations

import re
from pathlib import Path

_CMAKE = """cmake_minimum_required(VERSION 3.20)
project({name} LANGUAGES C)

# The SDK ships with the opforge-loader wheel:
#   cmake -S . -B build -Dopforge_plugin_DIR="$(opforge-loader cmake-dir)"
find_package(opforge_plugin 0.1 REQUIRED)

# Builds libops_{name}.so.1 (SONAME, hidden visibility, only opforge_plugin_entry exported)
# and libops_{name}.so.1.manifest.json with its sha256.
opforge_add_plugin(ops_{name} NAME {name} VERSION 1.0.0
  OPS {domain}:{op}:1
  SOURCES src/{name}.c)
"""

_SOURCE = """/* {op}: Y = X + offset (float32). Written against <opforge/plugin.h> only. */
#include <opforge/plugin.h>

#include <stdio.h>
#include <stdlib.h>

static const int32_t kTypes[] = {{OPFORGE_DTYPE_FLOAT32}};
static const OpforgeIODesc kIn[] = {{{{"X", 1, kTypes}}}};
static const OpforgeIODesc kOut[] = {{{{"Y", 1, kTypes}}}};
static const OpforgeAttrSchema kAttrs[] = {{{{"offset", OPFORGE_ATTR_FLOAT, 0, 0.0, 0, NULL, "added to every element"}}}};

typedef struct {{ float offset; }} Instance;

static int64_t numel(const OpforgeTensor* t) {{
  int64_t n = 1;
  for (int32_t i = 0; i < t->rank; ++i) n *= t->shape[i];
  return n;
}}

static int32_t create(const OpforgeAttrValue* attrs, uint32_t n, void** out, char* err, size_t len) {{
  (void)n; (void)err; (void)len;
  Instance* inst = (Instance*)malloc(sizeof(Instance));
  if (!inst) return OPFORGE_ERR_OUT_OF_MEMORY;
  inst->offset = (float)attrs[0].f;
  *out = inst;
  return OPFORGE_OK;
}}

static void destroy(void* inst) {{ free(inst); }}

static int32_t output_shapes(void* inst, const OpforgeTensor* in, uint32_t n_in, OpforgeTensorDesc* out,
                             uint32_t n_out, char* err, size_t len) {{
  (void)inst; (void)n_in; (void)n_out; (void)err; (void)len;
  out[0].dtype = in[0].dtype;
  out[0].rank = in[0].rank;
  for (int32_t i = 0; i < in[0].rank; ++i) out[0].shape[i] = in[0].shape[i];
  return OPFORGE_OK;
}}

static int32_t compute(void* inst, const OpforgeTensor* in, uint32_t n_in, OpforgeTensor* out,
                       uint32_t n_out, char* err, size_t len) {{
  (void)n_in; (void)n_out;
  const int64_t n = numel(&in[0]);
  if (numel(&out[0]) != n) {{
    snprintf(err, len, "{domain}.{op}: Y: expected %lld elements, got %lld", (long long)n, (long long)numel(&out[0]));
    return OPFORGE_ERR_INVALID_ARGUMENT;
  }}
  const float* x = (const float*)in[0].data;
  float* y = (float*)out[0].data;
  const float offset = ((Instance*)inst)->offset;
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] + offset;
  return OPFORGE_OK;
}}

static const OpforgeOpDef kOps[] = {{
    {{"{domain}", "{op}", 1, 0, "Y = X + offset", 1, kIn, 1, kOut, 1, kAttrs, create, destroy, output_shapes, compute}},
}};

static const OpforgePlugin kPlugin = {{OPFORGE_PLUGIN_API_VERSION, sizeof(OpforgePlugin), "{name}",
                                      OPFORGE_PLUGIN_VERSION, 1, kOps, NULL, NULL}};

OPFORGE_PLUGIN_EXPORT const OpforgePlugin* opforge_plugin_entry(void) {{ return &kPlugin; }}
"""

_README = """# {name}: an opforge operator plugin

    cmake -S . -B build -Dopforge_plugin_DIR="$(opforge-loader cmake-dir)"
    cmake --build build
    opforge-loader doctor build/libops_{name}.so.1
    opforge-loader list build
    opforge-loader run {op} --plugin-dir build --input x.npy --attr offset=1.5 --out y.npy
"""


def camel(name: str) -> str:
    return "".join(p[:1].upper() + p[1:] for p in re.split(r"[_\-.]+", name) if p)


def write(name: str, directory: str, *, op: str | None = None, domain: str = "custom") -> list[Path]:
    if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_]*", name):
        raise ValueError(f"plugin name: expected [A-Za-z][A-Za-z0-9_]*, got {name!r}")
    op = op or camel(name)
    root = Path(directory)
    files = {root / "CMakeLists.txt": _CMAKE, root / "src" / f"{name}.c": _SOURCE, root / "README.md": _README}
    for path in files:
        if path.exists():
            raise FileExistsError(f"{path} exists; choose an empty directory")
    for path, text in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text.format(name=name, op=op, domain=domain))
    return list(files)

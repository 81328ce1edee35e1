"""The host's readers of outside bytes: manifests that are huge, endless, not files, not JSON, or
JSON the old hand-written reader misread (issue 8, items 1, 2 and 4), and the SHA-256 against
FIPS 180-4's example vectors. A crash or a hang here would take the caller's process with it, so
every case that did so before runs in a child process with a timeout and a memory limit."""
import ctypes
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from plugin_build import build_c_plugin, write_manifest

from opforge_loader import _capi

CHILD_TIMEOUT_S = 60
CHILD_MEMORY = 3 << 30


def run_child(code: str) -> dict:
    """Runs code (which prints one JSON line) in a fresh interpreter: a crash, abort or hang of
    the host fails this test instead of killing pytest."""
    import resource

    def limit_memory():
        resource.setrlimit(resource.RLIMIT_AS, (CHILD_MEMORY, CHILD_MEMORY))

    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=CHILD_TIMEOUT_S, preexec_fn=limit_memory, env=env,
                          cwd=str(Path(__file__).resolve().parent))
    assert proc.returncode == 0, f"host died (status {proc.returncode}): {proc.stderr[-2000:]}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


def host_check(manifest: Path) -> str | None:
    """opforge_manifest_check of the C host itself (the Python wrapper reads manifests on its own
    first): None when accepted, else the message."""
    err = ctypes.create_string_buffer(2048)
    status = _capi.lib().opforge_manifest_check(os.fsencode(manifest), None, err, len(err))
    return None if status == 0 else err.value.decode(errors="replace")


LOAD_DIR_CHILD = """
    import json, opforge_loader
    from conftest import snapshot
    reg = opforge_loader.Registry(log=lambda level, line: None)
    reg.load_dir({good!r})
    before = snapshot(reg)
    loaded, refused = reg.load_dir({bad!r})
    added = [op for op in snapshot(reg) if op not in before]
    print(json.dumps({{"loaded": loaded, "refused": refused, "refusals": reg.refusals,
                      "unchanged": all(op in snapshot(reg) for op in before),
                      "added": sorted({{op[0] for op in added}})}}))
"""


def load_dir_in_child(good: Path, bad: Path) -> dict:
    return run_child(LOAD_DIR_CHILD.format(good=str(good), bad=str(bad)))


@pytest.fixture
def dirs(tmp_path):
    """good/: one plugin, loaded first; bad/: a good neighbour ("other") plus what the test adds.
    A refusal in bad/ must leave good's entries as they were and still load "other"."""
    made = {}
    for name in ("good", "bad"):
        d = tmp_path / name
        d.mkdir(mode=0o755)
        made[name] = d
    build_c_plugin(made["good"], "libops_test_good.so.1", name="good", op="Good")
    build_c_plugin(made["bad"], "libops_test_other.so.1", name="other", op="Other")
    return made


# --- item 1: a ~30,000-character string field -------------------------------------------------

@pytest.mark.parametrize("field", ["name", "version", "sdk.min"])
def test_long_string_field_is_refused_not_a_crash(dirs, field):
    lib = build_c_plugin(dirs["bad"], "libops_test_long.so.1", name="long", op="Long")
    manifest = Path(str(lib) + ".manifest.json")
    data = json.loads(manifest.read_text())
    value = {"name": "a" * 30000, "version": "1" * 30000, "sdk.min": "9" * 30000}[field]
    if field == "sdk.min":
        data["sdk"]["min"] = value
    else:
        data[field] = value
    manifest.write_text(json.dumps(data))
    result = load_dir_in_child(dirs["good"], dirs["bad"])
    assert (result["loaded"], result["refused"], result["unchanged"], result["added"]) == (1, 1, True, ["other"]), result
    (line,) = result["refusals"]
    key = r'\"sdk\"' if field == "sdk.min" else rf'\"{field}\"'  # the log line quotes the reason
    assert f"malformed manifest: {key}: expected" in line and "(30000 bytes)" in line, line
    assert len(line) < 1000, "the message must show the start of the value, not all of it"


@pytest.mark.parametrize("sdk", [{"min": "", "max": None}, {"min": "1.0", "max": ""}], ids=["empty-min", "empty-max"])
def test_empty_sdk_version_is_refused(dirs, sdk):
    """Found by the manifest fuzz target: "" passed as sdk.min (and "" as a max that is not null)."""
    lib = build_c_plugin(dirs["bad"], "libops_test_empty.so.1", name="empty", op="Empty")
    manifest = Path(str(lib) + ".manifest.json")
    data = json.loads(manifest.read_text())
    data["sdk"] = sdk
    manifest.write_text(json.dumps(data))
    result = load_dir_in_child(dirs["good"], dirs["bad"])
    assert (result["loaded"], result["refused"], result["unchanged"], result["added"]) == (1, 1, True, ["other"]), result
    (line,) = result["refusals"]
    assert r'malformed manifest: \"sdk\": expected dotted version numbers' in line, line


# --- item 2: FIFOs, devices and endless files named *.manifest.json ---------------------------

def replace_manifest(directory: Path, file_name: str, make) -> None:
    """A real plugin whose manifest is then replaced by make(path) (a FIFO, a link...)."""
    lib = build_c_plugin(directory, file_name, name="victim", op="Victim")
    manifest = Path(str(lib) + ".manifest.json")
    manifest.unlink()
    make(manifest)


def test_fifo_manifest_does_not_hang_load_dir(dirs):
    replace_manifest(dirs["bad"], "libops_test_fifo.so.1", os.mkfifo)
    result = load_dir_in_child(dirs["good"], dirs["bad"])
    assert (result["loaded"], result["refused"], result["unchanged"], result["added"]) == (1, 1, True, ["other"]), result
    assert "is a FIFO, expected a regular file" in result["refusals"][0], result


def test_manifest_linked_to_dev_zero_is_refused(dirs):
    replace_manifest(dirs["bad"], "libops_test_zero.so.1", lambda path: os.symlink("/dev/zero", path))
    result = load_dir_in_child(dirs["good"], dirs["bad"])
    assert (result["loaded"], result["refused"], result["unchanged"], result["added"]) == (1, 1, True, ["other"]), result
    assert "is a character device, expected a regular file" in result["refusals"][0], result


def test_oversized_manifest_is_refused_before_parsing(plugin_dir):
    lib = build_c_plugin(plugin_dir, "libops_test_big.so.1")
    manifest = Path(str(lib) + ".manifest.json")
    data = json.loads(manifest.read_text())
    data["padding"] = "x" * (1 << 20)
    manifest.write_text(json.dumps(data))
    message = host_check(manifest)
    assert message and "is larger than 1048576 bytes" in message, message


def test_c_api_null_arguments_are_errors_not_crashes():
    """No C++ exception may cross the C ABI: std::string(NULL) used to throw out of the API."""
    result = run_child("""
        import ctypes, json
        from opforge_loader import _capi
        lib = _capi.lib()
        reg = lib.opforge_registry_create()
        err = ctypes.create_string_buffer(512)
        out = {}
        for name, call in [
            ("load", lambda: lib.opforge_registry_load(reg, None, err, len(err))),
            ("reload", lambda: lib.opforge_registry_reload(reg, None, err, len(err))),
            ("unload", lambda: lib.opforge_registry_unload(reg, None, err, len(err))),
            ("load_dir", lambda: lib.opforge_registry_load_dir(None, b"/", None, None, err, len(err))),
            ("acquire", lambda: lib.opforge_acquire(reg, None, 0, ctypes.byref(ctypes.c_void_p()), err, len(err))),
            ("manifest_check", lambda: lib.opforge_manifest_check(None, None, err, len(err))),
        ]:
            out[name] = [call(), err.value.decode()]
        lib.opforge_registry_destroy(reg)
        print(json.dumps(out))
    """)
    for name, (status, message) in result.items():
        assert status == 1 and "expected" in message and "got NULL" in message, (name, status, message)


# --- item 4: JSON the host must refuse or accept ----------------------------------------------

def manifest_with(plugin_dir: Path, raw_field: bytes) -> Path:
    """A valid onnxruntime-kind manifest (nothing is dlopened) with one more field "x" whose
    value is raw_field, bytes as they stand in the file."""
    lib = plugin_dir / "libtest_json.so.1"
    lib.write_bytes(b"not loaded, only hashed")
    manifest = write_manifest(lib, name="json_case", kind="onnxruntime", api_version=17)
    text = manifest.read_bytes().rstrip()
    assert text.endswith(b"}")
    manifest.write_bytes(text[:-1] + b', "x": ' + raw_field + b"}")
    return manifest


REFUSED = {  # n_: not JSON (RFC 8259)
    "n_escape_u12G4": rb'"\u12G4"',
    "n_escape_u_minus": rb'"\u-001"',
    "n_escape_u_plus": rb'"\u+abc"',
    "n_escape_short": rb'"\u12"',
    "n_leading_zero": b"[01]",
    "n_leading_zero_negative": b"-012",
    "n_cesu8_surrogate_pair": b'"\xed\xa0\xbd\xed\xb8\x80"',
    "n_lone_surrogate_escape": rb'"\ud800"',
    "n_invalid_utf8_byte": b'"a\xffb"',
    "n_overlong_utf8": b'"\xc0\xaf"',
    "n_raw_control_char": b'"a\x01b"',
    "n_raw_nul": b'"a\x00b"',
    "n_trailing_comma": b"[1,]",
    "n_plus_sign": b"+1",
    "n_hex_number": b"0x10",
    "n_fraction_without_digits": b"1.",
    "n_exponent_without_digits": b"1e",
    "n_nan": b"NaN",
    "n_single_quotes": b"'a'",
    "n_missing_colon": b'{"a" 1}',
    "n_infinite_number": b"1e999",
    "n_nesting_too_deep": b"[" * 100 + b"]" * 100,
}

ACCEPTED = {  # y_: JSON, and acceptable as the value of an unknown manifest field
    "y_surrogate_pair_escape": rb'"\ud83d\ude00"',
    "y_utf8_four_bytes": b'"\xf0\x9f\x98\x80"',
    "y_escaped_nul": rb'"a\u0000b"',
    "y_escapes": rb'"\"\\\/\b\f\n\r\t"',
    "y_numbers": b"[0, -0, 1.5e-3, 1E+2, -12, 123456789012345678901234567890]",
    "y_literals": b"[null, true, false]",
    "y_empty_containers": b'[{}, [], ""]',
    "y_nesting_20": b"[" * 20 + b"]" * 20,
    "y_whitespace": b' \t\r\n [ 1 \n , \r 2 ] ',
}


@pytest.mark.parametrize("raw", REFUSED.values(), ids=REFUSED.keys())
def test_invalid_json_is_refused(plugin_dir, raw):
    message = host_check(manifest_with(plugin_dir, raw))
    assert message and "malformed manifest: " in message, message


@pytest.mark.parametrize("raw", ACCEPTED.values(), ids=ACCEPTED.keys())
def test_valid_json_is_accepted(plugin_dir, raw):
    assert host_check(manifest_with(plugin_dir, raw)) is None


def test_integer_beyond_64_bits_shows_its_own_text(plugin_dir):
    manifest = manifest_with(plugin_dir, b"1")
    text = manifest.read_text().replace('"manifest_version": 1', '"manifest_version": 99999999999999999999999')
    manifest.write_text(text)
    message = host_check(manifest)
    assert message and '"manifest_version": expected an integer' in message and "99999999999999999999999" in message, message
    assert "-9223372036854775808, got" not in message.replace("from -9223372036854775808", ""), message


def test_nul_in_a_value_does_not_cut_the_message(plugin_dir):
    manifest = manifest_with(plugin_dir, b"1")
    manifest.write_text(manifest.read_text().replace('"name": "json_case"', r'"name": "bad\u0000tail-visible"'))
    message = host_check(manifest)
    assert message and r'"name": expected' in message and r"bad\x00tail-visible" in message, message


def test_raw_nul_byte_does_not_cut_the_message(plugin_dir):
    manifest = manifest_with(plugin_dir, b"1")
    manifest.write_bytes(manifest.read_bytes().replace(b'"api_version"', b'\x00"api_version"'))
    message = host_check(manifest)
    assert message and "malformed manifest: line 7 col 3: a NUL byte" in message, message


def test_nul_byte_after_the_document_is_refused(plugin_dir):
    """nlohmann-json reads NUL as the end of input: the host must not accept `{...}\\0junk`."""
    manifest = manifest_with(plugin_dir, b"1")
    manifest.write_bytes(manifest.read_bytes() + b"\x00junk")
    message = host_check(manifest)
    assert message and "a NUL byte" in message, message


# --- SHA-256: FIPS 180-4 example vectors ------------------------------------------------------

FIPS_180_4 = {
    "abc": (b"abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"),
    "448_bit": (b"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
                "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"),
    "million_a": (b"a" * 1_000_000, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"),
    "empty": (b"", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"),
}


@pytest.mark.parametrize("vector", FIPS_180_4, ids=FIPS_180_4.keys())
def test_sha256_matches_fips_180_4_vectors(plugin_dir, vector):
    data, digest = FIPS_180_4[vector]
    lib = plugin_dir / "libtest_sha.so.1"
    lib.write_bytes(data)
    manifest = write_manifest(lib, name="sha", kind="onnxruntime", api_version=17, sha256=digest)
    assert host_check(manifest) is None
    write_manifest(lib, name="sha", kind="onnxruntime", api_version=17, sha256="0" * 64)
    assert f"file has {digest}" in host_check(manifest)

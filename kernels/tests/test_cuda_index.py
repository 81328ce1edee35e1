"""The CUDA kernels' index math (cuda_index.h), replayed on the CPU for every thread of a launch:
each element visited exactly once, packets only where they fit, launch shapes CUDA accepts, and
int64 offsets that stay exact beyond 2^31 and 2^32 elements. Runs without a GPU."""
import ctypes
import subprocess
from pathlib import Path

import numpy as np
import pytest

import opforge_spec as spec

HERE = Path(__file__).parent
I64 = ctypes.c_int64
MAX_GRID = 65535
BAD_LAUNCH, MISALIGNED, NON_UNIFORM_LOOP = -1, -2, -3
ELEMENT_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    out = tmp_path_factory.mktemp("cuda_index") / "libcuda_index.so"
    subprocess.run(["g++", "-O2", "-std=c++17", "-shared", "-fPIC", "-Wall", "-Wextra", "-Werror",
                    f"-I{spec.include_dir()}", str(HERE / "cuda_index_shim.cc"), "-o", str(out)],
                   check=True)
    lib = ctypes.CDLL(str(out))
    lib.aligned_packet_elems.argtypes = [ctypes.c_int, ctypes.c_uint64]
    lib.row_packet_elems.argtypes = [ctypes.c_int, I64, ctypes.c_uint64]
    for name in ("replay_elementwise", "replay_gated", "replay_rows", "replay_dw_sum"):
        getattr(lib, name).restype = ctypes.c_int
    return lib


def ptr(a):
    return a.ctypes.data_as(ctypes.c_void_p)


def packet_widths(dtype, length):
    """Every packet width a launcher can pick for rows of `length` elements of `dtype`."""
    widest = 16 // ELEMENT_BYTES[dtype]
    return [v for v in (1, 2, 4, 8, 16) if v <= widest and length % v == 0]


def test_packet_width_follows_alignment_and_row_length(index):
    assert index.aligned_packet_elems(4, 0x1000) == 4 and index.aligned_packet_elems(2, 0x1000) == 8
    assert index.aligned_packet_elems(4, 0x1004) == 1  # an offset-by-one float view
    assert index.aligned_packet_elems(2, 0x1002) == 1 and index.aligned_packet_elems(2, 0x1004) == 2
    assert index.aligned_packet_elems(2, 0x1008) == 4
    assert index.row_packet_elems(4, 4096, 0x1000) == 4
    assert index.row_packet_elems(4, 4098, 0x1000) == 2  # rows of 4098 floats start 8-byte aligned
    assert index.row_packet_elems(2, 2049, 0x1000) == 1  # odd rows: scalar
    assert index.row_packet_elems(2, 4096, 0x1002) == 1


@pytest.mark.parametrize("n", [1, 3, 255, 256, 257, 4099, 70_001])
@pytest.mark.parametrize("vec", [1, 2, 4, 8])
def test_elementwise_visits_every_element_once(index, n, vec):
    visits, info = np.zeros(n, np.int32), np.zeros(4, np.int64)
    assert index.replay_elementwise(I64(n), vec, ptr(visits), ptr(info)) == 0, info
    assert (visits == 1).all(), np.flatnonzero(visits != 1)[:10]


# (rows, d): d not a multiple of any packet, d = 1, rows of one packet, more packets than a block
# has threads, more rows than a block holds, grid.x > 1
GATED_SHAPES = [(1, 1), (6, 1), (3, 5), (7, 8), (2, 2049), (5, 4096), (33, 24), (1, 70_000),
                (1000, 2), (3, 12_288)]


@pytest.mark.parametrize("rows, d", GATED_SHAPES)
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_gated_visits_every_element_once(index, rows, d, dtype):
    for vec in packet_widths(dtype, d):
        x_visits, y_visits = np.zeros(rows * 2 * d, np.int32), np.zeros(rows * d, np.int32)
        info = np.zeros(4, np.int64)
        status = index.replay_gated(I64(rows), I64(d), vec, ptr(x_visits), ptr(y_visits), ptr(info))
        assert status == 0, f"vec {vec}: status {status}, launch {info}"
        assert (x_visits == 1).all() and (y_visits == 1).all(), f"vec {vec}, launch {info}"


def test_a_missed_element_would_be_caught(index):
    """The replay can fail: a packet width that does not divide d leaves each row's tail unread."""
    rows, d = 3, 6
    x_visits, y_visits = np.zeros(rows * 2 * d, np.int32), np.zeros(rows * d, np.int32)
    index.replay_gated(I64(rows), I64(d), 4, ptr(x_visits), ptr(y_visits), ptr(np.zeros(4, np.int64)))
    assert (y_visits == 0).sum() == rows * 2


def replay_rows(index, rows, cols, vec, backward):
    reads, groups_of = np.zeros(rows * cols, np.int32), np.full(rows, -1, np.int64)
    info = np.zeros(6, np.int64)
    status = index.replay_rows(I64(rows), I64(cols), vec, int(backward), ptr(reads), ptr(groups_of),
                               ptr(info))
    return status, reads, groups_of, dict(zip(("gx", "gy", "bx", "by", "groups", "cached"), info))


# cols: short rows several to a warp, a row of one warp, one block of 1024 / 512 threads,
# rows that stay in registers up to the last packet and one packet beyond (read twice)
ROW_SHAPES = [(1, 1), (5, 3), (40, 8), (7, 24), (3, 1031), (2, 4096), (600, 64), (513, 40),
              (2, 4 * 4096), (2, 4 * 4096 + 4), (3, 2 * 4096 + 2), (1, 70_001)]


@pytest.mark.parametrize("rows, cols", ROW_SHAPES)
@pytest.mark.parametrize("backward", [False, True], ids=["forward", "backward"])
def test_rows_read_x_once_when_the_row_fits(index, rows, cols, backward):
    for vec in packet_widths("float32", cols) + ([8] if cols % 8 == 0 else []):
        status, reads, groups_of, launch = replay_rows(index, rows, cols, vec, backward)
        assert status == 0, f"vec {vec}: status {status}, launch {launch}"
        packets_per_row = cols // vec
        kept = (2 if backward else 4) * launch["bx"]
        assert launch["cached"] == (packets_per_row <= kept), launch
        assert (reads == (1 if launch["cached"] else 2)).all(), f"vec {vec}, launch {launch}"
        most = 512 if backward else 1024
        assert launch["bx"] * launch["by"] >= 256 and launch["bx"] <= most, launch
        assert launch["cached"] or launch["bx"] == most, launch  # a whole block before two passes
        if backward:
            assert launch["groups"] == min(rows, 512)
            assert (groups_of == np.arange(rows) % launch["groups"]).all()
        assert (groups_of >= 0).all()


@pytest.mark.parametrize("rows, cols, dtype", [(16_384, 4096, "bfloat16"), (16_384, 4096, "float32"),
                                               (4096, 8192, "bfloat16"), (8, 128, "float32")])
def test_rms_launch_shapes_of_model_sizes(index, rows, cols, dtype):
    """Threads enough for a row to stay in registers (128 on 4096 bf16, 8 lanes on 128 floats):
    X read once by the forward, X and dY once by the backward."""
    vec = 16 // ELEMENT_BYTES[dtype]
    for backward in (False, True):
        info, count, last = np.zeros(6, np.int64), I64(), I64()
        index.rows_thread(I64(rows), I64(cols // vec), int(backward), 0, 0, ptr(info),
                          ctypes.byref(count), ctypes.byref(last))
        assert info[5] == 1, (backward, info)
        assert info[2] == min(1024 if not backward else 512, -(-(cols // vec) // (2 if backward else 4)))


def test_dw_sum_reads_every_partial_once(index):
    for groups, cols in [(1, 1), (3, 31), (512, 33), (512, 4096), (7, 70_001)]:
        reads, writes = np.zeros(groups * cols, np.int32), np.zeros(cols, np.int32)
        info = np.zeros(4, np.int64)
        assert index.replay_dw_sum(I64(groups), I64(cols), ptr(reads), ptr(writes), ptr(info)) == 0
        assert (reads == 1).all() and (writes == 1).all(), (groups, cols, info)


# ---- beyond 2^31 elements: the offsets and one thread's whole loop, in exact integers ---------

def test_gated_offsets_are_exact_beyond_2_pow_32(index):
    out = np.zeros(3, np.int64)
    for rows, d in [(2**20 + 7, 2**11 + 1), (2**17, 2**15), (3, 2**31 + 5), (2**31 + 3, 1)]:
        row, col = rows - 1, d - 1
        index.gated_offsets(I64(row), I64(col), I64(d), ptr(out))
        assert list(out) == [row * 2 * d + col, row * 2 * d + col + d, row * d + col]
        assert out[1] == rows * 2 * d - 1 and out[2] == rows * d - 1


def thread_of(element, per_block, grid):
    """(block, thread) of the grid-stride loop whose visits include `element`."""
    slot = element % (per_block * grid)
    return slot // per_block, slot % per_block


@pytest.mark.parametrize("rows, d, vec", [(2**20 + 7, 2**11 + 1, 1), (2**17 + 1, 2**14, 8),
                                          (2**24 + 1, 64, 4)])
def test_gated_thread_reaches_the_last_element(index, rows, d, vec):
    ppr = d // vec
    info, count, last = np.zeros(4, np.int64), I64(), np.zeros(2, np.int64)
    index.gated_thread(I64(rows), I64(ppr), 0, 0, 0, 0, ptr(info), ctypes.byref(count), ptr(last))
    gx, gy, bx, by = (int(v) for v in info)
    assert gy <= MAX_GRID and gx <= MAX_GRID and bx * by == 256
    block_x, thread_x = thread_of(ppr - 1, bx, gx)
    block_y, thread_y = thread_of(rows - 1, by, gy)
    index.gated_thread(I64(rows), I64(ppr), block_x, block_y, thread_x, thread_y, ptr(info),
                       ctypes.byref(count), ptr(last))
    row_visits = len(range(block_y * by + thread_y, rows, gy * by))
    packet_visits = len(range(block_x * bx + thread_x, ppr, gx * bx))
    assert count.value == row_visits * packet_visits and list(last) == [rows - 1, ppr - 1]


@pytest.mark.parametrize("n, vec", [(2**31 + 5, 1), (2**33 + 3, 4), (2**32 + 8, 8)])
def test_elementwise_thread_reaches_the_last_element(index, n, vec):
    info, count, last = np.zeros(4, np.int64), I64(), I64()
    index.elementwise_thread(I64(n), vec, 0, 0, ptr(info), ctypes.byref(count), ctypes.byref(last))
    grid, block = int(info[0]), int(info[2])
    assert grid == MAX_GRID and block == 256
    stride, packets = grid * block, n // vec
    # the last element is in the scalar tail, or in the last packet when there is no tail
    slot = (n - 1 - packets * vec) % stride if n % vec else (packets - 1) % stride
    b, t = slot // block, slot % block
    index.elementwise_thread(I64(n), vec, b, t, ptr(info), ctypes.byref(count), ctypes.byref(last))
    visits = len(range(slot, packets, stride)) + len(range(packets * vec + slot, n, stride))
    assert count.value == visits and last.value == n - 1


@pytest.mark.parametrize("backward", [False, True], ids=["forward", "backward"])
def test_rows_thread_reaches_the_last_row(index, backward):
    rows, ppr = 2**22 + 3, 1024  # 2^22 rows of 4096 bf16: 2^34 elements
    info, count, last = np.zeros(6, np.int64), I64(), I64()
    index.rows_thread(I64(rows), I64(ppr), int(backward), 0, 0, ptr(info), ctypes.byref(count),
                      ctypes.byref(last))
    groups, by = int(info[4]), int(info[3])
    group = (rows - 1) % groups
    index.rows_thread(I64(rows), I64(ppr), int(backward), group // by, group % by, ptr(info),
                      ctypes.byref(count), ctypes.byref(last))
    assert last.value == rows - 1 and count.value == len(range(group, rows, groups))

// Index math of the CUDA kernels (cuda.cuh): their launch shapes and which rows, columns and
// packets each thread of a launch visits, in int64 throughout. Host and device, without CUDA
// headers, so that a CPU test (kernels/tests/test_cuda_index.py) can replay every thread of a
// launch and check that each element is visited exactly once.
#pragma once

#include <cstdint>

#include "opforge/kernels/math.h"

namespace opforge::kernels::cuda_index {

struct Dim2 {
  uint32_t x, y;
};

struct Launch {  // gridDim and blockDim
  Dim2 grid, block;
};

constexpr int kPacketBytes = 16;           // one 128-bit load or store
constexpr uint32_t kMaxGrid = 65535;       // gridDim.y's limit; grid-stride loops cover the rest
constexpr uint32_t kBlockThreads = 256;    // elementwise and gated kernels; row kernels' minimum
// RMSNorm: at most this many threads on one row, each keeping up to this many packets of it in
// registers (a row of up to 4096 packets, 64 KiB, is read once). Backward keeps X, dY and its
// partial dW (fp32) and gets 128 registers a thread: fewer packets.
constexpr uint32_t kRowForwardThreads = 1024;
constexpr int kRowForwardPackets = 4;
constexpr uint32_t kRowBackwardThreads = 512;
constexpr int kRowBackwardPackets = 2;
constexpr int64_t kMaxDwGroups = 512;      // row groups of RMSNorm backward: partial dW rows
constexpr uint32_t kDwColumns = 32, kDwLanes = 8;  // the dW column sum's block

inline uint32_t capped_blocks(int64_t work, int64_t per_block) {
  const int64_t blocks = (work + per_block - 1) / per_block;
  return static_cast<uint32_t>(blocks < kMaxGrid ? blocks : kMaxGrid);
}

inline uint32_t pow2_at_least(int64_t n, uint32_t cap) {
  uint32_t p = 1;
  while (p < cap && p < n) p *= 2;
  return p;
}

// Elements per packet for a flat range: the widest power of two up to 16 bytes to which every
// pointer is aligned. `address_bits` is the OR of the pointers' addresses.
inline int aligned_packet_elems(int element_bytes, uint64_t address_bits) {
  int vec = kPacketBytes / element_bytes;
  while (vec > 1 && address_bits % (uint64_t(vec) * element_bytes) != 0) vec /= 2;
  return vec;
}

// The same for rows of `row_length` elements: every row must start on a packet, so the packet
// also divides the row length.
inline int row_packet_elems(int element_bytes, int64_t row_length, uint64_t address_bits) {
  int vec = aligned_packet_elems(element_bytes, address_bits);
  while (vec > 1 && row_length % vec != 0) vec /= 2;
  return vec;
}

// ---- elementwise: n elements, packets of `vec` then a scalar tail ---------------------------

inline Launch elementwise_launch(int64_t n, int vec) {
  return {{capped_blocks((n + vec - 1) / vec, kBlockThreads), 1}, {kBlockThreads, 1}};
}

// on_packet(p) for packets p of [0, n / vec), then on_element(i) for the tail [n / vec * vec, n).
template <class OnPacket, class OnElement>
OPFORGE_HD void elementwise_visit(const Launch& l, Dim2 block, Dim2 thread, int64_t n, int vec,
                                  OnPacket&& on_packet, OnElement&& on_element) {
  const int64_t stride = int64_t(l.grid.x) * l.block.x;
  const int64_t first = int64_t(block.x) * l.block.x + thread.x;
  const int64_t packets = n / vec;
  for (int64_t p = first; p < packets; p += stride) on_packet(p);
  for (int64_t i = packets * vec + first; i < n; i += stride) on_element(i);
}

// ---- gated: X [rows, 2d] -> Y [rows, d], A = X[:, :d], B = X[:, d:] -------------------------

// block.x threads along a row's packets, block.y rows a block (short rows share a block).
inline Launch gated_launch(int64_t rows, int64_t packets_per_row) {
  const uint32_t tx = pow2_at_least(packets_per_row, kBlockThreads);
  const uint32_t ty = kBlockThreads / tx;
  return {{capped_blocks(packets_per_row, tx), capped_blocks(rows, ty)}, {tx, ty}};
}

// f(row, packet) for every (row, packet) of this thread: grid-stride over rows and over packets.
template <class F>
OPFORGE_HD void gated_visit(const Launch& l, Dim2 block, Dim2 thread, int64_t rows,
                            int64_t packets_per_row, F&& f) {
  const int64_t row_stride = int64_t(l.grid.y) * l.block.y;
  const int64_t packet_stride = int64_t(l.grid.x) * l.block.x;
  const int64_t first_packet = int64_t(block.x) * l.block.x + thread.x;
  for (int64_t row = int64_t(block.y) * l.block.y + thread.y; row < rows; row += row_stride) {
    for (int64_t p = first_packet; p < packets_per_row; p += packet_stride) f(row, p);
  }
}

struct GatedOffsets {
  int64_t a, b, y;  // A and B in X (and dX) [rows, 2d]; Y (and dY) [rows, d]
};

OPFORGE_HD GatedOffsets gated_offsets(int64_t row, int64_t col, int64_t d) {
  const int64_t a = row * (2 * d) + col;
  return {a, a + d, row * d + col};
}

// ---- rows: RMSNorm over rows of `cols` elements ---------------------------------------------

struct RowLaunch {
  Launch launch;
  int64_t groups;  // row group g takes rows g, g + groups, g + 2 * groups, ...
  bool cached;     // each thread's share of a row fits in its registers: X is read once
};

// block.x threads share a row (enough that each keeps at most `kept` packets), block.y row
// groups a block (at least kBlockThreads threads a block).
inline Dim2 row_block(int64_t packets_per_row, uint32_t max_threads, int kept) {
  const uint32_t tx = pow2_at_least((packets_per_row + kept - 1) / kept, max_threads);
  return {tx, tx < kBlockThreads ? kBlockThreads / tx : 1};
}

inline RowLaunch row_launch(int64_t groups, int64_t packets_per_row, Dim2 block, int kept) {
  const uint32_t blocks = static_cast<uint32_t>((groups + block.y - 1) / block.y);
  return {{{blocks, 1}, block}, groups, packets_per_row <= int64_t(block.x) * kept};
}

inline RowLaunch rms_forward_launch(int64_t rows, int64_t packets_per_row) {
  const Dim2 block = row_block(packets_per_row, kRowForwardThreads, kRowForwardPackets);
  const int64_t most = int64_t(kMaxGrid) * block.y;
  return row_launch(rows < most ? rows : most, packets_per_row, block, kRowForwardPackets);
}

// Partial dW rows of RMSNorm backward: a number fixed by `rows` alone (not by the device's size),
// so the sum order, and the bits of dW, are the same on every run.
inline int64_t dw_groups(int64_t rows) { return rows < kMaxDwGroups ? rows : kMaxDwGroups; }

inline RowLaunch rms_backward_launch(int64_t rows, int64_t packets_per_row) {
  const Dim2 block = row_block(packets_per_row, kRowBackwardThreads, kRowBackwardPackets);
  return row_launch(dw_groups(rows), packets_per_row, block, kRowBackwardPackets);
}

// f(row, live, first) for the rows of this thread's group g = block.x * block.y + thread.y. The
// loop runs as often in every thread of a block (a row past the end or a group past `groups`
// comes as live = false) so that the block can synchronize in it; `first`: the group's first row.
template <class F>
OPFORGE_HD void row_visit(const Launch& l, Dim2 block, Dim2 thread, int64_t rows, int64_t groups,
                          F&& f) {
  const int64_t block_first = int64_t(block.x) * l.block.y;
  const int64_t group = block_first + thread.y;
  for (int64_t step = 0; block_first + step < rows; step += groups) {
    const int64_t row = group + step;
    f(row, group < groups && row < rows, step == 0);
  }
}

// A thread's packets of a row: thread_x + k * block_x for k = 0, 1, ... while inside the row.
OPFORGE_HD int64_t row_packet(uint32_t thread_x, uint32_t block_x, int64_t k) {
  return thread_x + k * block_x;
}

// ---- dW column sum: dW[j] = sum over groups g of partial[g][j], in a fixed order --------------

inline Launch dw_sum_launch(int64_t cols) {
  return {{capped_blocks(cols, kDwColumns), 1}, {kDwColumns, kDwLanes}};
}

// f(first column of a tile of block.x columns), grid-stride; the same tiles for the whole block.
template <class F>
OPFORGE_HD void column_tiles(const Launch& l, Dim2 block, int64_t cols, F&& f) {
  const int64_t stride = int64_t(l.grid.x) * l.block.x;
  for (int64_t first = int64_t(block.x) * l.block.x; first < cols; first += stride) f(first);
}

// f(g) for the groups lane thread.y sums: thread.y, thread.y + block.y, ... in increasing order.
template <class F>
OPFORGE_HD void lane_groups(const Launch& l, Dim2 thread, int64_t groups, F&& f) {
  for (int64_t g = thread.y; g < groups; g += l.block.y) f(g);
}

}  // namespace opforge::kernels::cuda_index

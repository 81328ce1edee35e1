// Replays the CUDA kernels' index math (cuda_index.h) on the CPU: every block and thread of a
// launch, through the same functions the kernels call, counting how often each element is
// touched. Driven by test_cuda_index.py through ctypes.
#include <cstdint>
#include <vector>

#include "opforge/kernels/cuda_index.h"

namespace ci = opforge::kernels::cuda_index;

namespace {

constexpr int kBadLaunch = -1, kMisaligned = -2, kNonUniformLoop = -3;

// A launch CUDA accepts with these kernels: whole warps (the row kernels shuffle with full masks),
// at most `max_threads` a block, grid within every architecture's limits.
bool valid(const ci::Launch& l, uint32_t max_threads) {
  const uint32_t threads = l.block.x * l.block.y;
  return threads % 32 == 0 && threads <= max_threads && l.grid.x >= 1 && l.grid.y >= 1 &&
         l.grid.x <= ci::kMaxGrid && l.grid.y <= ci::kMaxGrid;
}

template <class F>
void each_thread(const ci::Launch& l, F&& f) {
  for (uint32_t by = 0; by < l.grid.y; ++by)
    for (uint32_t bx = 0; bx < l.grid.x; ++bx)
      for (uint32_t ty = 0; ty < l.block.y; ++ty)
        for (uint32_t tx = 0; tx < l.block.x; ++tx) f(ci::Dim2{bx, by}, ci::Dim2{tx, ty});
}

void write_launch(const ci::Launch& l, int64_t* info) {
  info[0] = l.grid.x, info[1] = l.grid.y, info[2] = l.block.x, info[3] = l.block.y;
}

}  // namespace

extern "C" {

int aligned_packet_elems(int element_bytes, uint64_t address_bits) {
  return ci::aligned_packet_elems(element_bytes, address_bits);
}

int row_packet_elems(int element_bytes, int64_t row_length, uint64_t address_bits) {
  return ci::row_packet_elems(element_bytes, row_length, address_bits);
}

// visits[i]: how often element i of an n-element range is read (and written).
int replay_elementwise(int64_t n, int vec, int32_t* visits, int64_t* info) {
  const ci::Launch l = ci::elementwise_launch(n, vec);
  write_launch(l, info);
  if (!valid(l, ci::kBlockThreads)) return kBadLaunch;
  each_thread(l, [&](ci::Dim2 block, ci::Dim2 thread) {
    ci::elementwise_visit(
        l, block, thread, n, vec,
        [&](int64_t p) { for (int e = 0; e < vec; ++e) ++visits[p * vec + e]; },
        [&](int64_t i) { ++visits[i]; });
  });
  return 0;
}

// x_visits [rows, 2d] and y_visits [rows, d] for `vec`-element packets along d.
int replay_gated(int64_t rows, int64_t d, int vec, int32_t* x_visits, int32_t* y_visits,
                 int64_t* info) {
  const ci::Launch l = ci::gated_launch(rows, d / vec);
  write_launch(l, info);
  if (!valid(l, ci::kBlockThreads)) return kBadLaunch;
  int status = 0;
  each_thread(l, [&](ci::Dim2 block, ci::Dim2 thread) {
    ci::gated_visit(l, block, thread, rows, d / vec, [&](int64_t row, int64_t p) {
      const ci::GatedOffsets at = ci::gated_offsets(row, p * vec, d);
      if (at.a % vec || at.b % vec || at.y % vec) status = kMisaligned;
      for (int e = 0; e < vec; ++e) ++x_visits[at.a + e], ++x_visits[at.b + e], ++y_visits[at.y + e];
    });
  });
  return status;
}

// x_reads [rows, cols]: how often each element of X is loaded by RMSNorm forward (backward:
// `backward` != 0; then also dY, same pattern). group_of_row[row]: the row group that took it.
// info: grid.x, grid.y, block.x, block.y, groups, cached.
int replay_rows(int64_t rows, int64_t cols, int vec, int backward, int32_t* x_reads,
                int64_t* group_of_row, int64_t* info) {
  const int64_t ppr = cols / vec;
  const ci::RowLaunch r = backward ? ci::rms_backward_launch(rows, ppr)
                                   : ci::rms_forward_launch(rows, ppr);
  const int kept = backward ? ci::kRowBackwardPackets : ci::kRowForwardPackets;
  write_launch(r.launch, info);
  info[4] = r.groups, info[5] = r.cached;
  if (!valid(r.launch, backward ? ci::kRowBackwardThreads : ci::kRowForwardThreads)) return kBadLaunch;
  auto read = [&](int64_t row, int64_t p) { for (int e = 0; e < vec; ++e) ++x_reads[row * cols + p * vec + e]; };
  int status = 0;
  for (uint32_t bx = 0; bx < r.launch.grid.x; ++bx) {
    std::vector<int64_t> steps(r.launch.block.x * r.launch.block.y, 0);
    for (uint32_t ty = 0; ty < r.launch.block.y; ++ty) {
      for (uint32_t tx = 0; tx < r.launch.block.x; ++tx) {
        const ci::Dim2 block{bx, 0}, thread{tx, ty};
        ci::row_visit(r.launch, block, thread, rows, r.groups, [&](int64_t row, bool live, bool) {
          ++steps[ty * r.launch.block.x + tx];
          if (!live) return;
          group_of_row[row] = int64_t(bx) * r.launch.block.y + ty;
          if (r.cached) {
            for (int k = 0; k < kept; ++k) {
              const int64_t p = ci::row_packet(tx, r.launch.block.x, k);
              if (p < ppr) read(row, p);
            }
          } else {
            for (int pass = 0; pass < 2; ++pass)  // the sums, then the output
              for (int64_t p = tx; p < ppr; p += r.launch.block.x) read(row, p);
          }
        });
      }
    }
    for (int64_t s : steps) if (s != steps[0]) status = kNonUniformLoop;
  }
  return status;
}

// reads [groups, cols] of the partial dW rows, writes [cols] of dW, by the dW column sum.
int replay_dw_sum(int64_t groups, int64_t cols, int32_t* reads, int32_t* writes, int64_t* info) {
  const ci::Launch l = ci::dw_sum_launch(cols);
  write_launch(l, info);
  if (!valid(l, ci::kDwColumns * ci::kDwLanes)) return kBadLaunch;
  each_thread(l, [&](ci::Dim2 block, ci::Dim2 thread) {
    ci::column_tiles(l, block, cols, [&](int64_t first) {
      const int64_t j = first + thread.x;
      if (j >= cols) return;
      ci::lane_groups(l, thread, groups, [&](int64_t g) { ++reads[g * cols + j]; });
      if (thread.y == 0) ++writes[j];
    });
  });
  return 0;
}

// ---- one thread of a launch too large to replay whole (beyond 2^31 elements) ----------------

void gated_offsets(int64_t row, int64_t col, int64_t d, int64_t* out) {
  const ci::GatedOffsets at = ci::gated_offsets(row, col, d);
  out[0] = at.a, out[1] = at.b, out[2] = at.y;
}

// The launch, and for thread (block, thread): its number of visits and its last (row, packet).
void gated_thread(int64_t rows, int64_t ppr, uint32_t bx, uint32_t by, uint32_t tx, uint32_t ty,
                  int64_t* info, int64_t* count, int64_t* last) {
  const ci::Launch l = ci::gated_launch(rows, ppr);
  write_launch(l, info);
  *count = 0;
  ci::gated_visit(l, {bx, by}, {tx, ty}, rows, ppr, [&](int64_t row, int64_t p) {
    ++*count, last[0] = row, last[1] = p;
  });
}

void elementwise_thread(int64_t n, int vec, uint32_t bx, uint32_t tx, int64_t* info,
                        int64_t* count, int64_t* last) {
  const ci::Launch l = ci::elementwise_launch(n, vec);
  write_launch(l, info);
  *count = 0;
  ci::elementwise_visit(
      l, {bx, 0}, {tx, 0}, n, vec, [&](int64_t p) { ++*count, *last = p * vec + vec - 1; },
      [&](int64_t i) { ++*count, *last = i; });
}

// The rows of one row group (live rows only), their count and the last one.
void rows_thread(int64_t rows, int64_t ppr, int backward, uint32_t bx, uint32_t ty, int64_t* info,
                 int64_t* count, int64_t* last) {
  const ci::RowLaunch r = backward ? ci::rms_backward_launch(rows, ppr)
                                   : ci::rms_forward_launch(rows, ppr);
  write_launch(r.launch, info);
  info[4] = r.groups, info[5] = r.cached;
  *count = 0;
  ci::row_visit(r.launch, {bx, 0}, {0, ty}, rows, r.groups, [&](int64_t row, bool live, bool) {
    if (live) ++*count, *last = row;
  });
}

}  // extern "C"

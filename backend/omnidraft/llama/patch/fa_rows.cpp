// fa_rows: flash attention for a few query rows (a decode, a verification pass, a prompt read 8 tokens a pass),
// vectorized over the KV cells, each block of the cache shared by the query heads that read it.  Called from
// ops.cpp's flash attention (fa-hook.patch) in place of ggml's one_chunk for passes of 1..63 rows.
//
// Why.  one_chunk takes one (query row, head) item at a time and, per KV cell, calls a dot product that widens K
// from f16 again, a scalar expf, and a multiply-add into an f16 accumulator that it widens and narrows again.  On a
// 2-core Zen 4 the 1.5B's one-token decode took 49 ms at 2,048 cells of context against 35 ms at 64, and each extra
// verified row about 12 ms more (T(5) 2.2-2.45x T(1)): long prompts and chat histories made drafting a loss.
//
// What.  A block of CELLS cells at a time: its K and V rows widened to f32 once for all the items of their KV head
// (a Qwen2.5 row has 6 query heads a KV head), then per item the block's scores (dot products over LANES running
// sums), their max, their exponentials (ggml's vectorized softmax), and V summed with those weights, LANES values at
// a time in registers: the online softmax carried from block to block, accumulators in f32.  A block's mask is
// read once for the rows that share it, and the next block's rows are asked of memory while this one is computed
// (a long context's cache lies in DRAM).
//
// Exactness.  An item's arithmetic depends on its query row, the cells it may attend to and the block grid (CELLS
// cells from cell 0), never on the batch, the other items or the thread that takes it.  Cells it may not attend to
// (masked, or past the cache a shorter pass sees) score -inf, weigh exactly 0 and are skipped, and a block with none
// leaves its state as it was; so a row of a batch has the bits of the same row decoded alone.  The sums run in
// another order than one_chunk's, and in f32 where one_chunk accumulates f16 V in f16, so results differ from it by
// rounding (tests/test_fa_rows.py bounds that against llama.cpp's plain attention, as for one_chunk).
#include "sbk.h"

#ifndef SBK_STANDALONE
#include "ggml.h"
#include "ggml-cpu.h"
#include "ggml-cpu-impl.h"
#include "simd-mappings.h"
#include "vec.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <vector>

// 64-byte vectors passed between inline functions of this file: GCC's note that their ABI changed in GCC 4.6 (and
// that AVX2 builds pass them otherwise than AVX-512 ones) concerns no call across files
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wpsabi"
#endif

namespace {

// Cells a block: their K and V rows in f32 (2 x 8 KB at DK = DV = 128) stay in L1 while every item of their KV head
// reads them.  64 cells (2 x 32 KB, in L2) timed the same on a 2-core Zen 4 (the 1.5B's 5-row pass at 3,072 cells
// 103-104 ms either way, its attention about half of it, the FMA loops at a fifth to an eighth of the FMA units'
// rate, each cell's 16-lane sum then ~25 instructions beside 8 FMAs: hence hsum8).
constexpr int64_t CELLS = 16;
// Items sweeping the cache together; a chunk with more takes them in groups (each group sweeps on its own).
constexpr int64_t ITEMS = 64;
// Running sums a dot product keeps (one 512-bit or two 256-bit vectors); DK and DV must be multiples of it.
constexpr int LANES = 16;
static_assert(CELLS == 16, "a block's scores are one 16-lane vector, its open cells 16 bits");
// Floats a cache line; CELLS * DK and CELLS * DV keep every later scratch row on a line when the first is.
constexpr size_t LINE_FLOATS = 64 / sizeof(float);

inline float * line_aligned(float * p) {
    return (float *) (((uintptr_t) p + 63) & ~(uintptr_t) 63);
}

// One item's running state and where its data lie.
struct item {
    float S, M, slope;
    const float * q;         // its query row (f32)
    const ggml_fp16_t * mp;  // its mask row (nullptr: none)
    const char * k_head;     // its KV head's first cell
    const char * v_head;
    float * vkq;             // DV floats: the softmax-weighted sum of V so far, over S
    int64_t i1, i2, i3;
    int64_t row;             // its mask row among the group's (mask_rows)
};

// A block's cells, one bit each in an open-lanes word.
constexpr uint32_t ALL_LANES = (1u << 16) - 1;

// GCC's vector extensions: 16 floats a value, one zmm with AVX-512, two ymm with AVX2, four q registers on NEON;
// the same arithmetic lane for lane on every target.
typedef float v16f __attribute__((vector_size(64)));
typedef float v8f __attribute__((vector_size(32)));
typedef float v4f __attribute__((vector_size(16)));

inline v16f load16(const float * p) {
    v16f v;
    memcpy(&v, p, sizeof v);
    return v;
}

inline void store16(float * p, v16f v) { memcpy(p, &v, sizeof v); }

// The 16 lanes' sum in a fixed tree (lane subscripts: no vector's address taken, so GCC keeps them in registers).
inline float hsum(v16f a) {
    return (((a[0] + a[8]) + (a[4] + a[12])) + ((a[2] + a[10]) + (a[6] + a[14]))) +
           (((a[1] + a[9]) + (a[5] + a[13])) + ((a[3] + a[11]) + (a[7] + a[15])));
}

// The largest of 16 lanes (exact in any order): halves, quarters, pairs, then the last two.
inline float hmax(v16f a) {
#if defined(__clang__) || (defined(__GNUC__) && __GNUC__ >= 12)
    v16f h = a, t;
    t = __builtin_shufflevector(h, h, 8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7);
    h = h > t ? h : t;
    t = __builtin_shufflevector(h, h, 4, 5, 6, 7, 0, 1, 2, 3, 12, 13, 14, 15, 8, 9, 10, 11);
    h = h > t ? h : t;
    t = __builtin_shufflevector(h, h, 2, 3, 0, 1, 6, 7, 4, 5, 10, 11, 8, 9, 14, 15, 12, 13);
    h = h > t ? h : t;
    return std::max(h[0], h[1]);
#else
    float m = a[0];
    for (int c = 1; c < 16; c++) {
        m = std::max(m, a[c]);
    }
    return m;
#endif
}

// hsum of 8 vectors at once, the same tree for each (so the same sums, bit for bit): lanes l and l + 8, then l + 4,
// l + 2, l + 1 added level by level, two cells' halves side by side in one vector, so that 8 cells take 8 adds and
// 16 two-source shuffles (vpermt2ps with AVX-512) where hsum takes ~25 scalar instructions a cell.  Compilers
// without __builtin_shufflevector (GCC before 12) take hsum one cell at a time.
#if defined(__clang__) || (defined(__GNUC__) && __GNUC__ >= 12)
#define SHUF __builtin_shufflevector
inline v16f halves(v16f a, v16f b) {  // [a 0-7 | b 0-7] + [a 8-15 | b 8-15]
    return SHUF(a, b, 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23) +
           SHUF(a, b, 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31);
}
inline v16f quarters(v16f a, v16f b) {  // each 8-lane half: lanes 0-3 + lanes 4-7, a's halves then b's
    return SHUF(a, b, 0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27) +
           SHUF(a, b, 4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30, 31);
}
inline v16f pairs(v16f a, v16f b) {  // each 4-lane quarter: lanes 0-1 + lanes 2-3
    return SHUF(a, b, 0, 1, 4, 5, 8, 9, 12, 13, 16, 17, 20, 21, 24, 25, 28, 29) +
           SHUF(a, b, 2, 3, 6, 7, 10, 11, 14, 15, 18, 19, 22, 23, 26, 27, 30, 31);
}
inline void hsum8(const v16f * a, float * out) {
    const v16f h01 = halves(a[0], a[1]), h23 = halves(a[2], a[3]), h45 = halves(a[4], a[5]), h67 = halves(a[6], a[7]);
    const v16f q0 = quarters(h01, h23), q1 = quarters(h45, h67);  // cell c's 4 partial sums at lanes 4c'..4c'+3
    const v16f w = pairs(q0, q1);                                    // cell c's 2 at lanes 2c, 2c + 1
    const v16f e = SHUF(w, w, 0, 2, 4, 6, 8, 10, 12, 14, 0, 2, 4, 6, 8, 10, 12, 14);
    const v16f o = SHUF(w, w, 1, 3, 5, 7, 9, 11, 13, 15, 1, 3, 5, 7, 9, 11, 13, 15);
    const v16f t = e + o;
    for (int g = 0; g < 8; g++) {
        out[g] = t[g];
    }
}
#undef SHUF
#else
inline void hsum8(const v16f * a, float * out) {
    for (int g = 0; g < 8; g++) {
        out[g] = hsum(a[g]);
    }
}
#endif

// Scores of GROUP cells' K rows (DK apart) against q: each cell its own 16 running sums over q's values in order,
// then hsum's tree (hsum8).  GROUP independent chains keep both FMA pipes busy; a cell's score is the same in any group.
constexpr int GROUP = 8;  // hsum8's width
inline void dots(const float * q, const float * k, int64_t stride, int64_t DK, float * out) {
    v16f a[GROUP] = {};
    for (int64_t i = 0; i < DK; i += LANES) {
        const v16f x = load16(q + i);
#pragma GCC unroll 8
        for (int g = 0; g < GROUP; g++) {
            a[g] += x * load16(k + g * stride + i);
        }
    }
    hsum8(a, out);
}

// vkq = vkq * ms + sum over the block's cells of p[c] * V[c], in cell order, the D values held in registers
// (D / 16 vectors: 8 for D = 128) across the cells.  SKIP (a block with masked cells): cells of weight 0 are skipped,
// which leaves every sum as it would be whatever a masked cell holds; a block open throughout adds every cell.
template <bool SKIP, int D>
inline void accumulate_d(float * vkq, float ms, const float * p, const float * vf, int64_t stride) {
    constexpr int NV = D / LANES;
    v16f a[NV];
#pragma GCC unroll 16
    for (int i = 0; i < NV; i++) {
        a[i] = ms == 1.0f ? load16(vkq + i * LANES) : load16(vkq + i * LANES) * ms;  // the same bits either way
    }
    for (int64_t c = 0; c < CELLS; c++) {
        if (SKIP && p[c] == 0.0f) {
            continue;
        }
        const v16f pc = v16f{} + p[c];
        const float * v = vf + c * stride;
#pragma GCC unroll 16
        for (int i = 0; i < NV; i++) {
            a[i] += pc * load16(v + i * LANES);
        }
    }
#pragma GCC unroll 16
    for (int i = 0; i < NV; i++) {
        store16(vkq + i * LANES, a[i]);
    }
}

// Any other width (a multiple of LANES): the same sums, D / 16 vectors at a time through memory.  SKIP: a block with
// masked cells (their weights 0, which skipping keeps exact whatever the cell holds); without, every cell is added.
template <bool SKIP>
inline void accumulate(float * vkq, float ms, const float * p, const float * vf, int64_t stride, int64_t DV) {
    switch (DV) {
        case 64: return accumulate_d<SKIP, 64>(vkq, ms, p, vf, stride);
        case 128: return accumulate_d<SKIP, 128>(vkq, ms, p, vf, stride);
        case 256: return accumulate_d<SKIP, 256>(vkq, ms, p, vf, stride);
        default: break;
    }
    for (int64_t d = 0; d < DV; d += LANES) {
        v16f a = load16(vkq + d) * ms;
        for (int64_t c = 0; c < CELLS; c++) {
            if (!SKIP || p[c] != 0.0f) {
                a += (v16f{} + p[c]) * load16(vf + c * stride + d);
            }
        }
        store16(vkq + d, a);
    }
}

// The group's distinct mask rows (a row's mask is shared by its heads): mrows[u], and each item's u in t.row.
inline int64_t mask_rows(item * it, int64_t ng, const ggml_fp16_t ** mrows) {
    int64_t n = 0;
    for (int64_t j = 0; j < ng; j++) {
        int64_t u = 0;
        while (u < n && mrows[u] != it[j].mp) {
            u++;
        }
        if (u == n) {
            mrows[n++] = it[j].mp;
        }
        it[j].row = u;
    }
    return n;
}

// One mask row over the block's cells (-inf where masked or past the nc cells the pass sees; 0 without a mask),
// and the open cells as bits.
inline uint32_t mask_block(const ggml_fp16_t * mp, int64_t c0, int64_t nc, float * out) {
    uint32_t open = 0;
    for (int64_t c = 0; c < CELLS; c++) {
        out[c] = c >= nc ? -INFINITY : mp ? GGML_CPU_FP16_TO_FP32(mp[c0 + c]) : 0.0f;
        open |= (uint32_t) (out[c] != -INFINITY) << c;
    }
    return open;
}

// An item's block scores in s: its dot products (as dots left them, in s) scaled, soft-capped where the model
// says, plus its slope times the mask; -inf where masked.  Returns the running max with them.
inline float scores(float * s, const float * mrow, float slope, float scale, float softcap, float M) {
    v16f x = load16(s);
    if (softcap != 0.0f) {
        for (int c = 0; c < 16; c++) {
            x[c] = softcap * tanhf(x[c] * scale);
        }
    } else {
        x = x * scale;
    }
    const v16f mv = load16(mrow);
    const v16f ninf = v16f{} - INFINITY;
    const v16f y = mv == ninf ? ninf : x + mv * slope;
    store16(s, y);
    return std::max(M, hmax(y));
}

// A block's rows of K or V, from the f16 cache to f32 (f32 caches are read where they lie).
inline void widen_rows(const char * head, size_t stride, int64_t c0, int64_t n, int64_t D, float * out) {
    for (int64_t c = 0; c < n; c++) {
        ggml_cpu_fp16_to_fp32((const ggml_fp16_t *) (head + (c0 + c) * stride), out + c * D, D);
    }
}

// n rows of a KV head's cache (row_bytes each, stride apart) asked of memory ahead of their block: the cache of a
// long context lies in DRAM, and without this each block's widening waited for it (2-core Zen 4, 1.5B shapes, 2,048
// cells: a one-row pass's attention 7.9 ms from DRAM against 4.2 from cache).  Only timing changes, never a value.
inline void prefetch_rows(const char * first, size_t stride, int64_t n, size_t row_bytes) {
    for (int64_t c = 0; c < n; c++) {
        for (size_t b = 0; b < row_bytes; b += 64) {
            __builtin_prefetch(first + c * stride + b, 0, 2);
        }
    }
}

// OMNIDRAFT_FA_ROWS=0 leaves the items to one_chunk (rows still invariant): the A/B switch, read at every call.
bool fa_rows_on() {
    const char * env = getenv("OMNIDRAFT_FA_ROWS");
    return !(env != NULL && strcmp(env, "0") == 0);
}

}  // namespace

extern "C" int ggml_sbk_fa_rows_takes(const ggml_tensor * dst) {
    const ggml_tensor * q = dst->src[0];
    const ggml_tensor * k = dst->src[1];
    const ggml_tensor * v = dst->src[2];
    const ggml_tensor * sinks = dst->src[4];
    const bool types = q->type == GGML_TYPE_F32 && (k->type == GGML_TYPE_F32 || k->type == GGML_TYPE_F16) &&
                       v->type == k->type;
    return types && sinks == nullptr && k->ne[0] % LANES == 0 && v->ne[0] % LANES == 0 && q->nb[0] == sizeof(float) &&
           ggml_sbk_fa_rows_invariant() && fa_rows_on();
}

extern "C" void ggml_sbk_fa_rows(const ggml_compute_params * params, ggml_tensor * dst, int64_t ir0, int64_t ir1) {
    const ggml_tensor * q = dst->src[0];
    const ggml_tensor * k = dst->src[1];
    const ggml_tensor * v = dst->src[2];
    const ggml_tensor * mask = dst->src[3];

    GGML_TENSOR_LOCALS(int64_t, neq, q, ne)
    GGML_TENSOR_LOCALS(size_t, nbq, q, nb)
    GGML_TENSOR_LOCALS(int64_t, nek, k, ne)
    GGML_TENSOR_LOCALS(size_t, nbk, k, nb)
    GGML_TENSOR_LOCALS(int64_t, nev, v, ne)
    GGML_TENSOR_LOCALS(size_t, nbv, v, nb)
    GGML_TENSOR_LOCALS(int64_t, ne, dst, ne)
    GGML_TENSOR_LOCALS(size_t, nb, dst, nb)

    const int64_t DK = nek0;
    const int64_t DV = nev0;
    const int64_t rk2 = neq2 / nek2, rk3 = neq3 / nek3;
    const int64_t rv2 = neq2 / nev2, rv3 = neq3 / nev3;

    // the op's parameters, read as one_chunk reads them
    float scale = 1.0f;
    float max_bias = 0.0f;
    float logit_softcap = 0.0f;
    memcpy(&scale, (float *) dst->op_params + 0, sizeof(float));
    memcpy(&max_bias, (float *) dst->op_params + 1, sizeof(float));
    memcpy(&logit_softcap, (float *) dst->op_params + 2, sizeof(float));
    if (logit_softcap != 0) {
        scale /= logit_softcap;
    }
    const uint32_t n_head = neq2;
    const uint32_t n_head_log2 = 1u << (uint32_t) floor(log2(n_head));
    const float m0 = powf(2.0f, -(max_bias) / n_head_log2);
    const float m1 = powf(2.0f, -(max_bias / 2.0f) / n_head_log2);

    // per thread: the block's K and V in f32, one item's scores and weights, every item's accumulator; from a
    // 64-byte line on, since a vector's load that straddles two lines costs two (malloc gives 16 bytes)
    thread_local std::vector<float> scratch;
    const size_t need = CELLS * (DK + DV) + 2 * CELLS + ITEMS * DV + ITEMS * CELLS + LINE_FLOATS;
    if (scratch.size() < need) {
        scratch.resize(need);
    }
    float * kf = line_aligned(scratch.data());
    float * vf = kf + CELLS * DK;
    float * s = vf + CELLS * DV;
    float * p = s + CELLS;
    float * acc = p + CELLS;
    float * mtab = acc + ITEMS * DV;  // the block's mask rows
    item it[ITEMS];
    const ggml_fp16_t * mrows[ITEMS];
    uint32_t open[ITEMS];
    const bool f32 = k->type == GGML_TYPE_F32;

    for (int64_t g0 = ir0; g0 < ir1; g0 += ITEMS) {
        const int64_t ng = std::min(ITEMS, ir1 - g0);
        for (int64_t j = 0; j < ng; j++) {  // item ir's indices, as one_chunk takes them
            const int64_t ir = g0 + j;
            item & t = it[j];
            t.i3 = ir / (neq2 * neq1);
            t.i2 = (ir - t.i3 * neq2 * neq1) / neq1;
            t.i1 = (ir - t.i3 * neq2 * neq1 - t.i2 * neq1);
            const uint32_t h = t.i2;
            t.slope = (max_bias > 0.0f) ? h < n_head_log2 ? powf(m0, h + 1) : powf(m1, 2 * (h - n_head_log2) + 1)
                                        : 1.0f;
            t.S = 0.0f;
            t.M = -INFINITY;
            t.q = (const float *) ((const char *) q->data + t.i1 * nbq1 + t.i2 * nbq2 + t.i3 * nbq3);
            t.mp = mask ? (const ggml_fp16_t *) ((const char *) mask->data + t.i1 * mask->nb[1] +
                                                 (t.i2 % mask->ne[2]) * mask->nb[2] + (t.i3 % mask->ne[3]) * mask->nb[3])
                        : nullptr;
            t.k_head = (const char *) k->data + (t.i2 / rk2) * nbk2 + (t.i3 / rk3) * nbk3;
            t.v_head = (const char *) v->data + (t.i2 / rv2) * nbv2 + (t.i3 / rv3) * nbv3;
            t.vkq = acc + j * DV;
            memset(t.vkq, 0, DV * sizeof(float));
        }
        const int64_t nrow = mask_rows(it, ng, mrows);
        for (int64_t c0 = 0; c0 < nek1; c0 += CELLS) {
            const int64_t nc = std::min(CELLS, nek1 - c0);
            for (int64_t u = 0; u < nrow; u++) {  // the mask first, once a row: masked and missing cells score -inf
                open[u] = mask_block(mrows[u], c0, nc, mtab + u * CELLS);
            }
            const char * widened_k = nullptr;  // whose K and V rows kf and vf hold (items come grouped by KV head)
            const char * widened_v = nullptr;
            const char * fetched = nullptr;     // whose next block is on its way from memory
            for (int64_t j = 0; j < ng; j++) {
                item & t = it[j];
                if (fetched != t.k_head && c0 + CELLS < nek1) {
                    const int64_t n_next = std::min(CELLS, nek1 - c0 - CELLS);
                    prefetch_rows(t.k_head + (c0 + CELLS) * nbk1, nbk1, n_next, DK * ggml_type_size(k->type));
                    prefetch_rows(t.v_head + (c0 + CELLS) * nbv1, nbv1, n_next, DV * ggml_type_size(v->type));
                    fetched = t.k_head;
                }
                const uint32_t lanes = open[t.row];
                if (lanes == 0) {
                    continue;  // nothing to attend to in this block: the state is what a skip leaves
                }
                // f32 rows are read where they lie; f16 rows are widened once for the items of their KV head
                const float * kr = f32 ? (const float *) (t.k_head + c0 * nbk1) : kf;
                const float * vr = f32 ? (const float *) (t.v_head + c0 * nbv1) : vf;
                const int64_t ks = f32 ? (int64_t) (nbk1 / sizeof(float)) : DK;
                const int64_t vs = f32 ? (int64_t) (nbv1 / sizeof(float)) : DV;
                if (!f32 && (widened_k != t.k_head || widened_v != t.v_head)) {
                    widen_rows(t.k_head, nbk1, c0, nc, DK, kf);
                    widen_rows(t.v_head, nbv1, c0, nc, DV, vf);
                    widened_k = t.k_head;
                    widened_v = t.v_head;
                }
                for (int64_t c = 0; c < CELLS; c += GROUP) {
                    if (((lanes >> c) & 0xff) == 0) {
                        continue;  // its scores are all masked below
                    }
                    // rows past nc hold earlier data, whose scores are dropped; an f32 group that crosses nc is
                    // copied first, so that no row past the cache's view is read
                    const float * kg = kr + c * ks;
                    int64_t kgs = ks;
                    if (f32 && c + GROUP > nc) {
                        for (int64_t g = 0; g < nc - c; g++) {
                            memcpy(kf + g * DK, kg + g * ks, DK * sizeof(float));
                        }
                        kg = kf;
                        kgs = DK;
                    }
                    dots(t.q, kg, kgs, DK, s + c);
                }
                const float M = scores(s, mtab + t.row * CELLS, t.slope, scale, logit_softcap, t.M);
                // 0 at the first block attended to (M was -inf); exactly 1 while the max holds, as expf(0) is
                const float ms = M == t.M ? 1.0f : expf(t.M - M);
                const float sum = (float) ggml_vec_soft_max_f32(CELLS, p, s, M);
                t.M = M;
                t.S = t.S * ms + sum;
                if (lanes == ALL_LANES) {
                    accumulate<false>(t.vkq, ms, p, vr, vs, DV);
                } else {
                    accumulate<true>(t.vkq, ms, p, vr, vs, DV);
                }
            }
        }
        for (int64_t j = 0; j < ng; j++) {
            item & t = it[j];
            const float S_inv = t.S == 0.0f ? 0.0f : 1.0f / t.S;
            ggml_vec_scale_f32(DV, t.vkq, S_inv);
            memcpy((char *) dst->data + (t.i3 * ne2 * ne1 + t.i2 + t.i1 * ne1) * nb1, t.vkq, nb1);
        }
    }
    (void) params;
}
#endif  // SBK_STANDALONE

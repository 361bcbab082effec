// sbq6x8: omnidraft's small-batch Q6_K product over ggml's 8-row interleave (block_q6_Kx8, interleave 8),
// x86 AVX2 and up.  Q6_K is about a third of a Q4_K_M file's bytes; with this file the fast mode repacks it
// like Q4_K (sbkx8.cpp) instead of leaving it to the plain-layout kernel (sbk.cpp).
//
// Why.  In the plain layout every weight row pays, per 32 values and activation row, a scale shuffle, a
// vpmaddubsw and a vpmaddwd, then a horizontal sum per row.  In the interleave one vector holds 8 values of
// 8 rows (zmm) or 4 rows (ymm), so the weights' 6-bit unpacking and the scale vectors are built once per
// block for every activation row, and each activation row pays, per 128 weight bytes, two vpdpbusd, one
// pack to 16 bits and one vpdpwssd by the scales (3 multiplies where the plain layout pays 4).  Streaming a
// 158 MB stack of the 1.5B's ffn_down (one thread, 2-core Zen 4, AVX-512 VNNI): 1 / 2 / 8 rows 6.0 / 6.2 /
// 16.1 ms against 6.0 / 11.3 / 22.5 for sbk.cpp.  ggml has no x86 kernel for this layout (its generic C
// gemv/gemm would run), so the repack is only chosen where this kernel is compiled in (sbq6x8-hook.patch).
//
// Exactness.  As in sbk.cpp and sbkx8.cpp: integer sums per block (exact, any order: each row's block
// sum is one integer), then one float multiply-add per block and row, in block order.  Every output gets
// the same instructions whatever n is, so batched rows are bit-identical to one-row decoding; the zmm and
// ymm codes (and AVX2's vpmaddubsw + vpmaddwd for vpdpbusd) give the same integers, hence the same floats.
//
// Layout (ggml-cpu/repack.h, make_block_q6_Kx8 with interleave 8).  One block of 8 rows x 256 values,
// 1680 bytes: fp16 d[8]; int8 scales[128], scale g of row r at 8g + r; ql[1024] and qh[512]: chunk k of
// 8 bytes is row k % 8's bytes 8*(k/8).. of its plain ql / qh.  So the 64 bytes at ql + 64m hold every
// row's ql bytes 8m..8m+7, and likewise for qh.  Plain Q6_K: ql byte 64c + 32h + l holds value
// 128c + 32h + l (low nibble) and 128c + 64 + 32h + l (high nibble); qh byte 32c + l holds the top two
// bits of values 128c + l, +32, +64, +96 (bits 0-1, 2-3, 4-5, 6-7); value = d * scale[v/16] * (q - 32).
// Activations: plain block_q8_K rows (float d, 256 int8, int16 sums of each 16); the -32 goes through those
// sums, as in sbk.cpp.
#include "sbk.h"

#include <string.h>

#if defined(__AVX2__) && defined(__F16C__) && defined(__FMA__)
#include <immintrin.h>
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
#define SBQ6X8_VARIANT 3
#elif defined(__AVXVNNI__)
#define SBQ6X8_VARIANT 2
#else
#define SBQ6X8_VARIANT 1
#endif
#else
#define SBQ6X8_VARIANT 0
#endif
// 512-bit registers where AVX-512 VNNI and BW are there (one vector = 8 values of all 8 rows); -DSBQ6X8_YMM
// keeps the 256-bit code (two halves of 4 rows), which must give the same bits.
#if SBQ6X8_VARIANT == 3 && defined(__AVX512F__) && defined(__AVX512BW__) && !defined(SBQ6X8_YMM)
#define SBQ6X8_ZMM 1
#else
#define SBQ6X8_ZMM 0
#endif

#if SBQ6X8_VARIANT > 0
namespace {

constexpr int X8_BYTES = 1680;  // block_q6_Kx8
constexpr int SC = 16, QL = 144, QH = 1168;  // offsets of scales, ql, qh
constexpr int Q8K_BYTES = 292;
// Prefetch 16 KB ahead into L2.  Streaming a 158 MB stack of the 1.5B's ffn_down matrices (one thread, 2-core
// Zen 4), 1 row: 4 KB into L1 (sbkx8's choice) 12.0 ms, 4 KB into L2 7.7, 8 KB 6.7, 16 KB 6.0 (plain sbk 6.0);
// 8 rows 20.1 / 15.7 / 16.0 / 16.1 (plain 22.5).  Held in L3, the same kernel is 1.3x the plain one at 1 row,
// so into L1 the block's scattered chunk loads (ql, qh and the scales at once) wait on memory.
#ifndef SBQ6X8_PREFETCH
#define SBQ6X8_PREFETCH 16384
#endif
#ifndef SBQ6X8_HINT
#define SBQ6X8_HINT _MM_HINT_T2
#endif
#define SBQ6X8_UNROLL _Pragma("GCC unroll 8")

inline __m128i load128(const void * p) { return _mm_loadu_si128((const __m128i *) p); }

inline int64_t bytes8(const uint8_t * p) {
    int64_t v;
    memcpy(&v, p, 8);
    return v;
}

#if SBQ6X8_ZMM
// ---------------------------------------------------------------- 512-bit: 8 rows a vector
// Lanes.  A weight vector holds 8 bytes of each row: 32-bit lanes 2r, 2r+1 (zmm) are row r's.  vpdpbusd sums
// 4 products per lane (at most 4 * 63 * 128 = 32,256, so exact in 16 bits); the vectors of chunks t and t+1
// (the same scale group) are packed to 16 bits (vpackssdw, within 128-bit lanes) and multiplied by the
// scales with vpdpwssd: 32-bit lane 4k + i of a sum then holds row 2k + (i & 1) (chunk t for i < 2, t+1
// for i >= 2).  Half as many scale multiplies as vpmaddubsw + vpmaddwd per chunk, which is where the plain
// layout spends its time.  Each table is built per half h (rows 4h..4h+3) and the halves widened together.
// (The 256-bit code further down sums its lanes otherwise and has its own tables.)
// Per block, the two lanes of each row are added (an exact integer: the row's block sum), then one float
// multiply-add per row.
struct tables {
    int8_t sidx[2][16];  // half h: group g's 8 scale bytes -> int16 lane 8k' + j = row 4h + 2k' + ((j >> 1) & 1)
    int8_t oidx[2][2][16];  // half h, part p: the -32 offset's scale bytes (see offset_bytes)
};

constexpr tables make_tables() {
    tables t{};
    for (int h = 0; h < 2; h++) {
        for (int k = 0; k < 2; k++) {
            for (int j = 0; j < 8; j++) {
                t.sidx[h][8 * k + j] = (int8_t) (4 * h + 2 * k + ((j >> 1) & 1));
            }
            // int32 lane 4k + i pairs row 4h + 2k + (i & 1)'s scales of groups 2m, 2m + 1 (m = 2u + (i >> 1))
            // with the activations' sums of those groups: byte 2(4k + i) + e is scale 8 * (2(i >> 1) + e) +
            // row of the 32 bytes at scales + 32u; part p takes the bytes of the 16 with i >> 1 == p
            for (int i = 0; i < 4; i++) {
                for (int e = 0; e < 2; e++) {
                    const int8_t src = (int8_t) (8 * e + 4 * h + 2 * k + (i & 1));
                    for (int part = 0; part < 2; part++) {
                        t.oidx[h][part][2 * (4 * k + i) + e] = (i >> 1) == part ? src : (int8_t) 0x80;
                    }
                }
            }
        }
    }
    return t;
}
alignas(16) constexpr tables T = make_tables();

// Half h's scale bytes for group g (widened to int16 by the caller), lanes as above.
inline __m128i scale_bytes(const int8_t * sc, int g, int h) {
    return _mm_shuffle_epi8(_mm_loadl_epi64((const __m128i *) (sc + 8 * g)), load128(T.sidx[h]));
}

// Half h's -32 offset scales for groups 4u..4u+3 (int8; the caller widens and multiplies by -32).
inline __m128i offset_bytes(const int8_t * sc, int u, int h) {
    return _mm_or_si128(_mm_shuffle_epi8(load128(sc + 32 * u), load128(T.oidx[h][0])),
                        _mm_shuffle_epi8(load128(sc + 32 * u + 16), load128(T.oidx[h][1])));
}

// The activations' sums for the offset: lane 4k + i holds the pair of groups 2(2u + (i >> 1)), +1.
alignas(64) const int32_t BIDX[4][16] = {{0, 0, 1, 1, 0, 0, 1, 1, 0, 0, 1, 1, 0, 0, 1, 1},
                                         {2, 2, 3, 3, 2, 2, 3, 3, 2, 2, 3, 3, 2, 2, 3, 3},
                                         {4, 4, 5, 5, 4, 4, 5, 5, 4, 4, 5, 5, 4, 4, 5, 5},
                                         {6, 6, 7, 7, 6, 6, 7, 7, 6, 6, 7, 7, 6, 6, 7, 7}};

// The block's 6-bit weights for ql chunks 8c + t, 8c + 4 + t and qh chunk 4c + t: q[k] (k = 0..3) holds values
// 128c + 32k + 8t + (0..7) of each row, of scale group 8c + 2k + t/2.
inline void weights(const uint8_t * x, int c, int t, __m512i * q) {
    const __m512i m4 = _mm512_set1_epi8(0x0F), m30 = _mm512_set1_epi8(0x30);
    const __m512i l0 = _mm512_loadu_si512((const void *) (x + QL + 64 * (8 * c + t)));
    const __m512i l1 = _mm512_loadu_si512((const void *) (x + QL + 64 * (8 * c + 4 + t)));
    const __m512i h = _mm512_loadu_si512((const void *) (x + QH + 64 * (4 * c + t)));
    q[0] = _mm512_or_si512(_mm512_and_si512(l0, m4), _mm512_and_si512(_mm512_slli_epi16(h, 4), m30));
    q[1] = _mm512_or_si512(_mm512_and_si512(l1, m4), _mm512_and_si512(_mm512_slli_epi16(h, 2), m30));
    q[2] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(l0, 4), m4), _mm512_and_si512(h, m30));
    q[3] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(l1, 4), m4),
                           _mm512_and_si512(_mm512_srli_epi16(h, 2), m30));
}

inline __m512i widen(__m128i lo, __m128i hi) { return _mm512_cvtepi8_epi16(_mm256_set_m128i(hi, lo)); }

template <int N>
void group(const uint8_t * x, const uint8_t * act, size_t stride, int64_t nb, float * out, size_t ostride) {
    __m512 acc[N];
    SBQ6X8_UNROLL
    for (int j = 0; j < N; j++) {
        acc[j] = _mm512_setzero_ps();
    }
    const __m512i neg32 = _mm512_set1_epi16(-32);
    const __m512i dlane = _mm512_setr_epi32(0, 1, 0, 1, 2, 3, 2, 3, 4, 5, 4, 5, 6, 7, 6, 7);
    for (int64_t i = 0; i < nb; i++, x += X8_BYTES) {
        for (int o = 0; o < X8_BYTES; o += 64) {
            _mm_prefetch((const char *) x + SBQ6X8_PREFETCH + o, SBQ6X8_HINT);
        }
        const int8_t * sc = (const int8_t *) (x + SC);
        const uint8_t * y[N];
        __m512i s[N];
        SBQ6X8_UNROLL
        for (int j = 0; j < N; j++) {
            y[j] = act + j * stride + i * Q8K_BYTES;
            s[j] = _mm512_setzero_si512();
        }
        SBQ6X8_UNROLL
        for (int u = 0; u < 4; u++) {
            const __m512i o = _mm512_mullo_epi16(widen(offset_bytes(sc, u, 0), offset_bytes(sc, u, 1)), neg32);
            const __m512i bi = _mm512_load_si512((const void *) BIDX[u]);
            SBQ6X8_UNROLL
            for (int j = 0; j < N; j++) {
                const __m512i bs = _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *) (y[j] + 4 + 256)));
                s[j] = _mm512_dpwssd_epi32(s[j], o, _mm512_permutexvar_epi32(bi, bs));
            }
        }
        SBQ6X8_UNROLL
        for (int c = 0; c < 2; c++) {
            SBQ6X8_UNROLL
            for (int tp = 0; tp < 2; tp++) {  // chunks t = 2tp, 2tp+1 share their 4 scale groups
                __m512i qa[4], qb[4];
                weights(x, c, 2 * tp, qa);
                weights(x, c, 2 * tp + 1, qb);
                SBQ6X8_UNROLL
                for (int k = 0; k < 4; k++) {
                    const int g = 8 * c + 2 * k + tp;
                    const __m512i sg = widen(scale_bytes(sc, g, 0), scale_bytes(sc, g, 1));
                    SBQ6X8_UNROLL
                    for (int j = 0; j < N; j++) {
                        const uint8_t * a = y[j] + 4 + 128 * c + 32 * k + 16 * tp;
                        const __m512i pa = _mm512_dpbusd_epi32(_mm512_setzero_si512(), qa[k], _mm512_set1_epi64(bytes8(a)));
                        const __m512i pb = _mm512_dpbusd_epi32(_mm512_setzero_si512(), qb[k], _mm512_set1_epi64(bytes8(a + 8)));
                        s[j] = _mm512_dpwssd_epi32(s[j], _mm512_packs_epi32(pa, pb), sg);
                    }
                }
            }
        }
        const __m512 d = _mm512_permutexvar_ps(dlane, _mm512_castps256_ps512(_mm256_cvtph_ps(load128(x))));
        SBQ6X8_UNROLL
        for (int j = 0; j < N; j++) {
            float dy;
            memcpy(&dy, y[j], 4);
            const __m512i tot = _mm512_add_epi32(s[j], _mm512_shuffle_epi32(s[j], _MM_PERM_BADC));  // row sums
            acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(tot), _mm512_mul_ps(d, _mm512_set1_ps(dy)), acc[j]);
        }
    }
    SBQ6X8_UNROLL
    for (int j = 0; j < N; j++) {
        alignas(64) float a[16];
        _mm512_store_ps(a, acc[j]);
        for (int r = 0; r < 8; r++) {
            out[j * ostride + r] = a[4 * (r / 2) + r % 2];
        }
    }
}

#else
// ---------------------------------------------------------------- 256-bit: two halves of 4 rows
// A ymm vector is half h of the zmm's bytes (rows 4h..4h+3, 8 bytes each), but its lanes are summed otherwise:
// the chunks t and t+1 of one scale group go through vpmaddubsw each (int16 lane 4r' + m: two products of row
// 4h + r', at most 2 * 63 * 128), are added in 16 bits (four products, at most 32,256: exact) and multiplied by
// the scales with one vpmaddwd (int32 lanes 2r', 2r' + 1: row 4h + r').  Three multiplies per pair of chunks
// and activation row where the zmm code's lanes (vpdpbusd to 32 bits, pack, vpdpwssd) cost AVX2 five
// (vpdpbusd is vpmaddubsw + vpmaddwd by ones there).  The row sums are the same integers, hence the same bits.
inline __m256i load256(const void * p) { return _mm256_loadu_si256((const __m256i *) p); }

inline __m256i dot_i16(__m256i acc, __m256i a, __m256i b) {
#if SBQ6X8_VARIANT == 3
    return _mm256_dpwssd_epi32(acc, a, b);
#elif SBQ6X8_VARIANT == 2
    return _mm256_dpwssd_avx_epi32(acc, a, b);
#else
    return _mm256_add_epi32(acc, _mm256_madd_epi16(a, b));
#endif
}

// The ymm lanes' shuffles: int16 lane L = 4r' + m takes row 4h + r''s scale byte (sidx, from group g's 8 bytes);
// for the -32 offset, int32 lane 2r' + e pairs row 4h + r''s scales of groups 4u + 2e, 4u + 2e + 1 (bytes
// 8(2e + f) + 4h + r' of the 32 at scales + 32u; part p of oidx takes those in its 16) with their activation
// sums (bidx: the pair's 32-bit word, 2u + e, of the block's 16 int16 sums).
struct ytables {
    int8_t sidx[2][16];
    int8_t oidx[2][2][16];
    int32_t bidx[4][8];
};

constexpr ytables make_ytables() {
    ytables t{};
    for (int h = 0; h < 2; h++) {
        for (int lane = 0; lane < 16; lane++) {
            const int r = lane / 4, e = (lane / 2) & 1, f = lane & 1;  // int16 lane 2(2r + e) + f
            t.sidx[h][lane] = (int8_t) (4 * h + r);
            const int src = 8 * (2 * e + f) + 4 * h + r;
            for (int part = 0; part < 2; part++) {
                t.oidx[h][part][lane] = src / 16 == part ? (int8_t) (src % 16) : (int8_t) 0x80;
            }
        }
    }
    for (int u = 0; u < 4; u++) {
        for (int lane = 0; lane < 8; lane++) {
            t.bidx[u][lane] = 2 * u + (lane & 1);
        }
    }
    return t;
}
alignas(32) constexpr ytables Y = make_ytables();

// Half h (rows 4h..4h+3) of the zmm code's weights q[k]: the same bytes, 32 of each 64.  One k at a time (its
// two loads again from L1 each k), so that eight rows' sums, two chunks' weights and the scales fit the 16
// registers.
inline __m256i weights(const uint8_t * x, int c, int t, int h, int k) {
    const __m256i m4 = _mm256_set1_epi8(0x0F), m30 = _mm256_set1_epi8(0x30);
    const __m256i l = load256(x + QL + 64 * (8 * c + 4 * (k & 1) + t) + 32 * h);
    const __m256i hb = load256(x + QH + 64 * (4 * c + t) + 32 * h);
    const __m256i lo = k < 2 ? l : _mm256_srli_epi16(l, 4);
    const __m256i hi = k == 0 ? _mm256_slli_epi16(hb, 4) : k == 1 ? _mm256_slli_epi16(hb, 2)
                     : k == 2 ? hb : _mm256_srli_epi16(hb, 2);
    return _mm256_or_si256(_mm256_and_si256(lo, m4), _mm256_and_si256(hi, m30));
}

// Half h's -32 offset scales for groups 4u..4u+3, as int16 times -32, lanes as above.
inline __m256i offset_scales(const int8_t * sc, int u, int h) {
    const __m128i b = _mm_or_si128(_mm_shuffle_epi8(load128(sc + 32 * u), load128(Y.oidx[h][0])),
                                   _mm_shuffle_epi8(load128(sc + 32 * u + 16), load128(Y.oidx[h][1])));
    return _mm256_mullo_epi16(_mm256_cvtepi8_epi16(b), _mm256_set1_epi16(-32));
}

// The integer sums of halves h0..h0 + H - 1 for N activation rows (s[h - h0][j]), exact in any order.  Both halves
// need the same activation broadcasts and scale bytes.  Taken one half at a time, GCC hoisted those loads out of
// the half loop and spilled them to the stack: 195 stack operands in a one-row block's 844 instructions, on Zen 1
// a store port taking a ymm store as two micro-ops.  So a few rows (up to
// SBQ6X8_BOTH_ROWS: 4 weight vectors, 2 scale vectors and 2N sums live) take both halves in one sweep (H = 2), and
// more rows one half at a time behind a compiler fence that keeps each half's loads in it.  llvm-mca -mcpu=znver1
// (scripts/lab/kernel_mca.sh), cycles a block for 1 / 2 / 3 / 4 / 8 rows: 430 / 546 / 677 / 818 / 1468 before,
// 308 / 393 / 498 / 713 / 1300.
template <int N, int H>
inline void half_sums(const uint8_t * x, const int8_t * sc, const uint8_t * const * y, int h0, __m256i (*s)[N]) {
    __asm__ volatile("" ::: "memory");  // the fence: no load moves across it
    SBQ6X8_UNROLL
    for (int h = 0; h < H; h++) {
        SBQ6X8_UNROLL
        for (int j = 0; j < N; j++) {
            s[h][j] = _mm256_setzero_si256();
        }
    }
    SBQ6X8_UNROLL
    for (int c = 0; c < 2; c++) {
        SBQ6X8_UNROLL
        for (int tp = 0; tp < 2; tp++) {
            SBQ6X8_UNROLL
            for (int k = 0; k < 4; k++) {
                const __m128i sb = _mm_loadl_epi64((const __m128i *) (sc + 8 * (8 * c + 2 * k + tp)));
                __m256i qa[H], qb[H], sg[H];
                SBQ6X8_UNROLL
                for (int h = 0; h < H; h++) {
                    qa[h] = weights(x, c, 2 * tp, h0 + h, k), qb[h] = weights(x, c, 2 * tp + 1, h0 + h, k);
                    sg[h] = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(sb, load128(Y.sidx[h0 + h])));
                }
                SBQ6X8_UNROLL
                for (int j = 0; j < N; j++) {
                    const uint8_t * a = y[j] + 4 + 128 * c + 32 * k + 16 * tp;
                    const __m256i ba = _mm256_set1_epi64x(bytes8(a)), bb = _mm256_set1_epi64x(bytes8(a + 8));
                    SBQ6X8_UNROLL
                    for (int h = 0; h < H; h++) {
                        const __m256i pa = _mm256_maddubs_epi16(qa[h], ba), pb = _mm256_maddubs_epi16(qb[h], bb);
                        s[h][j] = dot_i16(s[h][j], _mm256_add_epi16(pa, pb), sg[h]);
                    }
                }
            }
        }
    }
    SBQ6X8_UNROLL
    for (int u = 0; u < 4; u++) {
        const __m256i bi = load256(Y.bidx[u]);
        __m256i o[H];
        SBQ6X8_UNROLL
        for (int h = 0; h < H; h++) {
            o[h] = offset_scales(sc, u, h0 + h);
        }
        SBQ6X8_UNROLL
        for (int j = 0; j < N; j++) {
            const __m256i bs = _mm256_permutevar8x32_epi32(load256(y[j] + 4 + 256), bi);
            SBQ6X8_UNROLL
            for (int h = 0; h < H; h++) {
                s[h][j] = dot_i16(s[h][j], o[h], bs);
            }
        }
    }
}

#ifndef SBQ6X8_BOTH_ROWS
#define SBQ6X8_BOTH_ROWS 3  // from 4 rows the sums alone (16) fill the registers
#endif

template <int N>
void group(const uint8_t * x, const uint8_t * act, size_t stride, int64_t nb, float * out, size_t ostride) {
    constexpr int H = N <= SBQ6X8_BOTH_ROWS ? 2 : 1;  // halves a sweep
    __m256 acc[N][2];
    SBQ6X8_UNROLL
    for (int j = 0; j < N; j++) {
        acc[j][0] = acc[j][1] = _mm256_setzero_ps();
    }
    for (int64_t i = 0; i < nb; i++, x += X8_BYTES) {
        for (int o = 0; o < X8_BYTES; o += 64) {
            _mm_prefetch((const char *) x + SBQ6X8_PREFETCH + o, SBQ6X8_HINT);
        }
        const int8_t * sc = (const int8_t *) (x + SC);
        const __m256 d8 = _mm256_cvtph_ps(load128(x));
        const uint8_t * y[N];
        float dy[N];
        SBQ6X8_UNROLL
        for (int j = 0; j < N; j++) {
            y[j] = act + j * stride + i * Q8K_BYTES;
            memcpy(&dy[j], y[j], 4);
        }
        SBQ6X8_UNROLL
        for (int h0 = 0; h0 < 2; h0 += H) {
            __m256i s[H][N];
            half_sums<N, H>(x, sc, y, h0, s);
            SBQ6X8_UNROLL
            for (int h = h0; h < h0 + H; h++) {
                const __m256 d = _mm256_permutevar8x32_ps(d8, h == 0 ? _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3)
                                                                     : _mm256_setr_epi32(4, 4, 5, 5, 6, 6, 7, 7));
                SBQ6X8_UNROLL
                for (int j = 0; j < N; j++) {
                    const __m256i tot = _mm256_add_epi32(s[h - h0][j], _mm256_shuffle_epi32(s[h - h0][j], 0xB1));
                    acc[j][h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(tot), _mm256_mul_ps(d, _mm256_set1_ps(dy[j])),
                                                acc[j][h]);
                }
            }
        }
    }
    SBQ6X8_UNROLL
    for (int j = 0; j < N; j++) {
        alignas(32) float a[2][8];
        _mm256_store_ps(a[0], acc[j][0]);
        _mm256_store_ps(a[1], acc[j][1]);
        for (int r = 0; r < 8; r++) {
            out[j * ostride + r] = a[r / 4][2 * (r % 4)];
        }
    }
}
#endif

using group_fn = void (*)(const uint8_t *, const uint8_t *, size_t, int64_t, float *, size_t);
constexpr group_fn GROUPS[SBK_MAX_ROWS + 1] = {nullptr, group<1>, group<2>, group<3>, group<4>,
                                               group<5>, group<6>, group<7>, group<8>};

}  // namespace

extern "C" int sbk_q6kx8_gemm(int64_t k, const void * w, int64_t r0, int64_t r1, const void * act,
                              size_t act_row_bytes, int n, float * dst, size_t dst_stride) {
    const int64_t nb = k / 256;
    if (n < 1 || n > SBK_MAX_ROWS || k % 256 != 0 || r0 % 8 != 0 || r1 % 8 != 0) {
        return 0;
    }
    for (int64_t r = r0; r < r1; r += 8) {
        GROUPS[n]((const uint8_t *) w + (r / 8) * nb * X8_BYTES, (const uint8_t *) act, act_row_bytes, nb,
                  dst + r, dst_stride);
    }
    return 1;
}

#else  // no AVX2: the fast mode keeps Q6_K plain (sbq6x8-hook.patch asks sbk_q6kx8_compiled)

extern "C" int sbk_q6kx8_gemm(int64_t, const void *, int64_t, int64_t, const void *, size_t, int, float *, size_t) {
    return 0;
}

#endif

extern "C" int sbk_q6kx8_compiled(void) { return SBQ6X8_VARIANT; }

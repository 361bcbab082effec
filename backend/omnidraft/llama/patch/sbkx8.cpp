// sbkx8: omnidraft's small-batch Q4_K product over ggml's repacked layout (block_q4_Kx8: 8 weight rows
// interleaved 8 bytes at a time), x86 AVX2 and up.  The fast mode's layout for the Q4_K_M files users
// download; sbk.cpp does the same over the plain layout (the exact mode).
//
// Why a second Q4_K kernel.  In the plain layout one 256-bit vector holds 32 values of one sub-block, so
// every row pays a scale multiply per 32 values: two multiplies per 32 weights and activation row
// (vpmaddubsw, then vpmaddwd or vpdpwssd by the sub-block's scale).  That per-row arithmetic, not memory,
// is what a 4- or 8-row verification pass pays for (0.20-0.30 of a decode per extra row).  In the
// interleaved layout one vector holds 8 values of 4 rows; a sub-block (32 values) spans 4 vectors whose
// products sum exactly in 16 bits (|sum| <= 16 * 15 * 128 = 30,720) before one multiply by the scales of
// the 4 rows.  Per 32 weights and row that is 1.25 multiplies instead of 2, with the same weight bytes
// read once.  ggml's own gemv/gemm over this layout are not batch-invariant (gemm takes 4 rows at a
// time with other instructions), so its Q4_K_M fast mode could not verify drafts exactly.
//
// Exactness.  As in sbk.cpp: every output gets the same instructions whatever n is; integer sums per
// block (exact, so their order and the loop structure may differ between n), then one float
// multiply-add per block and row in a fixed order, and a fixed final reduction.  Batched rows are
// bit-identical to one-row decoding by construction, and decoding goes through here too.
//
// Layout (ggml-cpu/repack.h, make_block_q4_Kx8).  One block of 8 rows x 256 values, 1152 bytes:
// fp16 d[8], fp16 dmin[8], scales[96] (6-bit scales and mins; 12 bytes per sub-block g for the 8 rows:
// bytes 0-3 scales of rows 0-3 with bits 4-5 of rows 4-7's in their top bits, 4-7 the same for mins,
// 8-11 the low nibbles of rows 4-7's scales and (high nibbles) mins), qs[1024]: chunk k of 8 bytes is
// row k % 8's bytes 8*(k/8).. of its plain Q4_K qs, whose byte 32p + b holds value 64p + b in its low
// nibble and 64p + 32 + b in its high one.  Activations: plain block_q8_K rows (float d, 256 int8,
// int16 sums of each 16), quantized by ggml's quantize_row_q8_K.
#include "sbk.h"

#include <stdlib.h>
#include <string.h>

#include <algorithm>

#if defined(__AVX2__) && defined(__F16C__) && defined(__FMA__)
#include <immintrin.h>
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
#define SBKX8_VARIANT 3
#elif defined(__AVXVNNI__)
#define SBKX8_VARIANT 2
#else
#define SBKX8_VARIANT 1
#endif
#else
#define SBKX8_VARIANT 0
#endif
// How the 4-value products are summed before the scales: vpdpbusd into 32-bit lanes (VNNI), or vpmaddubsw
// pairs summed in 16 bits (AVX2; -DSBKX8_MADDUBS forces it on VNNI builds, to compare).
#if SBKX8_VARIANT >= 2 && !defined(SBKX8_MADDUBS)
#define SBKX8_DPBUSD 1
#else
#define SBKX8_DPBUSD 0
#endif

// AVX-512 VNNI builds with 512-bit registers (BW for the 16-bit packs): one zmm holds 8 values of all 8 rows, so
// a block's products take half the instructions (vpdpbusd, the activations' broadcasts, the scale dots).
// Integer sums only: the lanes come out as the ymm code's rows 0-3 (low half) and 4-7 (high half), the same
// integers, so the float part and every result stay bit-identical.  -DSBKX8_YMM keeps the 256-bit code.
#if SBKX8_VARIANT == 3 && SBKX8_DPBUSD && defined(__AVX512F__) && defined(__AVX512BW__) && !defined(SBKX8_YMM)
#define SBKX8_ZMM 1
#else
#define SBKX8_ZMM 0
#endif

#if SBKX8_VARIANT > 0
namespace {

constexpr int QK_K = 256;
constexpr int X8_BYTES = 1152;  // block_q4_Kx8
constexpr int Q8K_BYTES = 292;
constexpr int MAX_BLOCKS = 256;  // rows of up to 65,536 values
#ifndef SBKX8_PREFETCH
#define SBKX8_PREFETCH 4096
#endif

#define SBKX8_UNROLL _Pragma("GCC unroll 8")
// zmm: the largest batch whose rows' sums all stay live through a part of the block (beyond it, pairs of rows at
// a time: see row_sums), and the largest batch whose row sums are inlined (see sums_for).  A row's sums take 3
// zmm: up to 6 rows they fit beside the weights, from 7 GCC spilled them.  One thread, a 4480 x 1536 slice of
// the 1.5B held in cache (scripts/lab/x8_kernel_bench.cpp), 2-core Zen 5, us for 4 / 5 / 6 / 8 rows: 137 / 199 /
// 219 / 290 with groups of 4 (5 = 4 + 1 reads every weight vector twice), 137 / 158 / 187 / 290 with 6.
// Zen 4 with groups of 4, 1 / 4 / 8 rows: 115 / 228 / 436.  The ymm code takes one row at a time (row_sums).
#ifndef SBKX8_ROWS
#define SBKX8_ROWS 6
#endif
#ifndef SBKX8_INLINE_ROWS
#define SBKX8_INLINE_ROWS 8
#endif

inline __m256i load(const void * p) { return _mm256_loadu_si256((const __m256i *) p); }
inline __m128i load128(const void * p) { return _mm_loadu_si128((const __m128i *) p); }

inline __m256i bcast64(const uint8_t * p) {
    int64_t v;
    memcpy(&v, p, 8);
    return _mm256_set1_epi64x(v);
}

inline __m256i bcast32(const int16_t * p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}

// acc + a0*b0 + a1*b1 per int32 lane (int16 pairs); VNNI fuses the multiply and the add (same integer).
inline __m256i dot_i16(__m256i acc, __m256i a, __m256i b) {
#if SBKX8_VARIANT == 3
    return _mm256_dpwssd_epi32(acc, a, b);
#elif SBKX8_VARIANT == 2
    return _mm256_dpwssd_avx_epi32(acc, a, b);
#else
    return _mm256_add_epi32(acc, _mm256_madd_epi16(a, b));
#endif
}

// The activations' side table, once per call and thread: each block's scale, and the sums of each 32
// quants (what the rows' mins multiply), as int16 pairs.
struct acts {
    const uint8_t * q;  // activation row 0 (block_q8_K)
    size_t stride;      // bytes between activation rows
    int64_t nb;         // blocks per row
    const float * d;    // [row][block]
    const int16_t * bs; // [row][block][8]
};

alignas(64) thread_local float TABLE_D[SBK_MAX_ROWS * MAX_BLOCKS];
alignas(64) thread_local int16_t TABLE_BS[SBK_MAX_ROWS * MAX_BLOCKS * 8];

acts prepare(const uint8_t * act, size_t stride, int n, int64_t nb) {
    for (int j = 0; j < n; j++) {
        for (int64_t i = 0; i < nb; i++) {
            const uint8_t * y = act + j * stride + i * Q8K_BYTES;
            memcpy(TABLE_D + j * nb + i, y, 4);
            int16_t s16[16];
            memcpy(s16, y + 4 + QK_K, sizeof s16);
            for (int s = 0; s < 8; s++) {
                TABLE_BS[(j * nb + i) * 8 + s] = (int16_t) (s16[2 * s] + s16[2 * s + 1]);
            }
        }
    }
    return {act, stride, nb, TABLE_D, TABLE_BS};
}

// ---------------------------------------------------------------- one block's shared part
// Everything a block needs besides the activations, unpacked once for every activation row.
struct block8 {
#if SBKX8_ZMM
    __m512i w[4][4][2];  // [p][c][lo, hi]: nibbles of rows 0-3 (low half) and 4-7 (high half)
    __m512i s[4];        // [p]: the ymm code's s[p][0] (low half) and s[p][1] (high half)
#else
    const uint8_t * qs;  // the block's packed nibbles: the ymm code unpacks them per row (see row_sums)
    __m256i s[4][4];     // [p]: the scale vectors (per variant, see scale_vectors)
#endif
    __m256i m[4];        // [t]: int16 pairs (min of sub-block 2t, 2t+1) of rows 0..7
#if SBKX8_ZMM
    __m512 dAB;          // the rows' d, in the lanes the zmm sums come out in (the ymm code's dA, then dB)
#else
    __m256 dA, dB;       // the rows' d, in the lanes the sums come out in
#endif
    __m256 ndmin;        // -dmin of rows 0..7
};

// The 6-bit scales and mins of the block's 8 sub-blocks for its 8 rows (make_block_q4_Kx8's packing undone):
// sc[p] and mn[p] hold sub-block 2p's 8 rows, then sub-block 2p + 1's.  Group g (12 bytes at 12g, ggml's q4_K
// scale packing of 8 values) is taken in the vectors' 32-bit lane g: its words 0, 1, 2 gathered from the 96
// bytes by permutes, then the same masks and shifts as the reference, 8 groups at once.  The scalar code this
// replaced (~15 64-bit operations a group) was a fifth of a one-row pass's instructions.
template <int W>
inline __m256i words(__m256i v0, __m256i v1, __m256i v2) {
    // lane g takes word 3g + W of the 24: from v0 while 3g + W < 8, v1 while < 16, else v2 (permutes read an
    // index's low 3 bits)
    const __m256i idx = _mm256_setr_epi32(W, 3 + W, 6 + W, 9 + W, 12 + W, 15 + W, 18 + W, 21 + W);
    constexpr int from1 = W == 0 ? 0x38 : W == 1 ? 0x18 : 0x1C;  // lanes whose word lies in 8..15
    constexpr int from2 = W == 0 ? 0xC0 : 0xE0;                  // in 16..23
    const __m256i a = _mm256_blend_epi32(_mm256_permutevar8x32_epi32(v0, idx), _mm256_permutevar8x32_epi32(v1, idx),
                                         from1);
    return _mm256_blend_epi32(a, _mm256_permutevar8x32_epi32(v2, idx), from2);
}

inline void unpack_scales(const uint8_t * g, __m128i * sc, __m128i * mn) {
    const __m256i v0 = load(g), v1 = load(g + 32), v2 = load(g + 64);
    const __m256i w0 = words<0>(v0, v1, v2), w1 = words<1>(v0, v1, v2), w2 = words<2>(v0, v1, v2);
    const __m256i m6 = _mm256_set1_epi8(0x3F), m4 = _mm256_set1_epi8(0x0F), m2 = _mm256_set1_epi8(0x03);
    const __m256i s_lo = _mm256_and_si256(w0, m6), m_lo = _mm256_and_si256(w1, m6);  // scales, mins 0-3
    const __m256i s_hi = _mm256_or_si256(_mm256_and_si256(w2, m4),                     // scales 4-7
                                         _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(w0, 6), m2), 4));
    const __m256i m_hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(w2, 4), m4),  // mins 4-7
                                         _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(w1, 6), m2), 4));
    // [g0, g1 | g4, g5] and [g2, g3 | g6, g7], each group's rows 0-3 then 4-7
    const __m256i s01 = _mm256_unpacklo_epi32(s_lo, s_hi), s23 = _mm256_unpackhi_epi32(s_lo, s_hi);
    const __m256i m01 = _mm256_unpacklo_epi32(m_lo, m_hi), m23 = _mm256_unpackhi_epi32(m_lo, m_hi);
    sc[0] = _mm256_castsi256_si128(s01), sc[1] = _mm256_castsi256_si128(s23);
    sc[2] = _mm256_extracti128_si256(s01, 1), sc[3] = _mm256_extracti128_si256(s23, 1);
    mn[0] = _mm256_castsi256_si128(m01), mn[1] = _mm256_castsi256_si128(m23);
    mn[2] = _mm256_extracti128_si256(m01, 1), mn[3] = _mm256_extracti128_si256(m23, 1);
}

inline __m256i spread(__m128i v, const char * idx) {
    return _mm256_cvtepu8_epi16(_mm_shuffle_epi8(v, _mm_loadu_si128((const __m128i *) idx)));
}

// The scales of sub-blocks 2p (lo) and 2p+1 (hi) as int16 vectors matching the sums' lanes:
// VNNI: packs(loA, hiA) holds [lo r0 r0 r1 r1, hi r0 r0 r1 r1 | lo r2 r2 r3 r3, hi r2 r2 r3 r3];
// AVX2: maddubs over half A holds [r0 x4, r1 x4 | r2 x4, r3 x4], lo and hi apart.
#if SBKX8_DPBUSD
alignas(16) const char SIDX[2][16] = {{0, 0, 1, 1, 8, 8, 9, 9, 2, 2, 3, 3, 10, 10, 11, 11},
                                      {4, 4, 5, 5, 12, 12, 13, 13, 6, 6, 7, 7, 14, 14, 15, 15}};
#else
alignas(16) const char SIDX[4][16] = {{0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3},
                                      {8, 8, 8, 8, 9, 9, 9, 9, 10, 10, 10, 10, 11, 11, 11, 11},
                                      {4, 4, 4, 4, 5, 5, 5, 5, 6, 6, 6, 6, 7, 7, 7, 7},
                                      {12, 12, 12, 12, 13, 13, 13, 13, 14, 14, 14, 14, 15, 15, 15, 15}};
#endif
alignas(16) const char MIDX[16] = {0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15};
constexpr int NSCALE = SBKX8_DPBUSD ? 2 : 4;

inline void unpack_block(const uint8_t * x, block8 & b) {
    __m128i sc[4], mn[4];
    unpack_scales(x + 32, sc, mn);
    SBKX8_UNROLL
    for (int p = 0; p < 4; p++) {
        const __m128i v = sc[p];
#if SBKX8_ZMM
        b.s[p] = _mm512_inserti64x4(_mm512_castsi256_si512(spread(v, SIDX[0])), spread(v, SIDX[1]), 1);
#else
        SBKX8_UNROLL
        for (int k = 0; k < NSCALE; k++) {
            b.s[p][k] = spread(v, SIDX[k]);
        }
#endif
        b.m[p] = spread(mn[p], MIDX);
    }
    const __m256 d = _mm256_cvtph_ps(load128(x));
#if SBKX8_ZMM
    b.dAB = _mm512_permutexvar_ps(_mm512_setr_epi32(0, 1, 0, 1, 2, 3, 2, 3, 4, 5, 4, 5, 6, 7, 6, 7),
                                  _mm512_castps256_ps512(d));
#elif SBKX8_DPBUSD
    b.dA = _mm256_permutevar8x32_ps(d, _mm256_setr_epi32(0, 1, 0, 1, 2, 3, 2, 3));
    b.dB = _mm256_permutevar8x32_ps(d, _mm256_setr_epi32(4, 5, 4, 5, 6, 7, 6, 7));
#else
    b.dA = _mm256_permutevar8x32_ps(d, _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3));
    b.dB = _mm256_permutevar8x32_ps(d, _mm256_setr_epi32(4, 4, 5, 5, 6, 6, 7, 7));
#endif
    b.ndmin = _mm256_sub_ps(_mm256_setzero_ps(), _mm256_cvtph_ps(load128(x + 16)));
    const uint8_t * qs = x + 128;
#if SBKX8_ZMM
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    SBKX8_UNROLL
    for (int p = 0; p < 4; p++) {
        SBKX8_UNROLL
        for (int c = 0; c < 4; c++) {
            const __m512i a = _mm512_loadu_si512((const void *) (qs + 64 * (4 * p + c)));
            b.w[p][c][0] = _mm512_and_si512(a, m4);
            b.w[p][c][1] = _mm512_and_si512(_mm512_srli_epi16(a, 4), m4);
        }
    }
#else
    b.qs = qs;
#endif
}

// ---------------------------------------------------------------- one activation row against a block
// The block's integer sums for one activation row: TA, TB (scaled nibble products, lanes as dA, dB say)
// and M (the mins times the activations' 32-sums, lanes = rows 0..7).  Exact: the loop order is free.
#if SBKX8_ZMM
// TA and TB stay in one zmm (low half, high half) as row_sums makes them: the float part then takes one
// convert, multiply and fma for both, and 8 rows' accumulators fit in the registers (see facc).
struct sums {
    __m512i ab;
    __m256i m;
};
#else
struct sums {
    __m256i a, b, m;
};
#endif

// R activation rows at once, so that each weight vector loaded from the block serves R rows (one row at a
// time, the loads of the unpacked weights, not the multiplies, bound the pass).
#if SBKX8_ZMM
// Every row of the pass in one call per block.  Up to SBKX8_ROWS rows, each row's lo/hi sums stay live through
// a part p, R independent vpdpbusd chains interleaved, each weight vector loaded once for all of them.  Beyond,
// 2R such sums beside R row sums and 8 weight vectors do not fit the 32 zmm (GCC spilled), so the rows go two at
// a time through each part, the weight vectors reloaded from L1 per pair.  The same integers either way.  One
// thread, a 4480 x 1536 slice in cache (scripts/lab/x8_kernel_bench.cpp), 2-core Zen 4, best of 5 alternated
// runs, us for 6 / 7 / 8 rows: 310-312 / 411-413 / 451-452 as 6, 4 + 3 and 4 + 4 rows (the earlier code), 316 /
// 369 / 413 now; pairs at every count cost 3-4 % from 4 rows to 6, hence the split.
template <int R>
inline void row_sums(const block8 & b, const uint8_t * const * y, const int16_t * const * bs, sums * r) {
    constexpr int G = R <= SBKX8_ROWS ? R : 2;  // rows whose sums are live at once
    __m512i ab[R];  // the ymm code's a (low half) and b (high half)
    SBKX8_UNROLL
    for (int j = 0; j < R; j++) {
        ab[j] = _mm512_setzero_si512();
    }
    SBKX8_UNROLL
    for (int p = 0; p < 4; p++) {
        SBKX8_UNROLL
        for (int j0 = 0; j0 < R; j0 += G) {
            __m512i lo[G], hi[G];
            SBKX8_UNROLL
            for (int g = 0; g < G; g++) {
                lo[g] = hi[g] = _mm512_setzero_si512();
            }
            SBKX8_UNROLL
            for (int c = 0; c < 4; c++) {
                SBKX8_UNROLL
                for (int g = 0; g < G; g++) {
                    if (j0 + g < R) {  // an odd row count's last pair is one row
                        int64_t vl, vh;
                        memcpy(&vl, y[j0 + g] + 64 * p + 8 * c, 8);
                        memcpy(&vh, y[j0 + g] + 64 * p + 32 + 8 * c, 8);
                        lo[g] = _mm512_dpbusd_epi32(lo[g], b.w[p][c][0], _mm512_set1_epi64(vl));
                        hi[g] = _mm512_dpbusd_epi32(hi[g], b.w[p][c][1], _mm512_set1_epi64(vh));
                    }
                }
            }
            SBKX8_UNROLL
            for (int g = 0; g < G; g++) {
                // packs works within 128-bit lanes: its low half is the ymm code's packs(loA, hiA), its high
                // half packs(loB, hiB); each lane sums 16 products of at most 15 * 128, so it never saturates
                if (j0 + g < R) {
                    ab[j0 + g] = _mm512_dpwssd_epi32(ab[j0 + g], _mm512_packs_epi32(lo[g], hi[g]), b.s[p]);
                }
            }
        }
    }
    SBKX8_UNROLL
    for (int j = 0; j < R; j++) {  // the mins' sums need no weights: after the parts, one row at a time
        __m256i m = _mm256_setzero_si256();
        SBKX8_UNROLL
        for (int p = 0; p < 4; p++) {
            m = dot_i16(m, b.m[p], bcast32(bs[j] + 2 * p));
        }
        r[j] = {ab[j], m};
    }
}
#else
// One activation row.  The nibbles are taken from the block's bytes where they are used (3 ALU ops per 32
// bytes, in L1 after the first row) instead of from an unpacked copy of the block.  The earlier code stored
// that copy (2 KB) and shared each weight vector among 2 rows: more vectors live than 16 ymm registers hold,
// and GCC spilled products to the stack.  Written per row, GCC still takes each nibble vector once per block
// where inlining lets it, but keeps the products in registers; forcing this out of line (so every row
// re-extracts) was slower.  One thread, a 4480 x 1536 slice of the 1.5B held in L3, AVX2 build, the 16-core
// Xeon of a GPU host (a shared VM: best of 3), us for 1 / 2 / 4 / 8 rows: 188 / 262 / 409 / 758 against
// 185 / 277 / 527 / 881 before.  The AVX-VNNI build (vpdpbusd on ymm) gained less: 159 / 214 / 349 / 683
// against 163 / 205 / 395 / 650.
inline sums row_sums(const block8 & b, const uint8_t * y, const int16_t * bs) {
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    sums r = {_mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256()};
    SBKX8_UNROLL
    for (int p = 0; p < 4; p++) {
        SBKX8_UNROLL
        for (int h = 0; h < 2; h++) {  // rows 0-3, then 4-7
            __m256i lo = _mm256_setzero_si256(), hi = _mm256_setzero_si256();
            SBKX8_UNROLL
            for (int c = 0; c < 4; c++) {
                const __m256i raw = load(b.qs + 64 * (4 * p + c) + 32 * h);
                const __m256i wl = _mm256_and_si256(raw, m4), wh = _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4);
                const __m256i al = bcast64(y + 64 * p + 8 * c), ah = bcast64(y + 64 * p + 32 + 8 * c);
#if SBKX8_DPBUSD && SBKX8_VARIANT == 3
                lo = _mm256_dpbusd_epi32(lo, wl, al);
                hi = _mm256_dpbusd_epi32(hi, wh, ah);
#elif SBKX8_DPBUSD
                lo = _mm256_dpbusd_avx_epi32(lo, wl, al);
                hi = _mm256_dpbusd_avx_epi32(hi, wh, ah);
#else
                // pairs of at most 2 * 15 * 128; four of them sum to 15,360: no 16-bit overflow
                lo = _mm256_add_epi16(lo, _mm256_maddubs_epi16(wl, al));
                hi = _mm256_add_epi16(hi, _mm256_maddubs_epi16(wh, ah));
#endif
            }
            __m256i & t = h ? r.b : r.a;
#if SBKX8_DPBUSD
            // each lane sums 16 products of at most 15 * 128: packs never saturates
            t = dot_i16(t, _mm256_packs_epi32(lo, hi), b.s[p][h]);
#else
            t = dot_i16(dot_i16(t, lo, b.s[p][2 * h]), hi, b.s[p][2 * h + 1]);
#endif
        }
        r.m = dot_i16(r.m, b.m[p], bcast32(bs + 2 * p));
    }
    return r;
}
#endif

#if SBKX8_ZMM
// The same, kept out of line: from 5 rows up, GCC -O3 (ggml's flags) inlining every call into group<N>
// kept too many vectors live and spilled (8 rows cost 824 us against 560 out of line, one thread, a
// 4480 x 1536 slice of the 1.5B, 2-core Zen 4); up to 4 rows inlined is faster (2 rows: 156 against 223).
template <int R>
__attribute__((noinline)) void row_sums_outlined(const block8 & b, const uint8_t * const * y,
                                                 const int16_t * const * bs, sums * r) {
    row_sums<R>(b, y, bs, r);
}

template <int N, int R>
inline void sums_for(const block8 & b, const uint8_t * const * y, const int16_t * const * bs, sums * r) {
    if constexpr (N <= SBKX8_INLINE_ROWS) {
        row_sums<R>(b, y, bs, r);
    } else {
        row_sums_outlined<R>(b, y, bs, r);
    }
}
#endif

// Per-row float state: the scaled sums of rows 0-3 and 4-7 (two lanes a row), and the mins (one lane a row).
#if SBKX8_ZMM
// One zmm for a and b, one ymm for m: 16 + 8 registers for 8 rows, where three ymm a row (24) beside the row
// sums' 12 spilled from 5 rows up.  Lane for lane the same convert, multiply and fma as the ymm code's: the
// same bits.
struct facc {
    __m512 ab;
    __m256 m;
};
#else
struct facc {
    __m256 a, b, m;
};
#endif

template <int N>
void group(const uint8_t * x, const acts & act, float * out, size_t stride) {
    facc acc[N];
    SBKX8_UNROLL
    for (int j = 0; j < N; j++) {
#if SBKX8_ZMM
        acc[j] = {_mm512_setzero_ps(), _mm256_setzero_ps()};
#else
        acc[j] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
#endif
    }
    block8 b;
    for (int64_t i = 0; i < act.nb; i++, x += X8_BYTES) {
        for (int o = 0; o < X8_BYTES; o += 64) {
            _mm_prefetch((const char *) x + SBKX8_PREFETCH + o, _MM_HINT_T0);
        }
        unpack_block(x, b);
        const uint8_t * y[N];
        const int16_t * bs[N];
        SBKX8_UNROLL
        for (int j = 0; j < N; j++) {
            y[j] = act.q + j * act.stride + i * Q8K_BYTES + 4;
            bs[j] = act.bs + 8 * (j * act.nb + i);
        }
        sums s[N];
#if SBKX8_ZMM
        sums_for<N, N>(b, y, bs, s);  // every row in one call a block (up to SBKX8_ROWS interleaved, then pairs)
#else
        SBKX8_UNROLL
        for (int j = 0; j < N; j++) {
            s[j] = row_sums(b, y[j], bs[j]);
        }
#endif
        SBKX8_UNROLL
        for (int j = 0; j < N; j++) {
#if SBKX8_ZMM
            const __m512 dy = _mm512_set1_ps(act.d[j * act.nb + i]);
            acc[j].ab = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[j].ab), _mm512_mul_ps(b.dAB, dy), acc[j].ab);
            acc[j].m = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s[j].m), _mm256_mul_ps(b.ndmin, _mm512_castps512_ps256(dy)),
                                       acc[j].m);
#else
            const __m256 dy = _mm256_broadcast_ss(act.d + j * act.nb + i);
            acc[j].a = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s[j].a), _mm256_mul_ps(b.dA, dy), acc[j].a);
            acc[j].b = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s[j].b), _mm256_mul_ps(b.dB, dy), acc[j].b);
            acc[j].m = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s[j].m), _mm256_mul_ps(b.ndmin, dy), acc[j].m);
#endif
        }
    }
    // rows r's two lanes of a/b, then its min lane, always in this order
#if SBKX8_DPBUSD
    static constexpr int L1[4] = {0, 1, 4, 5}, L2[4] = {2, 3, 6, 7};
#else
    static constexpr int L1[4] = {0, 2, 4, 6}, L2[4] = {1, 3, 5, 7};
#endif
    SBKX8_UNROLL
    for (int j = 0; j < N; j++) {
#if SBKX8_ZMM
        alignas(64) float ab[16], m[8];
        _mm512_store_ps(ab, acc[j].ab);
        const float * a = ab, * bb = ab + 8;
#else
        alignas(32) float a[8], bb[8], m[8];
        _mm256_store_ps(a, acc[j].a);
        _mm256_store_ps(bb, acc[j].b);
#endif
        _mm256_store_ps(m, acc[j].m);
        for (int r = 0; r < 4; r++) {
            out[j * stride + r] = (a[L1[r]] + a[L2[r]]) + m[r];
            out[j * stride + 4 + r] = (bb[L1[r]] + bb[L2[r]]) + m[4 + r];
        }
    }
}

using group_fn = void (*)(const uint8_t *, const acts &, float *, size_t);
constexpr group_fn GROUPS[SBK_MAX_ROWS + 1] = {nullptr, group<1>, group<2>, group<3>, group<4>,
                                               group<5>, group<6>, group<7>, group<8>};

}  // namespace

extern "C" int sbk_q4kx8_gemm(int64_t k, const void * w, int64_t r0, int64_t r1, const void * act,
                              size_t act_row_bytes, int n, float * dst, size_t dst_stride) {
    const int64_t nb = k / QK_K;
    if (n < 1 || n > SBK_MAX_ROWS || k % QK_K != 0 || nb > MAX_BLOCKS || r0 % 8 != 0 || r1 % 8 != 0) {
        return 0;
    }
    const acts a = prepare((const uint8_t *) act, act_row_bytes, n, nb);
    for (int64_t r = r0; r < r1; r += 8) {
        GROUPS[n]((const uint8_t *) w + (r / 8) * nb * X8_BYTES, a, dst + r, dst_stride);
    }
    return 1;
}

#else  // no AVX2: ggml's own kernels run

extern "C" int sbk_q4kx8_gemm(int64_t, const void *, int64_t, int64_t, const void *, size_t, int, float *, size_t) {
    return 0;
}

#endif

#ifndef SBK_STANDALONE
// ---------------------------------------------------------------- the ggml side (called from repack.cpp)
#include "ggml.h"
#include "ggml-cpu-impl.h"
#include "quants.h"

// Q4_K (block_q4_Kx8) and Q6_K (block_q6_Kx8, sbq6x8.cpp) share this hook.  Q4_K takes 1..8 rows, larger
// batches staying with ggml's AVX2 gemm, and OMNIDRAFT_SBQ4=0 sends it back to ggml at any time.  x86 ggml
// has no kernel for the Q6_K layout (its generic C would run), so a Q6_K matrix is repacked only where this
// hook takes every product on it: any batch (8 activation rows a call), any OMNIDRAFT_SBQ4 after the load.
static bool sbq4_off() {
    const char * env = getenv("OMNIDRAFT_SBQ4");
    return env != NULL && strcmp(env, "0") == 0;
}

// The Q6_K matrices sbq6x8.cpp can multiply in ggml's block_q6_Kx8 layout: 2-D (MUL_MAT, not MUL_MAT_ID),
// whole super-blocks, whole groups of 8 rows.
static bool q6x8_layout(const ggml_tensor * w) {
    return SBKX8_VARIANT > 0 && sbk_q6kx8_compiled() > 0 && w->type == GGML_TYPE_Q6_K && w->ne[0] % 256 == 0 &&
           w->ne[1] % 8 == 0 && w->ne[2] == 1 && w->ne[3] == 1;
}

static bool x8_shape_qualifies(const ggml_tensor * op) {
    const ggml_tensor * w = op->src[0];
    const ggml_tensor * x = op->src[1];
    if (op->op != GGML_OP_MUL_MAT || x->type != GGML_TYPE_F32 || x->nb[0] != sizeof(float) || x->ne[3] != 1 ||
        op->type != GGML_TYPE_F32 || !ggml_is_contiguous(op)) {
        return false;  // none of these reach repack.cpp's MUL_MAT (its supports_op and asserts)
    }
    if (w->type == GGML_TYPE_Q6_K) {
        return q6x8_layout(w);  // every activation shape: rows (ne[1]) by batches (ne[2]), 8 rows a call
    }
    return SBKX8_VARIANT > 0 && w->type == GGML_TYPE_Q4_K && w->ne[0] % 256 == 0 && w->ne[0] / 256 <= 256 &&
           w->ne[1] % 8 == 0 && w->ne[2] == 1 && w->ne[3] == 1 && x->ne[1] >= 1 && x->ne[1] <= SBK_MAX_ROWS &&
           x->ne[2] == 1;
}

static bool is_output_matrix(const ggml_tensor * t) {
    return strcmp(t->name, "output.weight") == 0 || strcmp(t->name, "token_embd.weight") == 0;
}

// Which Q6_K matrices ggml repacks, asked as each loads (the choice then stays with the tensor, see
// sbq6x8-hook.patch): every one sbq6x8 can multiply, unless OMNIDRAFT_SBQ4 is "0" at load.  The output
// matrix too: on the 1.5B Q4_K_M (2 threads, Zen 4) repacking it left T(1) where keeping it plain did and
// cut T(4) / T(8) a little more (results/issue41/q6k-reland).  OMNIDRAFT_SBQ6X8, read at load, is for
// scripts/lab/q6k_variants.py: "none" repacks no Q6_K, "noout" all but the output matrix.
extern "C" int ggml_sbq6x8_repacks(const ggml_tensor * t) {
    const char * v = getenv("OMNIDRAFT_SBQ6X8");
    const bool wanted = v == NULL || (strcmp(v, "none") != 0 && !(strcmp(v, "noout") == 0 && is_output_matrix(t)));
    return q6x8_layout(t) && !sbq4_off() && wanted;
}

extern "C" size_t ggml_sbkx8_work_size(const ggml_tensor * op) {
    return x8_shape_qualifies(op) ? (size_t) (op->src[1]->ne[1] * op->src[1]->ne[2]) * (op->src[0]->ne[0] / 256) * 292
                                  : 0;
}

extern "C" int ggml_sbkx8_takes(const ggml_tensor * op) {
    return x8_shape_qualifies(op) && (op->src[0]->type == GGML_TYPE_Q6_K || !sbq4_off());
}

extern "C" int ggml_sbkx8_mul_mat(const ggml_compute_params * params, ggml_tensor * op) {
    if (params->wsize < ggml_sbkx8_work_size(op)) {
        return 0;  // cannot happen: ggml plans the same bytes (block_q8_K rows of every activation row)
    }
    const ggml_tensor * w = op->src[0];
    const ggml_tensor * x = op->src[1];
    const int ith = params->ith, nth = params->nth;
    const int64_t nb = w->ne[0] / 256;
    const int64_t n = x->ne[1] * x->ne[2];  // activation rows, batch by batch; op is contiguous: row j at j*nb[1]
    uint8_t * act = (uint8_t *) params->wdata;
    const size_t row_bytes = (size_t) nb * 292;
    const size_t dst_stride = op->nb[1] / sizeof(float);
    const auto gemm = w->type == GGML_TYPE_Q6_K ? sbk_q6kx8_gemm : sbk_q4kx8_gemm;

    // every thread quantizes its share of the blocks of every activation row (blocks are independent)
    const int64_t b0 = nb * ith / nth, b1 = nb * (ith + 1) / nth;
    for (int64_t j = 0; j < n; j++) {
        const float * row = (const float *) ((const char *) x->data + (j % x->ne[1]) * x->nb[1] +
                                             (j / x->ne[1]) * x->nb[2]);
        if (b1 > b0) {
            quantize_row_q8_K(row + b0 * 256, act + j * row_bytes + b0 * 292, (b1 - b0) * 256);
        }
    }
    if (ith == 0) {
        ggml_threadpool_chunk_set(params->threadpool, nth);
    }
    ggml_barrier(params->threadpool);

    // groups of 8 weight rows in 4 chunks per thread, taken as threads come free; which thread computes a
    // row never changes its value, nor does which 8 activation rows it shares a call with.  Past 8
    // activation rows (Q6_K only: prompts) a chunk goes 8 groups at a time, so their weights stay in L2
    // while every slice of 8 activation rows passes over them.
    const int64_t ngroups = w->ne[1] / 8;
    const int64_t nchunks = std::min<int64_t>(ngroups, 4 * nth);
    const int64_t step = n > SBK_MAX_ROWS ? 8 : ngroups;
    for (int64_t c = ith; c < nchunks; c = ggml_threadpool_chunk_add(params->threadpool, 1)) {
        const int64_t g0 = ngroups * c / nchunks, g1 = ngroups * (c + 1) / nchunks;
        for (int64_t g = g0; g < g1; g += step) {
            const int64_t ge = std::min(g1, g + step);
            for (int64_t j = 0; j < n; j += SBK_MAX_ROWS) {
                gemm(w->ne[0], w->data, g * 8, ge * 8, act + j * row_bytes, row_bytes,
                     (int) std::min<int64_t>(SBK_MAX_ROWS, n - j), (float *) op->data + j * dst_stride, dst_stride);
            }
        }
    }
    return 1;
}
#endif  // SBK_STANDALONE

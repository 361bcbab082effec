// sbk: omnidraft's small-batch products for Q4_K, Q6_K, Q8_0 and Q5_0 weights (ggml's CPU backend;
// x86 AVX2 and up, and aarch64 NEON with dotprod, plus i8mm chosen at run time from the CPU's hwcaps; the
// aarch64 variants are checked under qemu only, alone and inside a cross-built ggml, never timed on ARM).
//
// Why.  Q4_K_M files (what users download) hold Q4_K and Q6_K matrices; ggml multiplies them by 1..7
// rows with one vec_dot per (weight row, activation row), unpacking every weight block again for every
// row, and from 8 rows with its tiled kernels.  On an AVX2 CPU the decode is bound by those unpacking
// instructions, not by memory, so a 4-row verification pass of Qwen2.5-1.5B cost 3.2 decodes and
// speculation could not pay.  A pass over n <= 8 rows reads the same weights as a decode; only the
// multiply-adds grow.  So this routine unpacks each weight block once (nibbles, high bits, 6-bit
// scales) and feeds all n activation rows from registers.
//
// Exactness.  Every output element gets the same instruction sequence whatever n is and whichever
// thread computes it: one accumulator per activation row, blocks in order, integer sums (exact)
// before one float multiply-add per block.  The activations are quantized by ggml, row by row, as for
// any product.  Rows of a batched pass are therefore bit-identical to one-row decoding by
// construction; decoding (n = 1) goes through here too, for that reason.  The result differs from
// ggml's vec_dot only in float summation order.  (aarch64's i8mm variant computes two weight rows and two
// activation rows per instruction, each output in its own lane with its own accumulator: the same
// argument, lane by lane; see its section.)
//
// Layouts (ggml-common.h).  Q4_K: 256 values, fp16 d and dmin, 12 bytes of 6-bit scales and mins for
// 8 sub-blocks of 32, 128 bytes of nibbles (bytes 32p..32p+31 hold sub-block 2p in the low nibbles and
// 2p+1 in the high ones); value = d*scale*q - dmin*min.  Q6_K: 256 values in two halves of 128; low
// nibbles in ql, two high bits in qh, int8 scales for 16 groups of 16, fp16 d; value = d*scale*(q-32).
// Q8_0: 32 int8 and an fp16 scale; Q5_0 (in small models' Q4_K_M files, whose rows are not a multiple of
// 256): 32 five-bit values.  Activations: Q8_K (float d, 256 int8, sums of each 16) for the
// K-quants, Q8_0 for Q8_0 and Q5_0.  The K-quants' offsets (Q4_K's mins, Q6_K's -32) are applied through the
// activations' block sums, once per block, instead of per value.
#include "sbk.h"

#include <stdlib.h>
#include <string.h>

#include <algorithm>

#if defined(__AVX2__) && defined(__F16C__) && defined(__FMA__)
#include <immintrin.h>
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
#define SBK_VARIANT 3
#elif defined(__AVXVNNI__)
#define SBK_VARIANT 2
#else
#define SBK_VARIANT 1
#endif
#elif defined(__aarch64__) && defined(__ARM_FEATURE_DOTPROD)
#include <arm_neon.h>
#define SBK_VARIANT SBK_NEON_DOTPROD  // the whole file, as ggml-cpu; i8mm may come on top (SBK_I8MM_FN)
#if defined(__linux__)
#include <sys/auxv.h>
#endif
#else
#define SBK_VARIANT 0
#endif
// Q8_0 two blocks a zmm (AVX-512 VNNI builds; see q8act_row_zmm)
#if SBK_VARIANT == 3 && defined(__AVX512BW__)
#define SBK_Q80_ZMM 1
#else
#define SBK_Q80_ZMM 0
#endif
// Q5_0 with its weights as unsigned bytes, the -16 offset taken through the activations (VNNI builds; see
// q50_row_vnni)
#if SBK_VARIANT == 2 || SBK_VARIANT == 3
#define SBK_Q50_BIAS 1
#else
#define SBK_Q50_BIAS 0
#endif

#if SBK_VARIANT > 0
// ================================================================ every architecture: layouts, side table
namespace {

constexpr int QK_K = 256;
constexpr int Q4K_BYTES = 144;  // d, dmin (fp16), scales[12], qs[128]
constexpr int Q6K_BYTES = 210;  // ql[128], qh[64], scales[16], d (fp16)
constexpr int Q8K_BYTES = 292;  // d (float), qs[256], bsums[16] (int16)
constexpr int Q80_BYTES = 34;   // d (fp16), qs[32]
constexpr int Q50_BYTES = 22;   // d (fp16), qh[4], qs[16]
#ifndef SBK_PREFETCH
#define SBK_PREFETCH 4096
#endif
// Bytes ahead of the weight stream (about 20-28 blocks): on the 2-core Zen 4, 4 KiB brought the 1.5B Q4_K_M
// decode from 1.15x upstream's (repacked) to 1.00x; 256 B and 8 KiB were slower.  Not tuned on any ARM core.
constexpr int PREFETCH = SBK_PREFETCH;

inline float f32(const uint8_t * p) {
    float f;
    memcpy(&f, p, 4);
    return f;
}

// Every loop over activation rows, sub-blocks or halves is unrolled: the per-row integer sums and float
// accumulators then live in registers (not unrolled, GCC kept them on the stack from 3 rows up and a pass
// over 3 rows cost 2.2 of one).
#define SBK_UNROLL _Pragma("GCC unroll 8")

// ---------------------------------------------------------------- the activations' side table
// What a product needs of each activation block besides its quants, computed once per call (per thread)
// instead of once per weight row: the scale as a float, and for Q4_K the sums of each 32 quants times
// that scale (what the block's mins multiply).  Every weight row then pays two multiply-adds for its
// block's scale and mins instead of the conversions, horizontal adds and broadcasts behind them.
struct acts {
    const uint8_t * q;      // activation row 0 (ggml's blocks)
    size_t stride;          // bytes between activation rows
    int64_t nb;             // blocks per row
    const float * d;        // [row][block] scale
    const float * sums;     // Q4_K: [row][block][8] scale * sum of each 32 quants
    const int8_t * qc;      // Q8_0 weights on zmm builds: [row][block][32] the activations' quants + 128 (as
                            // unsigned bytes), or null
    const float * dx;       // with qc: [row][block pair][16] the pair's scales, 8 lanes each (0 past the last block)
    const int32_t * bias;   // Q5_0 weights on VNNI builds: [row][block][8] -16 * the sum of each lane's four
                            // activation quants, or null
};

// One per thread, fixed (no allocation that could fail mid-graph): room for 8 rows of 2048 blocks (Q8_0
// rows of 65,536 values; Q4_K's table takes 9 floats a block: 227 blocks, rows of 58,112); wider
// products are left to ggml (ggml_sbk_takes compares table_floats with it).
constexpr size_t TABLE_FLOATS = 16384;
alignas(64) thread_local float TABLE[TABLE_FLOATS];
#if SBK_Q80_ZMM
// Q8_0 activations' quants (of Q8_0 weights' products), contiguous (ggml's blocks put a 2-byte scale
// between each 32), so that one 512-bit load takes two blocks.  Rows of up to 16,384 values; wider ones take
// the ymm code.  Beside them each block pair's two scales spread over the halves of a vector, as
// q8act_row_zmm multiplies them: a load where building it took two broadcasts and a blend per row and pair.
constexpr int64_t QCOPY_BLOCKS = 512;
alignas(64) thread_local int8_t QCOPY[8 * QCOPY_BLOCKS * 32];
alignas(64) thread_local float DXCOPY[8 * QCOPY_BLOCKS / 2 * 16];
#endif
#if SBK_Q50_BIAS
// Each Q5_0 activation block's offset sums (acts::bias), for rows of up to 16,384 values; wider ones take the
// sign-trick code.
constexpr int64_t Q50BIAS_BLOCKS = 512;
alignas(64) thread_local int32_t Q50BIAS[8 * Q50BIAS_BLOCKS * 8];
#endif

// The scales first, then (Q4_K) the sums, starting on a 64-byte boundary.
size_t sums_offset(int n, int64_t nb) { return ((size_t) n * nb + 15) & ~(size_t) 15; }

size_t table_floats(int type, int n, int64_t nb) {
    return sums_offset(n, nb) + (type == SBK_TYPE_Q4_K ? 8 * (size_t) n * nb : 0);
}

}  // namespace
#endif

#if SBK_VARIANT >= 1 && SBK_VARIANT <= 3  // x86

namespace {

inline float fp16(const uint8_t * p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

inline __m256i load(const void * p) { return _mm256_loadu_si256((const __m256i *) p); }

// acc + a0*b0 + a1*b1 per int32 lane (int16 pairs); VNNI fuses the multiply and the add, which gives
// the same integer (both wrap modulo 2^32, and the values here stay far from it).
inline __m256i dot_i16(__m256i acc, __m256i a, __m256i b) {
#if SBK_VARIANT == 3
    return _mm256_dpwssd_epi32(acc, a, b);
#elif SBK_VARIANT == 2
    return _mm256_dpwssd_avx_epi32(acc, a, b);
#else
    return _mm256_add_epi32(acc, _mm256_madd_epi16(a, b));
#endif
}

// acc + sum of four u8*s8 products per int32 lane (u <= 128, |s| <= 127: no 16-bit saturation).
inline __m256i dot_u8s8(__m256i acc, __m256i u, __m256i s) {
#if SBK_VARIANT == 3
    return _mm256_dpbusd_epi32(acc, u, s);
#elif SBK_VARIANT == 2
    return _mm256_dpbusd_avx_epi32(acc, u, s);
#else
    return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)));
#endif
}

inline float hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

// Shuffle controls that spread int16 lane s of each 128-bit half over the whole half.
inline __m256i lane16(int lo, int hi) {
    const __m128i a = _mm_set1_epi16((short) (0x0100 + 0x0202 * lo));
    const __m128i b = _mm_set1_epi16((short) (0x0100 + 0x0202 * hi));
    return _mm256_set_m128i(b, a);
}

// Q4_K's side-table entry: the sums of each 32 activations (pairs of its 16-value sums) times the scale.
inline void scaled_pair_sums(const uint8_t * bsums, float d, float * out) {
    const __m256i bs = load(bsums);
    const __m128i pairs = _mm_hadd_epi16(_mm256_castsi256_si128(bs), _mm256_extracti128_si256(bs, 1));
    _mm256_store_ps(out, _mm256_mul_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(_mm256_cvtepi16_epi32(pairs))));
}

// ---------------------------------------------------------------- Q4_K x Q8_K
// The 8 scales (low half) and 8 mins (high half) of a block as int16, as ggml's reference unpacks them.
inline __m256i q4k_scales_mins(const uint8_t * sc) {
    uint32_t u[4];
    memcpy(u, sc, 12);
    const uint32_t m1 = 0x3f3f3f3f, m2 = 0x0f0f0f0f, m3 = 0x03030303;
    u[3] = ((u[2] >> 4) & m2) | (((u[1] >> 6) & m3) << 4);
    const uint32_t aux = u[1] & m1;
    u[1] = (u[2] & m2) | (((u[0] >> 6) & m3) << 4);
    u[2] = aux;
    u[0] &= m1;
    return _mm256_cvtepu8_epi16(_mm_set_epi32((int) u[3], (int) u[2], (int) u[1], (int) u[0]));
}

template <int N>
void q4k_row(const uint8_t * x, const acts & a, float * out, size_t stride) {
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    __m256 acc[N];
    SBK_UNROLL
    for (int j = 0; j < N; j++) {
        acc[j] = _mm256_setzero_ps();
    }
    for (int64_t i = 0; i < a.nb; i++, x += Q4K_BYTES) {
        _mm_prefetch((const char *) x + PREFETCH, _MM_HINT_T0);
        _mm_prefetch((const char *) x + PREFETCH + 64, _MM_HINT_T0);
        _mm_prefetch((const char *) x + PREFETCH + 128, _MM_HINT_T0);
        const __m256i sm = q4k_scales_mins(x + 4);
        const __m256i scales = _mm256_permute2x128_si256(sm, sm, 0x00);  // the 8 scales in both halves
        // -dmin * min of each sub-block, lane s for sub-block s: times the table's scaled sums
        const __m256 mins = _mm256_mul_ps(_mm256_set1_ps(-fp16(x + 2)),
                                          _mm256_cvtepi32_ps(_mm256_cvtepi16_epi32(_mm256_extracti128_si256(sm, 1))));
        const __m256 d = _mm256_set1_ps(fp16(x));
        const uint8_t * y0 = a.q + i * Q8K_BYTES + 4;
        __m256i sumi[N];
        SBK_UNROLL
        for (int j = 0; j < N; j++) {
            sumi[j] = _mm256_setzero_si256();
        }
        SBK_UNROLL
        for (int p = 0; p < 4; p++) {
            const __m256i bits = load(x + 16 + 32 * p);
            const __m256i wl = _mm256_and_si256(bits, m4);
            const __m256i wh = _mm256_and_si256(_mm256_srli_epi16(bits, 4), m4);
            const __m256i sl = _mm256_shuffle_epi8(scales, lane16(2 * p, 2 * p));
            const __m256i sh = _mm256_shuffle_epi8(scales, lane16(2 * p + 1, 2 * p + 1));
            SBK_UNROLL
            for (int j = 0; j < N; j++) {
                const uint8_t * q = y0 + j * a.stride + 64 * p;
                sumi[j] = dot_i16(sumi[j], sl, _mm256_maddubs_epi16(wl, load(q)));
                sumi[j] = dot_i16(sumi[j], sh, _mm256_maddubs_epi16(wh, load(q + 32)));
            }
        }
        SBK_UNROLL
        for (int j = 0; j < N; j++) {
            const size_t t = j * a.nb + i;
            acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sumi[j]), _mm256_mul_ps(d, _mm256_broadcast_ss(a.d + t)), acc[j]);
            acc[j] = _mm256_fmadd_ps(mins, _mm256_load_ps(a.sums + 8 * t), acc[j]);
        }
    }
    SBK_UNROLL
    for (int j = 0; j < N; j++) {
        out[j * stride] = hsum(acc[j]);
    }
}

// ---------------------------------------------------------------- Q6_K x Q8_K
template <int N>
void q6k_row(const uint8_t * x, const acts & a, float * out, size_t stride) {
    const __m256i m4 = _mm256_set1_epi8(0x0F), m30 = _mm256_set1_epi8(0x30);
    __m256 acc[N];
    SBK_UNROLL
    for (int j = 0; j < N; j++) {
        acc[j] = _mm256_setzero_ps();
    }
    for (int64_t i = 0; i < a.nb; i++, x += Q6K_BYTES) {
        _mm_prefetch((const char *) x + PREFETCH, _MM_HINT_T0);
        _mm_prefetch((const char *) x + PREFETCH + 64, _MM_HINT_T0);
        _mm_prefetch((const char *) x + PREFETCH + 128, _MM_HINT_T0);
        _mm_prefetch((const char *) x + PREFETCH + 192, _MM_HINT_T0);
        const uint8_t * ql = x, * qh = x + 128;
        const int8_t * sc = (const int8_t *) (x + 192);
        const uint8_t * y0 = a.q + i * Q8K_BYTES + 4;
        __m256i sumi[N];
        SBK_UNROLL
        for (int j = 0; j < N; j++) {
            sumi[j] = _mm256_setzero_si256();
        }
        SBK_UNROLL
        for (int c = 0; c < 2; c++) {  // two halves of 128 values
            const __m256i l0 = load(ql + 64 * c), l1 = load(ql + 64 * c + 32), h = load(qh + 32 * c);
            const __m256i q[4] = {  // values 0..63: low nibble | two high bits << 4
                _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_and_si256(_mm256_slli_epi16(h, 4), m30)),
                _mm256_or_si256(_mm256_and_si256(l1, m4), _mm256_and_si256(_mm256_slli_epi16(h, 2), m30)),
                _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4), _mm256_and_si256(h, m30)),
                _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                                _mm256_and_si256(_mm256_srli_epi16(h, 2), m30)),
            };
            // the half's 8 scales as int16 in both 128-bit halves; vector k takes groups 2k and 2k+1
            const __m128i s8 = _mm_cvtepi8_epi16(_mm_loadl_epi64((const __m128i *) (sc + 8 * c)));
            const __m256i s16 = _mm256_set_m128i(s8, s8);
            SBK_UNROLL
            for (int k = 0; k < 4; k++) {
                const __m256i s = _mm256_shuffle_epi8(s16, lane16(2 * k, 2 * k + 1));
                SBK_UNROLL
                for (int j = 0; j < N; j++) {
                    const uint8_t * qy = y0 + j * a.stride + 128 * c + 32 * k;
                    sumi[j] = dot_i16(sumi[j], s, _mm256_maddubs_epi16(q[k], load(qy)));
                }
            }
        }
        const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *) sc));
        const __m256 d = _mm256_set1_ps(fp16(x + 208));
        SBK_UNROLL
        for (int j = 0; j < N; j++) {
            // the -32 offset: 32 * sum over the 16 groups of scale * (sum of its activations)
            const __m256i off = _mm256_slli_epi32(_mm256_madd_epi16(sc16, load(y0 + j * a.stride + QK_K)), 5);
            acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(sumi[j], off)),
                                     _mm256_mul_ps(d, _mm256_broadcast_ss(a.d + j * a.nb + i)), acc[j]);
        }
    }
    SBK_UNROLL
    for (int j = 0; j < N; j++) {
        out[j * stride] = hsum(acc[j]);
    }
}

// ---------------------------------------------------------------- Q8_0 and Q5_0 x Q8_0
// A block's 32 weights as signed bytes.  Q8_0: as stored.  Q5_0: the low nibbles are values 0..15, the
// high nibbles 16..31, and bit i of qh is value i's fifth bit; the value is (nibble | bit << 4) - 16,
// which is the nibble with 0xF0 or-ed in where the bit is clear.
struct q80_block {
    static constexpr int BYTES = Q80_BYTES;
    static __m256i weights(const uint8_t * x) { return load(x + 2); }
};

// A Q5_0 block's 32 nibbles as bytes, value i in byte i (the block's qs: values 0..15 low, 16..31 high).
inline __m256i q50_nibbles(const uint8_t * x) {
    const __m128i qs = _mm_loadu_si128((const __m128i *) (x + 6));
    return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(qs, 4), qs), _mm256_set1_epi8(0x0F));
}

// 0xFF in byte i where value i's fifth bit (bit i of qh) is set: byte i gets qh's byte i/8, then its bit i%8 tested.
inline __m256i q50_fifth_bits(const uint8_t * x) {
    uint32_t qh;
    memcpy(&qh, x + 2, 4);
    const __m256i spread = _mm256_shuffle_epi8(_mm256_set1_epi32((int) qh),
        _mm256_setr_epi64x(0, 0x0101010101010101LL, 0x0202020202020202LL, 0x0303030303030303LL));
    const __m256i bit = _mm256_set1_epi64x(0x8040201008040201LL);
    return _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
}

struct q50_block {
    static constexpr int BYTES = Q50_BYTES;
    static __m256i weights(const uint8_t * x) {
        return _mm256_or_si256(q50_nibbles(x), _mm256_andnot_si256(q50_fifth_bits(x), _mm256_set1_epi8((char) 0xF0)));
    }
};

template <class B, int N>
void q8act_row(const uint8_t * x, const acts & a, float * out, size_t stride) {
    __m256 acc[N];
    SBK_UNROLL
    for (int j = 0; j < N; j++) {
        acc[j] = _mm256_setzero_ps();
    }
    for (int64_t b = 0; b < a.nb; b++, x += B::BYTES) {
        _mm_prefetch((const char *) x + PREFETCH, _MM_HINT_T0);
        const __m256i w = B::weights(x);
        const __m256i aw = _mm256_sign_epi8(w, w);  // |w| as unsigned bytes (-128 -> 128)
        const __m256 d = _mm256_set1_ps(fp16(x));
        SBK_UNROLL
        for (int j = 0; j < N; j++) {
            const uint8_t * y = a.q + j * a.stride + b * Q80_BYTES;
            const __m256i s = dot_u8s8(_mm256_setzero_si256(), aw, _mm256_sign_epi8(load(y + 2), w));
            acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(d, _mm256_broadcast_ss(a.d + j * a.nb + b)),
                                     acc[j]);
        }
    }
    SBK_UNROLL
    for (int j = 0; j < N; j++) {
        out[j * stride] = hsum(acc[j]);
    }
}

#if SBK_Q50_BIAS
// Q5_0 without the sign trick.  A value is u - 16 with u = nibble | fifth bit << 4 in 0..31, an unsigned byte
// as dpbusd takes it, so each row's block sum is dpbusd(bias, u, x): bias is -16 * the sum of x over each
// lane's four bytes (acts::bias, once per call), and each lane's integer equals the sign-trick code's (same
// products, same lane), so the outputs are bit-identical to it and to every other tier's.  What that saves on
// a one-row pass, 55 % of the 0.5B's Q4_K_M bytes: |w| and the per-row sign of x (one op each), and with
// AVX-512 the fifth bits go in as a mask (kmov and a masked add) where the spread took five ops.
template <int N>
void q50_row_vnni(const uint8_t * x, const acts & a, float * out, size_t stride) {
    __m256 acc[N];
    SBK_UNROLL
    for (int j = 0; j < N; j++) {
        acc[j] = _mm256_setzero_ps();
    }
    const __m256i c16 = _mm256_set1_epi8(16);
    for (int64_t b = 0; b < a.nb; b++, x += Q50_BYTES) {
        _mm_prefetch((const char *) x + PREFETCH, _MM_HINT_T0);
        const __m256i nib = q50_nibbles(x);
#if SBK_VARIANT == 3 && defined(__AVX512BW__)
        uint32_t qh;
        memcpy(&qh, x + 2, 4);
        const __m256i u = _mm256_mask_add_epi8(nib, (__mmask32) qh, nib, c16);  // bit i adds 16 to byte i
#else
        const __m256i u = _mm256_or_si256(nib, _mm256_and_si256(q50_fifth_bits(x), c16));
#endif
        uint16_t h;
        memcpy(&h, x, 2);
        const __m256 d = _mm256_cvtph_ps(_mm_set1_epi16((short) h));  // the scale converted in every lane at once
        SBK_UNROLL
        for (int j = 0; j < N; j++) {
            const __m256i s = dot_u8s8(load(a.bias + (j * a.nb + b) * 8), u, load(a.q + j * a.stride + b * Q80_BYTES + 2));
            acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(d, _mm256_broadcast_ss(a.d + j * a.nb + b)),
                                     acc[j]);
        }
    }
    SBK_UNROLL
    for (int j = 0; j < N; j++) {
        out[j * stride] = hsum(acc[j]);
    }
}
#endif

#if SBK_Q80_ZMM
// Q8_0 on 512 bits, two blocks a vector, where the ymm code above spends 7 instructions per 32 weights and row
// (every 32 weights carry their own scale): here 4 per 64 besides loads.  The block type is a parameter (B::BYTES,
// B::weights) because Q5_0 (q50_block) was tried through it: on the 2-core Zen 4 the 0.5B's one-token pass, 55 %
// Q5_0, took 8-10 % longer in the loop (T(8) 10 % less), its unpack costing more as zmm there.  So Q5_0 keeps the
// ymm code and only q80_row instantiates this.  The activations' quants come contiguous (acts::qc), so a row's
// two blocks are one load.  dpbusd multiplies unsigned by signed bytes: the
// activations are stored + 128 (unsigned) and the weights go in as they are, signed; the 128 * sum(w) that adds
// is taken off by starting each row's sum at -128 * sum(w), computed once per pair for every row.  So each row
// pays one dpbusd, no sign fix (this took a masked subtract a row, and |w| and a sign mask a pair), and the sums
// are the same integers as w . x.  The pair's scales come spread over the halves (acts::dx).  Each output takes
// the same instructions whatever the number of rows: batches stay bit-identical to decoding.  An odd last
// block runs with its upper half zero, which adds exactly 0.
inline __m512 halves(float lo, float hi) {  // lanes 0-7 lo, 8-15 hi
    return _mm512_mask_blend_ps(0xFF00, _mm512_set1_ps(lo), _mm512_set1_ps(hi));
}

template <class B, int N>
void q8act_row_zmm(const uint8_t * x, const acts & a, float * out, size_t stride) {
    __m512 acc[N];
    SBK_UNROLL
    for (int j = 0; j < N; j++) {
        acc[j] = _mm512_setzero_ps();
    }
    const __m512i zero = _mm512_setzero_si512();
    const __m512i c128 = _mm512_set1_epi8((char) 0x80);  // 128 as an unsigned byte
    const int64_t pairs = (a.nb + 1) / 2;
    for (int64_t b = 0; b < a.nb; b += 2, x += 2 * B::BYTES) {
        _mm_prefetch((const char *) x + PREFETCH, _MM_HINT_T0);
        _mm_prefetch((const char *) x + PREFETCH + 64, _MM_HINT_T0);
        const bool both = b + 1 < a.nb;
        const __m512i lo = _mm512_zextsi256_si512(B::weights(x));
        const __m512i w = both ? _mm512_inserti64x4(lo, B::weights(x + B::BYTES), 1) : lo;
        const __m512i bias = _mm512_sub_epi32(zero, _mm512_dpbusd_epi32(zero, c128, w));  // -128 * sum(w)
        uint16_t h0, h1 = 0;  // fp16 0 is 0.0f: an odd last block's upper half adds nothing
        memcpy(&h0, x, 2);
        if (both) {
            memcpy(&h1, x + B::BYTES, 2);
        }
        // both scales converted in one op (halves() of the two floats took two conversions and three broadcasts)
        const __m512 dw = _mm512_cvtph_ps(_mm256_mask_set1_epi16(_mm256_set1_epi16((short) h0), 0xFF00, (short) h1));
        SBK_UNROLL
        for (int j = 0; j < N; j++) {
            const int8_t * q = a.qc + (j * a.nb + b) * 32;
            const __m512i av = both ? _mm512_loadu_si512((const void *) q) : _mm512_zextsi256_si512(load(q));
            const __m512i s = _mm512_dpbusd_epi32(bias, av, w);
            const __m512 dx = _mm512_load_ps(a.dx + (j * pairs + b / 2) * 16);
            acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(dw, dx), acc[j]);
        }
    }
    SBK_UNROLL
    for (int j = 0; j < N; j++) {
        out[j * stride] = _mm512_reduce_add_ps(acc[j]);
    }
}
#endif

}  // namespace

#elif SBK_VARIANT == 4  // aarch64
// ================================================================ aarch64: NEON with dotprod, and i8mm
// Two variants: NEON dotprod (the whole file is built for it, like ggml-cpu) and NEON i8mm (in GCC builds
// its functions carry their own target attribute, so a dotprod build has both; clang builds it where the
// flags enable i8mm), chosen once per process from the hwcaps (ggml_cpu_sbk_variant).  The dotprod one
// first, one weight row at a time.
//
// The x86 section's algorithm, block for block: each weight block unpacked once, one integer sum per
// activation row and block (exact), then one float multiply-add per row and block into that row's own
// accumulator; the same templates for 1..8 rows, so every output gets the same instructions whatever n is.
//
// What differs, and why:
// - vdotq_s32 multiplies signed bytes by signed bytes (x86's maddubs and dpbusd take unsigned by signed,
//   hence the x86 code's |w| and sign tricks).  Every weight here fits a signed byte once unpacked: Q4_K's
//   nibbles 0..15, Q6_K's 0..63 (its -32 still applied through the activations' block sums, as on x86),
//   Q8_0 as stored, Q5_0 as -16..15.  So weights and activations go straight into vdotq_s32.
// - vdotq_s32 sums 4 products per int32 lane, so the block scales (Q4_K's per 32 values, Q6_K's per 16)
//   multiply whole lanes: one vmlaq per sub-block and row, in place of x86's int16 multiply-adds.
// - Float vectors have 4 lanes: Q4_K's 8 mins take two multiply-adds.
// - Floats are only combined through explicit vfmaq_f32 or a product stored as is, never a multiply feeding
//   an add, so -ffp-contract (GCC's default fuses in GNU mode) cannot change a result between the templates.
// dotprod is required at compile time (-march=armv8.2-a+dotprod or a CPU that has it), like ggml's own ARM
// kernels: a binary built so needs a CPU with dotprod (Linux hwcap "asimddp") whatever this file does.
namespace {

inline float fp16(const uint8_t * p) {
    __fp16 h;  // IEEE half on AArch64; the conversion to float is exact
    memcpy(&h, p, 2);
    return (float) h;
}

inline int8x16_t s8(const uint8_t * p) { return vreinterpretq_s8_u8(vld1q_u8(p)); }
inline int16x8_t s16(const uint8_t * p) { return vreinterpretq_s16_u8(vld1q_u8(p)); }  // any alignment

// Q4_K's side-table entry (vpaddq adds neighbours in the order of x86's hadd).
inline void scaled_pair_sums(const uint8_t * bsums, float d, float * out) {
    const int16x8_t pairs = vpaddq_s16(s16(bsums), s16(bsums + 16));
    const float32x4_t dd = vdupq_n_f32(d);
    vst1q_f32(out, vmulq_f32(dd, vcvtq_f32_s32(vmovl_s16(vget_low_s16(pairs)))));
    vst1q_f32(out + 4, vmulq_f32(dd, vcvtq_f32_s32(vmovl_high_s16(pairs))));
}

// ---------------------------------------------------------------- Q4_K x Q8_K
// The 8 scales (bytes 0..7) and 8 mins (bytes 8..15) of a block, as ggml's reference unpacks them.
inline uint8x16_t q4k_scales_mins(const uint8_t * sc) {
    uint32_t u[4];
    memcpy(u, sc, 12);
    const uint32_t m1 = 0x3f3f3f3f, m2 = 0x0f0f0f0f, m3 = 0x03030303;
    u[3] = ((u[2] >> 4) & m2) | (((u[1] >> 6) & m3) << 4);
    const uint32_t aux = u[1] & m1;
    u[1] = (u[2] & m2) | (((u[0] >> 6) & m3) << 4);
    u[2] = aux;
    u[0] &= m1;
    return vreinterpretq_u8_u32(vld1q_u32(u));
}

template <int N>
void q4k_row(const uint8_t * x, const acts & a, float * out, size_t stride) {
    const uint8x16_t m4 = vdupq_n_u8(0x0F);
    const int32x4_t zero = vdupq_n_s32(0);
    float32x4_t acc[N];
    SBK_UNROLL
    for (int j = 0; j < N; j++) {
        acc[j] = vdupq_n_f32(0.0f);
    }
    for (int64_t i = 0; i < a.nb; i++, x += Q4K_BYTES) {
        __builtin_prefetch(x + PREFETCH);
        __builtin_prefetch(x + PREFETCH + 64);
        __builtin_prefetch(x + PREFETCH + 128);
        const uint8x16_t sm = q4k_scales_mins(x + 4);
        uint8_t sc[16];
        vst1q_u8(sc, sm);
        // -dmin * min of each sub-block, lane s of mins[s / 4] for sub-block s: times the table's scaled sums
        const uint16x8_t mn = vmovl_high_u8(sm);
        const float32x4_t ndmin = vdupq_n_f32(-fp16(x + 2));
        const float32x4_t mins[2] = {vmulq_f32(ndmin, vcvtq_f32_u32(vmovl_u16(vget_low_u16(mn)))),
                                     vmulq_f32(ndmin, vcvtq_f32_u32(vmovl_high_u16(mn)))};
        const float d = fp16(x);
        const uint8_t * y0 = a.q + i * Q8K_BYTES + 4;
        int32x4_t sumi[N];
        SBK_UNROLL
        for (int j = 0; j < N; j++) {
            sumi[j] = zero;
        }
        SBK_UNROLL
        for (int p = 0; p < 4; p++) {  // 32 bytes: sub-block 2p in the low nibbles, 2p+1 in the high ones
            const uint8x16_t b0 = vld1q_u8(x + 16 + 32 * p), b1 = vld1q_u8(x + 32 + 32 * p);
            const int8x16_t wl0 = vreinterpretq_s8_u8(vandq_u8(b0, m4)), wl1 = vreinterpretq_s8_u8(vandq_u8(b1, m4));
            const int8x16_t wh0 = vreinterpretq_s8_u8(vshrq_n_u8(b0, 4)), wh1 = vreinterpretq_s8_u8(vshrq_n_u8(b1, 4));
            const int32_t sl = sc[2 * p], sh = sc[2 * p + 1];
            SBK_UNROLL
            for (int j = 0; j < N; j++) {
                const uint8_t * q = y0 + j * a.stride + 64 * p;
                const int32x4_t pl = vdotq_s32(vdotq_s32(zero, wl0, s8(q)), wl1, s8(q + 16));
                const int32x4_t ph = vdotq_s32(vdotq_s32(zero, wh0, s8(q + 32)), wh1, s8(q + 48));
                sumi[j] = vmlaq_n_s32(vmlaq_n_s32(sumi[j], pl, sl), ph, sh);
            }
        }
        SBK_UNROLL
        for (int j = 0; j < N; j++) {
            const size_t t = j * a.nb + i;
            acc[j] = vfmaq_f32(acc[j], vcvtq_f32_s32(sumi[j]), vdupq_n_f32(d * a.d[t]));
            acc[j] = vfmaq_f32(acc[j], mins[0], vld1q_f32(a.sums + 8 * t));
            acc[j] = vfmaq_f32(acc[j], mins[1], vld1q_f32(a.sums + 8 * t + 4));
        }
    }
    SBK_UNROLL
    for (int j = 0; j < N; j++) {
        out[j * stride] = vaddvq_f32(acc[j]);
    }
}

// ---------------------------------------------------------------- Q6_K x Q8_K
// Values 0..63 (low nibble | two high bits << 4) from 16 bytes each of ql (l0: values v.., l1: v+32..) and
// qh (hb): q[k] holds values v + 32k.., for a half's k-th quarter.
inline void q6k_values(uint8x16_t l0, uint8x16_t l1, uint8x16_t hb, int8x16_t q[4]) {
    const uint8x16_t m4 = vdupq_n_u8(0x0F), m30 = vdupq_n_u8(0x30);
    q[0] = vreinterpretq_s8_u8(vorrq_u8(vandq_u8(l0, m4), vandq_u8(vshlq_n_u8(hb, 4), m30)));
    q[1] = vreinterpretq_s8_u8(vorrq_u8(vandq_u8(l1, m4), vandq_u8(vshlq_n_u8(hb, 2), m30)));
    q[2] = vreinterpretq_s8_u8(vorrq_u8(vshrq_n_u8(l0, 4), vandq_u8(hb, m30)));
    q[3] = vreinterpretq_s8_u8(vorrq_u8(vshrq_n_u8(l1, 4), vandq_u8(vshrq_n_u8(hb, 2), m30)));
}

template <int N>
void q6k_row(const uint8_t * x, const acts & a, float * out, size_t stride) {
    const int32x4_t zero = vdupq_n_s32(0);
    float32x4_t acc[N];
    SBK_UNROLL
    for (int j = 0; j < N; j++) {
        acc[j] = vdupq_n_f32(0.0f);
    }
    for (int64_t i = 0; i < a.nb; i++, x += Q6K_BYTES) {
        __builtin_prefetch(x + PREFETCH);
        __builtin_prefetch(x + PREFETCH + 64);
        __builtin_prefetch(x + PREFETCH + 128);
        __builtin_prefetch(x + PREFETCH + 192);
        const uint8_t * ql = x, * qh = x + 128;
        const int8_t * sc = (const int8_t *) (x + 192);
        const uint8_t * y0 = a.q + i * Q8K_BYTES + 4;
        int32x4_t sumi[N];
        SBK_UNROLL
        for (int j = 0; j < N; j++) {
            sumi[j] = zero;
        }
        SBK_UNROLL
        for (int c = 0; c < 2; c++) {  // two halves of 128 values
            SBK_UNROLL
            for (int h = 0; h < 2; h++) {  // 16 bytes at a time: q[k] holds values 128c + 32k + 16h.. of group 8c+2k+h
                const uint8x16_t l0 = vld1q_u8(ql + 64 * c + 16 * h), l1 = vld1q_u8(ql + 64 * c + 32 + 16 * h);
                int8x16_t q[4];
                q6k_values(l0, l1, vld1q_u8(qh + 32 * c + 16 * h), q);
                SBK_UNROLL
                for (int k = 0; k < 4; k++) {
                    const int32_t s = sc[8 * c + 2 * k + h];
                    SBK_UNROLL
                    for (int j = 0; j < N; j++) {
                        const uint8_t * qy = y0 + j * a.stride + 128 * c + 32 * k + 16 * h;
                        sumi[j] = vmlaq_n_s32(sumi[j], vdotq_s32(zero, q[k], s8(qy)), s);
                    }
                }
            }
        }
        const int16x8_t sc0 = vmovl_s8(vld1_s8(sc)), sc1 = vmovl_s8(vld1_s8(sc + 8));
        const float d = fp16(x + 208);
        SBK_UNROLL
        for (int j = 0; j < N; j++) {
            // the -32 offset: 32 * sum over the 16 groups of scale * (sum of its activations)
            const uint8_t * bs = y0 + j * a.stride + QK_K;
            const int16x8_t bs0 = s16(bs), bs1 = s16(bs + 16);
            int32x4_t off = vmull_s16(vget_low_s16(sc0), vget_low_s16(bs0));
            off = vmlal_high_s16(off, sc0, bs0);
            off = vmlal_s16(off, vget_low_s16(sc1), vget_low_s16(bs1));
            off = vmlal_high_s16(off, sc1, bs1);
            acc[j] = vfmaq_f32(acc[j], vcvtq_f32_s32(vsubq_s32(sumi[j], vshlq_n_s32(off, 5))),
                               vdupq_n_f32(d * a.d[j * a.nb + i]));
        }
    }
    SBK_UNROLL
    for (int j = 0; j < N; j++) {
        out[j * stride] = vaddvq_f32(acc[j]);
    }
}

// ---------------------------------------------------------------- Q8_0 and Q5_0 x Q8_0
// A block's 32 weights as two vectors of signed bytes.  Q8_0: as stored.  Q5_0: the low nibbles are
// values 0..15, the high nibbles 16..31, and bit i of qh is value i's fifth bit; the value is
// (nibble | bit << 4) - 16, which is the nibble with 0xF0 or-ed in where the bit is clear.
struct q80_block {
    static constexpr int BYTES = Q80_BYTES;
    static int8x16x2_t weights(const uint8_t * x) { return {{s8(x + 2), s8(x + 18)}}; }
};

struct q50_block {
    static constexpr int BYTES = Q50_BYTES;
    static int8x16x2_t weights(const uint8_t * x) {
        const uint8x16_t qs = vld1q_u8(x + 6);
        uint32_t qh;
        memcpy(&qh, x + 2, 4);
        // byte i gets qh's byte i/8, then its bit i%8 tested: 0xFF where the fifth bit is set
        const uint8x16_t h = vreinterpretq_u8_u32(vdupq_n_u32(qh));
        const uint8x16_t lo_idx = vcombine_u8(vdup_n_u8(0), vdup_n_u8(1)), hi_idx = vcombine_u8(vdup_n_u8(2), vdup_n_u8(3));
        const uint8x16_t bit = vreinterpretq_u8_u64(vdupq_n_u64(0x8040201008040201ULL));
        const uint8x16_t clear_lo = vbicq_u8(vdupq_n_u8(0xF0), vtstq_u8(vqtbl1q_u8(h, lo_idx), bit));
        const uint8x16_t clear_hi = vbicq_u8(vdupq_n_u8(0xF0), vtstq_u8(vqtbl1q_u8(h, hi_idx), bit));
        return {{vreinterpretq_s8_u8(vorrq_u8(vandq_u8(qs, vdupq_n_u8(0x0F)), clear_lo)),
                 vreinterpretq_s8_u8(vorrq_u8(vshrq_n_u8(qs, 4), clear_hi))}};
    }
};

template <class B, int N>
void q8act_row(const uint8_t * x, const acts & a, float * out, size_t stride) {
    const int32x4_t zero = vdupq_n_s32(0);
    float32x4_t acc[N];
    SBK_UNROLL
    for (int j = 0; j < N; j++) {
        acc[j] = vdupq_n_f32(0.0f);
    }
    for (int64_t b = 0; b < a.nb; b++, x += B::BYTES) {
        __builtin_prefetch(x + PREFETCH);
        const int8x16x2_t w = B::weights(x);
        const float d = fp16(x);
        SBK_UNROLL
        for (int j = 0; j < N; j++) {
            const uint8_t * y = a.q + j * a.stride + b * Q80_BYTES + 2;
            const int32x4_t s = vdotq_s32(vdotq_s32(zero, w.val[0], s8(y)), w.val[1], s8(y + 16));
            acc[j] = vfmaq_f32(acc[j], vcvtq_f32_s32(s), vdupq_n_f32(d * a.d[j * a.nb + b]));
        }
    }
    SBK_UNROLL
    for (int j = 0; j < N; j++) {
        out[j * stride] = vaddvq_f32(acc[j]);
    }
}

// ---------------------------------------------------------------- NEON i8mm: two weight rows at a time
// vmmlaq_s32(c, a, b) adds to c, a 2x2 int32 tile, the dot products of a's two 8-byte halves with b's: lane
// 2u + v gets dot(a half u, b half v).  Weights go in a (halves: weight rows r and r+1), activations in b
// (halves: activation rows j and j+1), so a tile's lanes are the outputs (r, j), (r, j+1), (r+1, j), (r+1, j+1)
// and one instruction does 32 byte products against vdotq_s32's 16.  Each weight block is unpacked once for
// the pair of rows (interleaved 8 bytes at a time, vzip on 64-bit lanes) and feeds every pair of activation
// rows.  An odd last activation row is paired with itself, and a weight range's odd last row likewise
// (row r+1 = row r); the twin's outputs are dropped.
//
// Exactness: a tile lane's integer sums are exact whatever its neighbours are, and the float operations
// after them are lane-wise (convert, multiply by that output's own scales, vfmaq into that output's
// accumulator, blocks in order), so an output gets the same bits whatever n is, whichever row it is paired
// with and wherever a thread's range of weight rows starts: batched rows stay bit-identical to one-row
// decoding.  Against the dotprod variant: a block's products are summed whole in one int32 (dotprod keeps
// 4 lanes and adds them in float at the end), and Q4_K's mins and Q6_K's -32 are applied in integers
// (below), so the two variants agree to float rounding, not bit for bit (the qemu test checks both).  The
// scalar unpacking (Q4_K's scales, fp16 scales) is the dotprod variant's.
//
// Built where the compiler can target i8mm: a file compiled with it on (__ARM_FEATURE_MATMUL_INT8), or GCC
// through each function's target attribute (clang 14's arm_neon.h declares vmmlaq only when the flags
// enable it; as in sbq4.cpp).
#if defined(__ARM_FEATURE_MATMUL_INT8)
#define SBK_I8MM_FN
#elif !defined(__clang__)
#define SBK_I8MM_FN __attribute__((target("+i8mm")))
#endif

#ifdef SBK_I8MM_FN
// Halves 0 of a and b (pair_lo), or halves 1 (pair_hi): two rows' same 8 bytes, as one mmla operand.
inline int8x16_t pair_lo(int8x16_t a, int8x16_t b) {
    return vreinterpretq_s8_s64(vzip1q_s64(vreinterpretq_s64_s8(a), vreinterpretq_s64_s8(b)));
}
inline int8x16_t pair_hi(int8x16_t a, int8x16_t b) {
    return vreinterpretq_s8_s64(vzip2q_s64(vreinterpretq_s64_s8(a), vreinterpretq_s64_s8(b)));
}

// A per-weight-row value on its two tile lanes (a, a, b, b), and a per-activation-row one (a, b, a, b).
inline int32x4_t per_wrow(int32_t a, int32_t b) { return vcombine_s32(vdup_n_s32(a), vdup_n_s32(b)); }
inline float32x4_t per_wrow(float a, float b) { return vcombine_f32(vdup_n_f32(a), vdup_n_f32(b)); }
inline float32x4_t per_arow(float a, float b) {
    const float32x2_t v = vset_lane_f32(b, vdup_n_f32(a), 1);
    return vcombine_f32(v, v);
}

// The activation row paired with row j of n: j + 1, or j itself for an odd last row.
constexpr int twin(int j, int n) { return j + 1 < n ? j + 1 : j; }

// c + the tile of 16 values: w0 and w1 hold both weight rows' values 0..7 and 8..15 (pair_lo, pair_hi),
// y and y2 the two activation rows' 16 bytes.
SBK_I8MM_FN inline int32x4_t mmla16(int32x4_t c, int8x16_t w0, int8x16_t w1, const uint8_t * y, const uint8_t * y2) {
    const int8x16_t a = s8(y), b = s8(y2);
    return vmmlaq_s32(vmmlaq_s32(c, w0, pair_lo(a, b)), w1, pair_hi(a, b));
}

// The tile's outputs: weight row r's to out0[j * stride], row r+1's to out1[j * stride] (out1 null: an odd
// last row, its twin dropped), activation row j+1's only where it is not a twin.
template <int N>
inline void store_tiles(const float32x4_t * acc, float * out0, float * out1, size_t stride) {
    SBK_UNROLL
    for (int j = 0; j < N; j += 2) {
        out0[j * stride] = vgetq_lane_f32(acc[j / 2], 0);
        if (j + 1 < N) {
            out0[(j + 1) * stride] = vgetq_lane_f32(acc[j / 2], 1);
        }
        if (out1 != nullptr) {
            out1[j * stride] = vgetq_lane_f32(acc[j / 2], 2);
            if (j + 1 < N) {
                out1[(j + 1) * stride] = vgetq_lane_f32(acc[j / 2], 3);
            }
        }
    }
}

// The activation scales of rows j and twin(j, n) for block i, on the tile's lanes.
inline float32x4_t act_scales(const acts & a, int64_t i, int j, int n) {
    return per_arow(a.d[j * a.nb + i], a.d[twin(j, n) * a.nb + i]);
}

// acc[t] += the tiles' int32 sums * (weight row scale dw * activation scale), lane by lane: a block's one
// vfmaq per output and term.
template <int N>
inline void add_tiles(float32x4_t * acc, const int32x4_t * sumi, float32x4_t dw, const acts & a, int64_t i) {
    SBK_UNROLL
    for (int j = 0; j < N; j += 2) {
        acc[j / 2] = vfmaq_f32(acc[j / 2], vcvtq_f32_s32(sumi[j / 2]), vmulq_f32(dw, act_scales(a, i, j, N)));
    }
}

// What the i8mm kernels share: the blocks in order, F::block<N> adding block i of weight rows x0 and x1 to
// the (N + 1) / 2 tiles' float accumulators; then the outputs stored.
template <class F, int N>
SBK_I8MM_FN void mmla_pair(const uint8_t * x0, const uint8_t * x1, const acts & a, float * out0, float * out1,
                           size_t stride) {
    float32x4_t acc[(N + 1) / 2] = {};
    for (int64_t i = 0; i < a.nb; i++, x0 += F::BYTES, x1 += F::BYTES) {
        SBK_UNROLL
        for (int o = 0; o < F::BYTES; o += 64) {  // the cache lines of a block, as the dotprod kernels fetch them
            __builtin_prefetch(x0 + PREFETCH + o);
            __builtin_prefetch(x1 + PREFETCH + o);
        }
        F::template block<N>(x0, x1, a, i, acc);
    }
    store_tiles<N>(acc, out0, out1, stride);
}

// Q4_K's mins in integers: the tile of sum over the 8 sub-blocks of min (weight row) times the activations'
// 32-value sums (pairs of Q8_K's 16-value sums: |sum| <= 4096, times min <= 63, times 8: far inside int32).
inline int32x4_t dot8(int16x8_t u, int16x8_t v) {
    return vmlal_high_s16(vmull_s16(vget_low_s16(u), vget_low_s16(v)), u, v);
}
inline int32x4_t q4k_min_tile(const uint8_t * sm0, const uint8_t * sm1, const uint8_t * bs, const uint8_t * bs2) {
    const int16x8_t m0 = vreinterpretq_s16_u16(vmovl_u8(vld1_u8(sm0 + 8))), m1 = vreinterpretq_s16_u16(vmovl_u8(vld1_u8(sm1 + 8)));
    const int16x8_t p = vpaddq_s16(s16(bs), s16(bs + 16)), p2 = vpaddq_s16(s16(bs2), s16(bs2 + 16));
    return vpaddq_s32(vpaddq_s32(dot8(m0, p), dot8(m0, p2)), vpaddq_s32(dot8(m1, p), dot8(m1, p2)));
}

struct q4k_mmla {
    static constexpr int BYTES = Q4K_BYTES;
    template <int N>
    SBK_I8MM_FN static void block(const uint8_t * x0, const uint8_t * x1, const acts & a, int64_t i, float32x4_t * acc) {
        const uint8x16_t m4 = vdupq_n_u8(0x0F);
        uint8_t sm0[16], sm1[16];  // scales (bytes 0..7) and mins (8..15) of rows r and r+1
        vst1q_u8(sm0, q4k_scales_mins(x0 + 4));
        vst1q_u8(sm1, q4k_scales_mins(x1 + 4));
        const uint8_t * y0 = a.q + i * Q8K_BYTES + 4;
        int32x4_t sumi[(N + 1) / 2] = {};
        SBK_UNROLL
        for (int p = 0; p < 4; p++) {  // 32 bytes a row: sub-block 2p in the low nibbles, 2p+1 in the high ones
            int8x16_t lo[4], hi[4];    // [2h], [2h+1]: both rows' values 16h..16h+7, 16h+8..16h+15
            SBK_UNROLL
            for (int h = 0; h < 2; h++) {
                const int8x16_t b0 = s8(x0 + 16 + 32 * p + 16 * h), b1 = s8(x1 + 16 + 32 * p + 16 * h);
                const uint8x16_t z[2] = {vreinterpretq_u8_s8(pair_lo(b0, b1)), vreinterpretq_u8_s8(pair_hi(b0, b1))};
                SBK_UNROLL
                for (int e = 0; e < 2; e++) {
                    lo[2 * h + e] = vreinterpretq_s8_u8(vandq_u8(z[e], m4));
                    hi[2 * h + e] = vreinterpretq_s8_u8(vshrq_n_u8(z[e], 4));
                }
            }
            const int32x4_t sl = per_wrow((int32_t) sm0[2 * p], (int32_t) sm1[2 * p]);
            const int32x4_t sh = per_wrow((int32_t) sm0[2 * p + 1], (int32_t) sm1[2 * p + 1]);
            SBK_UNROLL
            for (int j = 0; j < N; j += 2) {
                const uint8_t * q = y0 + j * a.stride + 64 * p, * q2 = y0 + twin(j, N) * a.stride + 64 * p;
                const int32x4_t tl = mmla16(mmla16(vdupq_n_s32(0), lo[0], lo[1], q, q2), lo[2], lo[3], q + 16, q2 + 16);
                const int32x4_t th = mmla16(mmla16(vdupq_n_s32(0), hi[0], hi[1], q + 32, q2 + 32), hi[2], hi[3], q + 48, q2 + 48);
                sumi[j / 2] = vmlaq_s32(vmlaq_s32(sumi[j / 2], tl, sl), th, sh);
            }
        }
        int32x4_t mins[(N + 1) / 2];
        SBK_UNROLL
        for (int j = 0; j < N; j += 2) {
            mins[j / 2] = q4k_min_tile(sm0, sm1, y0 + j * a.stride + QK_K, y0 + twin(j, N) * a.stride + QK_K);
        }
        add_tiles<N>(acc, sumi, per_wrow(fp16(x0), fp16(x1)), a, i);                // d * scale * q
        add_tiles<N>(acc, mins, per_wrow(-fp16(x0 + 2), -fp16(x1 + 2)), a, i);      // - dmin * min
    }
};

// Q6_K: the values less 32 fit a signed byte (-32..31), so the offset goes into the weights, once per pair of
// weight rows, instead of through the activations' block sums for every activation row.
struct q6k_mmla {
    static constexpr int BYTES = Q6K_BYTES;
    template <int N>
    SBK_I8MM_FN static void block(const uint8_t * x0, const uint8_t * x1, const acts & a, int64_t i, float32x4_t * acc) {
        const int8x16_t k32 = vdupq_n_s8(32);
        const int8_t * sc0 = (const int8_t *) (x0 + 192), * sc1 = (const int8_t *) (x1 + 192);
        const uint8_t * y0 = a.q + i * Q8K_BYTES + 4;
        int32x4_t sumi[(N + 1) / 2] = {};
        SBK_UNROLL
        for (int c = 0; c < 2; c++) {  // two halves of 128 values
            SBK_UNROLL
            for (int h = 0; h < 2; h++) {  // q[e][k]: both rows' values 128c + 32k + 16h + 8e.., group 8c+2k+h
                int8x16_t q[2][4];
                const int o = 64 * c + 16 * h;
                const int8x16_t l0[2] = {s8(x0 + o), s8(x1 + o)}, l1[2] = {s8(x0 + o + 32), s8(x1 + o + 32)};
                const int8x16_t hb[2] = {s8(x0 + 128 + 32 * c + 16 * h), s8(x1 + 128 + 32 * c + 16 * h)};
                q6k_values(vreinterpretq_u8_s8(pair_lo(l0[0], l0[1])), vreinterpretq_u8_s8(pair_lo(l1[0], l1[1])),
                           vreinterpretq_u8_s8(pair_lo(hb[0], hb[1])), q[0]);
                q6k_values(vreinterpretq_u8_s8(pair_hi(l0[0], l0[1])), vreinterpretq_u8_s8(pair_hi(l1[0], l1[1])),
                           vreinterpretq_u8_s8(pair_hi(hb[0], hb[1])), q[1]);
                SBK_UNROLL
                for (int k = 0; k < 4; k++) {
                    const int g = 8 * c + 2 * k + h, v = 128 * c + 32 * k + 16 * h;
                    const int32x4_t s = per_wrow((int32_t) sc0[g], (int32_t) sc1[g]);
                    const int8x16_t w0 = vsubq_s8(q[0][k], k32), w1 = vsubq_s8(q[1][k], k32);
                    SBK_UNROLL
                    for (int j = 0; j < N; j += 2) {
                        const uint8_t * qy = y0 + j * a.stride + v, * qy2 = y0 + twin(j, N) * a.stride + v;
                        sumi[j / 2] = vmlaq_s32(sumi[j / 2], mmla16(vdupq_n_s32(0), w0, w1, qy, qy2), s);
                    }
                }
            }
        }
        add_tiles<N>(acc, sumi, per_wrow(fp16(x0 + 208), fp16(x1 + 208)), a, i);
    }
};

template <class B>
struct q8act_mmla {
    static constexpr int BYTES = B::BYTES;
    template <int N>
    SBK_I8MM_FN static void block(const uint8_t * x0, const uint8_t * x1, const acts & a, int64_t i, float32x4_t * acc) {
        const int8x16x2_t v0 = B::weights(x0), v1 = B::weights(x1);
        const int8x16_t w[4] = {pair_lo(v0.val[0], v1.val[0]), pair_hi(v0.val[0], v1.val[0]),
                                pair_lo(v0.val[1], v1.val[1]), pair_hi(v0.val[1], v1.val[1])};
        int32x4_t sumi[(N + 1) / 2];
        SBK_UNROLL
        for (int j = 0; j < N; j += 2) {
            const uint8_t * y = a.q + j * a.stride + i * Q80_BYTES + 2, * y2 = a.q + twin(j, N) * a.stride + i * Q80_BYTES + 2;
            sumi[j / 2] = mmla16(mmla16(vdupq_n_s32(0), w[0], w[1], y, y2), w[2], w[3], y + 16, y2 + 16);
        }
        add_tiles<N>(acc, sumi, per_wrow(fp16(x0), fp16(x1)), a, i);
    }
};
#endif  // SBK_I8MM_FN

}  // namespace
#endif  // aarch64

#if SBK_VARIANT > 0
// ================================================================ every architecture
namespace {

acts prepare(int type, const uint8_t * act, size_t stride, int n, int64_t nb) {
    float * t = TABLE;
    acts a = {act, stride, nb, t, t + sums_offset(n, nb), nullptr, nullptr, nullptr};
#if SBK_Q80_ZMM
    int8_t * qc = type == SBK_TYPE_Q8_0 && nb <= QCOPY_BLOCKS ? QCOPY : nullptr;
    a.qc = qc;
    a.dx = qc != nullptr ? DXCOPY : nullptr;
#endif
#if SBK_Q50_BIAS
    int32_t * bias = type == SBK_TYPE_Q5_0 && nb <= Q50BIAS_BLOCKS ? Q50BIAS : nullptr;
    a.bias = bias;
#endif
    for (int j = 0; j < n; j++) {
        for (int64_t i = 0; i < nb; i++) {
            float * d = t + j * nb + i;
            if (type == SBK_TYPE_Q4_K || type == SBK_TYPE_Q6_K) {
                const uint8_t * y = act + j * stride + i * Q8K_BYTES;
                *d = f32(y);
                if (type == SBK_TYPE_Q4_K) {
                    scaled_pair_sums(y + 4 + QK_K, *d, t + sums_offset(n, nb) + (j * nb + i) * 8);
                }
            } else {
                *d = fp16(act + j * stride + i * Q80_BYTES);
#if SBK_Q80_ZMM
                if (qc != nullptr) {  // x + 128 as an unsigned byte is x with its top bit flipped
                    _mm256_storeu_si256((__m256i *) (qc + (j * nb + i) * 32),
                                        _mm256_xor_si256(load(act + j * stride + i * Q80_BYTES + 2),
                                                         _mm256_set1_epi8((char) 0x80)));
                }
#endif
#if SBK_Q50_BIAS
                if (bias != nullptr) {  // 16 * each lane's sum, negated
                    const __m256i x16 = dot_u8s8(_mm256_setzero_si256(), _mm256_set1_epi8(16),
                                                 load(act + j * stride + i * Q80_BYTES + 2));
                    _mm256_store_si256((__m256i *) (bias + (j * nb + i) * 8), _mm256_sub_epi32(_mm256_setzero_si256(), x16));
                }
#endif
            }
        }
    }
#if SBK_Q80_ZMM
    if (a.qc != nullptr) {
        const int64_t pairs = (nb + 1) / 2;
        for (int j = 0; j < n; j++) {
            for (int64_t p = 0; p < pairs; p++) {
                const float d1 = 2 * p + 1 < nb ? t[j * nb + 2 * p + 1] : 0.0f;
                _mm512_store_ps(DXCOPY + (j * pairs + p) * 16, halves(t[j * nb + 2 * p], d1));
            }
        }
    }
#endif
    return a;
}

using row_fn = void (*)(const uint8_t *, const acts &, float *, size_t);
// Weight rows r and r+1 (x1, out1; out1 null where x1 is row r again, an odd last row).
using pair_fn = void (*)(const uint8_t *, const uint8_t *, const acts &, float *, float *, size_t);

template <int N> void q80_row(const uint8_t * x, const acts & a, float * o, size_t s) {
#if SBK_Q80_ZMM
    if (a.qc != nullptr) {  // decided by the row length alone: every batch of one product takes the same path
        q8act_row_zmm<q80_block, N>(x, a, o, s);
        return;
    }
#endif
    q8act_row<q80_block, N>(x, a, o, s);
}
template <int N> void q50_row(const uint8_t * x, const acts & a, float * o, size_t s) {
#if SBK_Q50_BIAS
    if (a.bias != nullptr) {  // by the row length alone, as q80_row
        q50_row_vnni<N>(x, a, o, s);
        return;
    }
#endif
    q8act_row<q50_block, N>(x, a, o, s);
}

#define SBK_TABLE(fn) \
    {nullptr, fn<1>, fn<2>, fn<3>, fn<4>, fn<5>, fn<6>, fn<7>, fn<8>}
// [format][n]: Q4_K, Q6_K, Q8_0, Q5_0
constexpr row_fn ROWS[4][SBK_MAX_ROWS + 1] = {SBK_TABLE(q4k_row), SBK_TABLE(q6k_row), SBK_TABLE(q80_row),
                                              SBK_TABLE(q50_row)};
#ifdef SBK_I8MM_FN
#define SBK_PAIRS(F) \
    {nullptr, mmla_pair<F, 1>, mmla_pair<F, 2>, mmla_pair<F, 3>, mmla_pair<F, 4>, \
     mmla_pair<F, 5>, mmla_pair<F, 6>, mmla_pair<F, 7>, mmla_pair<F, 8>}
constexpr pair_fn PAIRS[4][SBK_MAX_ROWS + 1] = {SBK_PAIRS(q4k_mmla), SBK_PAIRS(q6k_mmla),
                                                SBK_PAIRS(q8act_mmla<q80_block>), SBK_PAIRS(q8act_mmla<q50_block>)};
#endif

// A variant's routine for one format and row count: one weight row at a time (x86, NEON dotprod) or two
// (NEON i8mm).  Empty for what this build does not take.
struct kernel {
    row_fn row = nullptr;
    pair_fn pair = nullptr;
    bool ok() const { return row != nullptr || pair != nullptr; }
};

// The kernel for a variant, type and row count, and blocks per row.
kernel pick(int variant, int type, int n, int64_t k, int64_t * nb) {
    const int f = type == SBK_TYPE_Q4_K ? 0 : type == SBK_TYPE_Q6_K ? 1 : type == SBK_TYPE_Q8_0 ? 2
                : type == SBK_TYPE_Q5_0 ? 3 : -1;
    if (n < 1 || n > SBK_MAX_ROWS || f < 0) {
        return {};
    }
    *nb = k / (f < 2 ? QK_K : 32);
    kernel out;
#ifdef SBK_I8MM_FN
    if (variant == SBK_NEON_I8MM) {
        out.pair = PAIRS[f][n];
    }
#endif
    if (variant == SBK_VARIANT) {
        out.row = ROWS[f][n];
    }
    return out;
}

// dst[j*stride + r] for weight rows [r0, r1), which may start or end on an odd row (ggml's chunks).
void run_rows(const kernel & kn, const uint8_t * w, size_t w_row_bytes, int64_t r0, int64_t r1, const acts & a,
              float * dst, size_t stride) {
    if (kn.pair != nullptr) {
        for (int64_t r = r0; r < r1; r += 2) {
            const bool two = r + 1 < r1;
            kn.pair(w + r * w_row_bytes, w + (two ? r + 1 : r) * w_row_bytes, a, dst + r, two ? dst + r + 1 : nullptr,
                    stride);
        }
        return;
    }
    for (int64_t r = r0; r < r1; r++) {
        kn.row(w + r * w_row_bytes, a, dst + r, stride);
    }
}

}  // namespace

extern "C" int sbk_gemm_as(int variant, int type, int64_t k, const void * w, size_t w_row_bytes, int64_t r0,
                           int64_t r1, const void * act, size_t act_row_bytes, int n, float * dst, size_t dst_stride) {
    int64_t nb = 0;
    const kernel kn = pick(variant, type, n, k, &nb);
    if (!kn.ok() || table_floats(type, n, nb) > TABLE_FLOATS) {
        return 0;
    }
    const acts a = prepare(type, (const uint8_t *) act, act_row_bytes, n, nb);
    run_rows(kn, (const uint8_t *) w, w_row_bytes, r0, r1, a, dst, dst_stride);
    return 1;
}

#else  // SBK_VARIANT == 0: nothing to offer; ggml's own kernels run

extern "C" int sbk_gemm_as(int, int, int64_t, const void *, size_t, int64_t, int64_t, const void *, size_t, int,
                           float *, size_t) {
    return 0;
}

#endif

// Linux's hwcap bits (asm/hwcap.h), spelled out for libcs that lack the newer names.
#define SBK_HWCAP_ASIMDDP (1ULL << 20)
#define SBK_HWCAP2_I8MM (1ULL << 13)

extern "C" int ggml_cpu_sbk_variant(void) {
#if defined(SBK_I8MM_FN) && defined(__linux__)
    // i8mm where the CPU has it: the hwcaps read once per process, the answer kept for every product
    static const int variant = (getauxval(AT_HWCAP) & SBK_HWCAP_ASIMDDP) && (getauxval(AT_HWCAP2) & SBK_HWCAP2_I8MM)
                                   ? SBK_NEON_I8MM : SBK_VARIANT;
    return variant;
#elif defined(__ARM_FEATURE_MATMUL_INT8)
    return SBK_NEON_I8MM;  // no hwcaps to ask; the build needs i8mm anyway
#else
    return SBK_VARIANT;
#endif
}

extern "C" int sbk_gemm(int type, int64_t k, const void * w, size_t w_row_bytes, int64_t r0, int64_t r1,
                        const void * act, size_t act_row_bytes, int n, float * dst, size_t dst_stride) {
    return sbk_gemm_as(ggml_cpu_sbk_variant(), type, k, w, w_row_bytes, r0, r1, act, act_row_bytes, n, dst,
                       dst_stride);
}

#ifndef SBK_STANDALONE
// ---------------------------------------------------------------- the ggml side
#include "ggml.h"
#include "ggml-cpu-impl.h"

static_assert(SBK_TYPE_Q5_0 == GGML_TYPE_Q5_0 && SBK_TYPE_Q8_0 == GGML_TYPE_Q8_0 &&
              SBK_TYPE_Q4_K == GGML_TYPE_Q4_K && SBK_TYPE_Q6_K == GGML_TYPE_Q6_K, "ggml's type numbers moved");

// OMNIDRAFT_SBQ4=0 turns omnidraft's kernels and hooks off; read at every call, so one process can time both.
static bool kernels_on() {
    const char * env = getenv("OMNIDRAFT_SBQ4");
    return !(env != NULL && strcmp(env, "0") == 0);
}

extern "C" int ggml_sbk_fa_rows_invariant(void) {
    return kernels_on();
}

extern "C" int ggml_sbk_takes(const ggml_tensor * op) {
#if SBK_VARIANT > 0
    const ggml_tensor * w = op->src[0];
    const ggml_tensor * x = op->src[1];
    int64_t nb = 0;
    // pick() takes the types and 1..8 rows; the rest: one contiguous matrix, f32 rows in and out
    if (op->op != GGML_OP_MUL_MAT || !pick(ggml_cpu_sbk_variant(), w->type, (int) x->ne[1], w->ne[0], &nb).ok() ||
        w->ne[2] != 1 ||
        w->ne[3] != 1 || w->nb[1] != ggml_row_size(w->type, w->ne[0]) || x->type != GGML_TYPE_F32 || x->ne[2] != 1 ||
        x->ne[3] != 1 || op->type != GGML_TYPE_F32 || op->nb[0] != sizeof(float) ||
        table_floats(w->type, (int) x->ne[1], nb) > TABLE_FLOATS) {
        return 0;
    }
    return kernels_on();
#else
    (void) op;
    return 0;
#endif
}

extern "C" void ggml_sbk_mul_mat(const ggml_compute_params * params, ggml_tensor * op, const void * wdata,
                                 size_t row_size) {
#if SBK_VARIANT > 0
    const ggml_tensor * w = op->src[0];
    const int n = (int) op->src[1]->ne[1];
    int64_t nb = 0;
    const kernel kn = pick(ggml_cpu_sbk_variant(), w->type, n, w->ne[0], &nb);
    const acts a = prepare(w->type, (const uint8_t *) wdata, row_size, n, nb);  // once per thread
    const int64_t nrows = w->ne[1];
    const size_t stride = op->nb[1] / sizeof(float);
    // rows in 4 chunks per thread, taken as threads come free (ggml's counter starts at nth); which
    // thread computes a row never changes its value
    const int64_t nchunks = std::min<int64_t>(nrows, 4 * params->nth);
    for (int64_t c = params->ith; c < nchunks; c = ggml_threadpool_chunk_add(params->threadpool, 1)) {
        run_rows(kn, (const uint8_t *) w->data, w->nb[1], nrows * c / nchunks, nrows * (c + 1) / nchunks, a,
                 (float *) op->data, stride);
    }
#else
    (void) params, (void) op, (void) wdata, (void) row_size;
#endif
}
#endif  // SBK_STANDALONE

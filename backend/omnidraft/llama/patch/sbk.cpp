// sbk: omnidraft's small-batch products for Q4_K, Q6_K, Q8_0 and Q5_0 weights (ggml's CPU backend;
// x86 AVX2 and up, and aarch64 NEON with dotprod, checked under qemu: the real ARM build does not carry it yet).
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
// ggml's vec_dot only in float summation order.
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
#define SBK_VARIANT 4
#else
#define SBK_VARIANT 0
#endif

extern "C" int ggml_cpu_sbk_variant(void) { return SBK_VARIANT; }

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
};

// One per thread, fixed (no allocation that could fail mid-graph): room for 8 rows of 2048 blocks (Q8_0
// rows of 65,536 values; Q4_K's table takes 9 floats a block: 227 blocks, rows of 58,112); wider
// products are left to ggml (ggml_sbk_takes compares table_floats with it).
constexpr size_t TABLE_FLOATS = 16384;
alignas(64) thread_local float TABLE[TABLE_FLOATS];

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

struct q50_block {
    static constexpr int BYTES = Q50_BYTES;
    static __m256i weights(const uint8_t * x) {
        const __m128i qs = _mm_loadu_si128((const __m128i *) (x + 6));
        const __m256i nib = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(qs, 4), qs), _mm256_set1_epi8(0x0F));
        uint32_t qh;
        memcpy(&qh, x + 2, 4);
        // byte i gets qh's byte i/8, then its bit i%8 tested: 0xFF where the fifth bit is set
        const __m256i spread = _mm256_shuffle_epi8(_mm256_set1_epi32((int) qh),
            _mm256_setr_epi64x(0, 0x0101010101010101LL, 0x0202020202020202LL, 0x0303030303030303LL));
        const __m256i bit = _mm256_set1_epi64x(0x8040201008040201LL);
        const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
        return _mm256_or_si256(nib, _mm256_andnot_si256(set, _mm256_set1_epi8((char) 0xF0)));
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

}  // namespace

#elif SBK_VARIANT == 4  // aarch64
// ================================================================ aarch64: NEON with dotprod
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
// Selected at compile time (-march=armv8.2-a+dotprod or a CPU that has it), like ggml's own ARM kernels:
// a binary built so needs a CPU with dotprod (Linux hwcap "asimddp") whatever this file does.
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
template <int N>
void q6k_row(const uint8_t * x, const acts & a, float * out, size_t stride) {
    const uint8x16_t m4 = vdupq_n_u8(0x0F), m30 = vdupq_n_u8(0x30);
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
                const uint8x16_t hb = vld1q_u8(qh + 32 * c + 16 * h);
                const int8x16_t q[4] = {  // values 0..63: low nibble | two high bits << 4
                    vreinterpretq_s8_u8(vorrq_u8(vandq_u8(l0, m4), vandq_u8(vshlq_n_u8(hb, 4), m30))),
                    vreinterpretq_s8_u8(vorrq_u8(vandq_u8(l1, m4), vandq_u8(vshlq_n_u8(hb, 2), m30))),
                    vreinterpretq_s8_u8(vorrq_u8(vshrq_n_u8(l0, 4), vandq_u8(hb, m30))),
                    vreinterpretq_s8_u8(vorrq_u8(vshrq_n_u8(l1, 4), vandq_u8(vshrq_n_u8(hb, 2), m30))),
                };
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

}  // namespace
#endif  // aarch64

#if SBK_VARIANT > 0
// ================================================================ every architecture
namespace {

acts prepare(int type, const uint8_t * act, size_t stride, int n, int64_t nb) {
    float * t = TABLE;
    const acts a = {act, stride, nb, t, t + sums_offset(n, nb)};
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
            }
        }
    }
    return a;
}

using row_fn = void (*)(const uint8_t *, const acts &, float *, size_t);

template <int N> void q80_row(const uint8_t * x, const acts & a, float * o, size_t s) { q8act_row<q80_block, N>(x, a, o, s); }
template <int N> void q50_row(const uint8_t * x, const acts & a, float * o, size_t s) { q8act_row<q50_block, N>(x, a, o, s); }

#define SBK_TABLE(fn) \
    {nullptr, fn<1>, fn<2>, fn<3>, fn<4>, fn<5>, fn<6>, fn<7>, fn<8>}
constexpr row_fn Q4K[SBK_MAX_ROWS + 1] = SBK_TABLE(q4k_row);
constexpr row_fn Q6K[SBK_MAX_ROWS + 1] = SBK_TABLE(q6k_row);
constexpr row_fn Q80[SBK_MAX_ROWS + 1] = SBK_TABLE(q80_row);
constexpr row_fn Q50[SBK_MAX_ROWS + 1] = SBK_TABLE(q50_row);

// The row routine for a type and row count, and blocks per row; nullptr for what this file does not take.
row_fn pick(int type, int n, int64_t k, int64_t * nb) {
    if (n < 1 || n > SBK_MAX_ROWS) {
        return nullptr;
    }
    switch (type) {
        case SBK_TYPE_Q4_K: *nb = k / QK_K; return Q4K[n];
        case SBK_TYPE_Q6_K: *nb = k / QK_K; return Q6K[n];
        case SBK_TYPE_Q8_0: *nb = k / 32; return Q80[n];
        case SBK_TYPE_Q5_0: *nb = k / 32; return Q50[n];
        default: return nullptr;
    }
}

}  // namespace

extern "C" int sbk_gemm(int type, int64_t k, const void * w, size_t w_row_bytes, int64_t r0, int64_t r1,
                        const void * act, size_t act_row_bytes, int n, float * dst, size_t dst_stride) {
    int64_t nb = 0;
    const row_fn fn = pick(type, n, k, &nb);
    if (fn == nullptr) {
        return 0;
    }
    if (table_floats(type, n, nb) > TABLE_FLOATS) {
        return 0;
    }
    const acts a = prepare(type, (const uint8_t *) act, act_row_bytes, n, nb);
    for (int64_t r = r0; r < r1; r++) {
        fn((const uint8_t *) w + r * w_row_bytes, a, dst + r, dst_stride);
    }
    return 1;
}

#else  // SBK_VARIANT == 0: nothing to offer; ggml's own kernels run

extern "C" int sbk_gemm(int, int64_t, const void *, size_t, int64_t, int64_t, const void *, size_t, int, float *,
                        size_t) {
    return 0;
}

#endif

#ifndef SBK_STANDALONE
// ---------------------------------------------------------------- the ggml side
#include "ggml.h"
#include "ggml-cpu-impl.h"

static_assert(SBK_TYPE_Q5_0 == GGML_TYPE_Q5_0 && SBK_TYPE_Q8_0 == GGML_TYPE_Q8_0 &&
              SBK_TYPE_Q4_K == GGML_TYPE_Q4_K && SBK_TYPE_Q6_K == GGML_TYPE_Q6_K, "ggml's type numbers moved");

extern "C" int ggml_sbk_takes(const ggml_tensor * op) {
#if SBK_VARIANT > 0
    const ggml_tensor * w = op->src[0];
    const ggml_tensor * x = op->src[1];
    int64_t nb = 0;
    // pick() takes the types and 1..8 rows; the rest: one contiguous matrix, f32 rows in and out
    if (op->op != GGML_OP_MUL_MAT || pick(w->type, (int) x->ne[1], w->ne[0], &nb) == nullptr || w->ne[2] != 1 ||
        w->ne[3] != 1 || w->nb[1] != ggml_row_size(w->type, w->ne[0]) || x->type != GGML_TYPE_F32 || x->ne[2] != 1 ||
        x->ne[3] != 1 || op->type != GGML_TYPE_F32 || op->nb[0] != sizeof(float) ||
        table_floats(w->type, (int) x->ne[1], nb) > TABLE_FLOATS) {
        return 0;
    }
    const char * env = getenv("OMNIDRAFT_SBQ4");
    return !(env != NULL && strcmp(env, "0") == 0);
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
    const row_fn fn = pick(w->type, n, w->ne[0], &nb);
    const acts a = prepare(w->type, (const uint8_t *) wdata, row_size, n, nb);  // once per thread
    const int64_t nrows = w->ne[1];
    const size_t stride = op->nb[1] / sizeof(float);
    // rows in 4 chunks per thread, taken as threads come free (ggml's counter starts at nth); which
    // thread computes a row never changes its value
    const int64_t nchunks = std::min<int64_t>(nrows, 4 * params->nth);
    for (int64_t c = params->ith; c < nchunks; c = ggml_threadpool_chunk_add(params->threadpool, 1)) {
        for (int64_t r = nrows * c / nchunks; r < nrows * (c + 1) / nchunks; r++) {
            fn((const uint8_t *) w->data + r * w->nb[1], a, (float *) op->data + r, stride);
        }
    }
#else
    (void) params, (void) op, (void) wdata, (void) row_size;
#endif
}
#endif  // SBK_STANDALONE

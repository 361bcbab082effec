// sbq4: omnidraft's small-batch Q4_0 matrix product for ggml's CPU backend (x86 AVX2 and up; aarch64
// NEON with dotprod or i8mm, chosen at run time, checked under qemu; setup builds it into x86 and aarch64
// Linux/Android llama.cpp, the aarch64 hook in sbq4-arm-hook.patch).
//
// Why.  Speculative decoding verifies k drafted tokens in one target pass, and that only pays when
// the pass costs about one decode.  ggml's repacked Q4_0 kernels are written for prompt batches:
// rows go through a GEMM in groups of 4 and the remainder through a GEMV, and every call unpacks
// the weights again, so on 2 cores a 4-row pass costs 2.5 decodes and an 8-row pass 5.  A pass over
// n <= 8 rows reads the same weights as a decode; only the multiply-adds grow.  So this routine
// unpacks each weight block once and feeds all n activation rows from registers.
//
// Exactness.  Every output element gets the same instruction sequence whatever n is: one
// accumulator per activation row, blocks in the same order, activations quantized one row at a
// time by the same code.  Rows of a batched pass are therefore bit-identical to one-row decoding by
// construction, which is what lossless speculative decoding needs.  Decoding (n = 1) goes through
// here too, for that reason.
//
// Layout (x86).  Weights are ggml's block_q4_0x8 (repack.cpp, make_block_q4_0x8): the fp16 scales of 8
// rows, then their nibbles interleaved 8 bytes at a time and xor-ed with 0x88.  Bytes 0..63 hold
// row r's quant bytes 0..7 at 8r (elements 0..7 in the low nibbles, 16..23 in the high ones),
// bytes 64..127 its bytes 8..15 (elements 8..15 and 24..31).  We undo the xor to get unsigned
// nibbles u = w + 8 and compute dot(w, a) = dot(u, a) - 8 * sum(a) with an unsigned-by-signed
// byte dot product (vpdpbusd, or vpmaddubsw + vpmaddwd on plain AVX2).  Each weight row owns two
// adjacent int32 lanes; the -8 * sum(a) term is split between them as -4 * sum(a) each, which is the
// value the int32 accumulators start from.  (aarch64 takes ggml's ARM layouts: see its section.)
#include "sbq4.h"

#include <stdlib.h>
#include <string.h>

#include <algorithm>

// SBQ4_VARIANT: the x86 variant, fixed at compile time (0 elsewhere).  aarch64 builds (SBQ4_AARCH64)
// carry both of theirs and pick one at run time (sbq4_arm_variant).
#if defined(__AVX2__) && defined(__F16C__)
#include <immintrin.h>
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VNNI__)
#define SBQ4_VARIANT 3
#elif defined(__AVXVNNI__) || (defined(__AVX512VNNI__) && defined(__AVX512VL__))
#define SBQ4_VARIANT 2
#else
#define SBQ4_VARIANT 1
#endif
#else
#define SBQ4_VARIANT 0
#if defined(__aarch64__) && defined(__linux__) && defined(__GNUC__)
#include <arm_neon.h>
#include <sys/auxv.h>
#define SBQ4_AARCH64 1
#endif
#endif

#define GROUP_BYTES_C 144  // sizeof(block_q4_0x8): 8 fp16 scales + 128 quant bytes

// Linux's hwcap bits (asm/hwcap.h), spelled out for libcs that lack the newer names.
#define SBQ4_HWCAP_ASIMDDP (1ULL << 20)
#define SBQ4_HWCAP2_I8MM (1ULL << 13)

extern "C" int sbq4_arm_variant(uint64_t hwcap, uint64_t hwcap2) {
    const bool dotprod = (hwcap & SBQ4_HWCAP_ASIMDDP) != 0, i8mm = (hwcap2 & SBQ4_HWCAP2_I8MM) != 0;
    return dotprod && i8mm ? SBQ4_NEON_I8MM : dotprod ? SBQ4_NEON_DOTPROD : 0;
}


#if SBQ4_VARIANT > 0

namespace {

constexpr int QK = 32;          // values per Q4_0 / activation block
constexpr int GROUP_BYTES = GROUP_BYTES_C;
// Software prefetch distance: 64 blocks (9 KiB) ahead.  With the multiply-adds of several rows between
// loads, the hardware prefetcher alone falls behind: on the 2-core EPYC an 8-row pass of Qwen2.5-1.5B took
// 2.56x a decode without this and 2.06x with it (BENCHMARKS.md section 10).  The blocks of consecutive
// groups are contiguous, and a prefetch past the end of the weights is harmless.
constexpr int PREFETCH_BYTES = 64 * GROUP_BYTES_C;

inline void prefetch_block(const uint8_t * w) {
    _mm_prefetch((const char *) w + PREFETCH_BYTES, _MM_HINT_T0);
    _mm_prefetch((const char *) w + PREFETCH_BYTES + 64, _MM_HINT_T0);
    _mm_prefetch((const char *) w + PREFETCH_BYTES + 128, _MM_HINT_T0);
}

// ---------------------------------------------------------------- activations
// ggml's quantize_row_q8_0 on x86: d = amax / 127 kept as fp16, values rounded to nearest-even.
inline float hmax8(__m256 v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
}

inline int hsum8_epi32(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
    return _mm_cvtsi128_si32(s);
}

void quantize_block(const float * x, sbq4_act * y) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 v[4];
    __m256 amax = _mm256_setzero_ps();
    for (int i = 0; i < 4; i++) {
        v[i] = _mm256_loadu_ps(x + 8 * i);
        amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign, v[i]));
    }
    const float d = hmax8(amax) / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y->d = _cvtsh_ss(_cvtss_sh(d, 0));
    const __m256 mul = _mm256_set1_ps(id);
    __m256i q[4];
    __m256i sum = _mm256_setzero_si256();
    for (int i = 0; i < 4; i++) {
        q[i] = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v[i], mul), _MM_ROUND_NEAREST));
        sum = _mm256_add_epi32(sum, q[i]);
    }
    // int32 -> int8 with the lane-crossing packs put back in order
    __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
    p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256((__m256i *) y->qs, p);
    y->bias = -4 * hsum8_epi32(sum);
}

inline int64_t load64(const int8_t * p) {
    int64_t v;
    memcpy(&v, p, sizeof(v));
    return v;
}

#if SBQ4_VARIANT == 3
// ---------------------------------------------------------------- AVX-512 VNNI: 8 rows per zmm
// (q & 0x0F) ^ 0x08 in one vpternlogd: the nibble with repack's xor undone (0..15).
inline __m512i nibbles(__m512i q) {
    return _mm512_ternarylogic_epi32(q, _mm512_set1_epi8(0x0F), _mm512_set1_epi8(0x08), 0x6A);
}

template <int N>
void group_rows(const uint8_t * w, const sbq4_act * act, int64_t nb, float * dst, size_t stride) {
    const __m512i dup = _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
    __m512 acc[N];
    for (int j = 0; j < N; j++) {
        acc[j] = _mm512_setzero_ps();
    }
    for (int64_t b = 0; b < nb; b++, w += GROUP_BYTES) {
        prefetch_block(w);
        const __m512i q0 = _mm512_loadu_si512(w + 16);
        const __m512i q1 = _mm512_loadu_si512(w + 80);
        const __m512i l0 = nibbles(q0), h0 = nibbles(_mm512_srli_epi16(q0, 4));
        const __m512i l1 = nibbles(q1), h1 = nibbles(_mm512_srli_epi16(q1, 4));
        // the 8 rows' scales, each twice (a row owns two adjacent lanes)
        const __m512 dw = _mm512_permutexvar_ps(
            dup, _mm512_castps256_ps512(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *) w))));
        for (int j = 0; j < N; j++) {
            const sbq4_act * a = act + j * nb + b;
            __m512i s = _mm512_set1_epi32(a->bias);
            s = _mm512_dpbusd_epi32(s, l0, _mm512_set1_epi64(load64(a->qs + 0)));
            s = _mm512_dpbusd_epi32(s, l1, _mm512_set1_epi64(load64(a->qs + 8)));
            s = _mm512_dpbusd_epi32(s, h0, _mm512_set1_epi64(load64(a->qs + 16)));
            s = _mm512_dpbusd_epi32(s, h1, _mm512_set1_epi64(load64(a->qs + 24)));
            acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(dw, _mm512_set1_ps(a->d)), acc[j]);
        }
    }
    // row r = lane 2r + lane 2r + 1
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 0, 0, 0, 0, 0, 0, 0, 0);
    const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 0, 0, 0, 0, 0, 0, 0, 0);
    for (int j = 0; j < N; j++) {
        const __m512 sum = _mm512_add_ps(_mm512_permutexvar_ps(even, acc[j]), _mm512_permutexvar_ps(odd, acc[j]));
        _mm256_storeu_ps(dst + j * stride, _mm512_castps512_ps256(sum));
    }
}

#else
// ---------------------------------------------------------------- AVX2: 4 rows per ymm, two halves
#if SBQ4_VARIANT == 2
inline __m256i dot_u8s8(__m256i acc, __m256i u, __m256i s) {
#if defined(__AVXVNNI__)
    return _mm256_dpbusd_avx_epi32(acc, u, s);
#else
    return _mm256_dpbusd_epi32(acc, u, s);
#endif
}
#endif

// One block's int32 sums for 4 weight rows (two lanes a row) against activation block a, bias included.
inline __m256i block_sum(__m256i l0, __m256i l1, __m256i h0, __m256i h1, const sbq4_act * a) {
    const __m256i a0 = _mm256_set1_epi64x(load64(a->qs + 0)), a1 = _mm256_set1_epi64x(load64(a->qs + 8));
    const __m256i a2 = _mm256_set1_epi64x(load64(a->qs + 16)), a3 = _mm256_set1_epi64x(load64(a->qs + 24));
#if SBQ4_VARIANT == 1
    // Plain AVX2 has no vpdpbusd, and where a core has one vector integer multiplier (Zen 1: a ymm vpmaddubsw
    // or vpmaddwd takes it twice, scripts/lab/mulport.c) the multiplies bound the pass.  So the four vpmaddubsw products are added in
    // 16 bits and widened by one vpmaddwd: 5 multiplies a block and row instead of 8.  Exact: a pair sum is
    // at most 2 * 15 * 127 = 3,810 in magnitude (activations are -127..127), four of them 15,240 < 32,767,
    // so each lane holds the same integer as before and every output keeps its bits.
    __m256i p = _mm256_maddubs_epi16(l0, a0);
    p = _mm256_add_epi16(p, _mm256_maddubs_epi16(l1, a1));
    p = _mm256_add_epi16(p, _mm256_maddubs_epi16(h0, a2));
    p = _mm256_add_epi16(p, _mm256_maddubs_epi16(h1, a3));
    return _mm256_add_epi32(_mm256_set1_epi32(a->bias), _mm256_madd_epi16(p, _mm256_set1_epi16(1)));
#else
    __m256i s = _mm256_set1_epi32(a->bias);
    s = dot_u8s8(s, l0, a0);
    s = dot_u8s8(s, l1, a1);
    s = dot_u8s8(s, h0, a2);
    return dot_u8s8(s, h1, a3);
#endif
}

// Rows r of a group are split in two halves of 4 (one ymm holds a half's 4 rows x 8 bytes).  Up to 2
// activation rows both halves go in one pass over the blocks, sharing the activations' broadcasts; from 3
// rows on the accumulators of both would not fit the 16 registers, so each half takes its own pass (the
// second finds the blocks in cache).  Either way every output lane sees the same operations in the same order.
template <int N>
void group_rows(const uint8_t * w0, const sbq4_act * act, int64_t nb, float * dst, size_t stride) {
    constexpr int H = N <= 2 ? 2 : 1;  // halves per pass
    const __m256i dup = _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3);
    const __m256i x88 = _mm256_set1_epi8((char) 0x88), m4 = _mm256_set1_epi8(0x0F);
    for (int half0 = 0; half0 < 2; half0 += H) {
        const uint8_t * w = w0;
        __m256 acc[H][N];
        for (int h = 0; h < H; h++) {
            for (int j = 0; j < N; j++) {
                acc[h][j] = _mm256_setzero_ps();
            }
        }
        for (int64_t b = 0; b < nb; b++, w += GROUP_BYTES) {
            if (half0 == 0) {
                prefetch_block(w);  // a second pass (H = 1) finds the group's blocks in cache
            }
            for (int h = 0; h < H; h++) {
                const int half = half0 + h;
                // repack's xor undone on both nibbles at once, then each masked: u = w + 8, 0..15
                const __m256i q0 = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *) (w + 16 + 32 * half)), x88);
                const __m256i q1 = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *) (w + 80 + 32 * half)), x88);
                const __m256i l0 = _mm256_and_si256(q0, m4), h0 = _mm256_and_si256(_mm256_srli_epi16(q0, 4), m4);
                const __m256i l1 = _mm256_and_si256(q1, m4), h1 = _mm256_and_si256(_mm256_srli_epi16(q1, 4), m4);
                const __m256 dw = _mm256_permutevar8x32_ps(
                    _mm256_castps128_ps256(_mm_cvtph_ps(_mm_loadl_epi64((const __m128i *) (w + 8 * half)))), dup);
                for (int j = 0; j < N; j++) {
                    const sbq4_act * a = act + j * nb + b;
                    const __m256 scale = _mm256_mul_ps(dw, _mm256_set1_ps(a->d));
                    acc[h][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(block_sum(l0, l1, h0, h1, a)), scale, acc[h][j]);
                }
            }
        }
        for (int h = 0; h < H; h++) {
            for (int j = 0; j < N; j++) {  // row r = lane 2r + lane 2r + 1
                const __m256 pairs = _mm256_add_ps(acc[h][j], _mm256_permute_ps(acc[h][j], _MM_SHUFFLE(2, 3, 0, 1)));
                const __m256 rows = _mm256_permutevar8x32_ps(pairs, _mm256_setr_epi32(0, 2, 4, 6, 0, 0, 0, 0));
                _mm_storeu_ps(dst + j * stride + 4 * (half0 + h), _mm256_castps256_ps128(rows));
            }
        }
    }
}
#endif

using group_fn = void (*)(const uint8_t *, const sbq4_act *, int64_t, float *, size_t);
constexpr group_fn GROUP_FOR_N[SBQ4_MAX_ROWS + 1] = {
    nullptr, group_rows<1>, group_rows<2>, group_rows<3>, group_rows<4>,
    group_rows<5>, group_rows<6>, group_rows<7>, group_rows<8>,
};

}  // namespace

extern "C" void sbq4_quantize(const float * x, sbq4_act * y, int64_t nblocks) {
    for (int64_t i = 0; i < nblocks; i++) {
        quantize_block(x + i * QK, y + i);
    }
}

extern "C" int sbq4_gemm_as(int variant, int layout, int64_t nblocks, const void * w, int64_t nrows,
                            const sbq4_act * act, int n, float * dst, size_t dst_stride) {
    if (variant != SBQ4_VARIANT || layout != SBQ4_8X8 || n < 1 || n > SBQ4_MAX_ROWS || nrows % 8 != 0) {
        return 0;
    }
    const group_fn fn = GROUP_FOR_N[n];
    const uint8_t * wg = (const uint8_t *) w;
    for (int64_t r = 0; r < nrows; r += 8, wg += nblocks * GROUP_BYTES) {
        fn(wg, act, nblocks, dst + r, dst_stride);
    }
    return 1;
}

#elif defined(SBQ4_AARCH64)
// ================================================================ aarch64: NEON with dotprod or i8mm
// Layouts.  ggml's ARM builds repack Q4_0 for 4 rows, not 8 (repack.cpp, make_block_q4_0x4): block_q4_0x4
// holds the fp16 scales of 4 rows, then their 16 quant bytes each interleaved 4 bytes at a time (SBQ4_4X4,
// what builds with dotprod make) or 8 at a time (SBQ4_4X8, builds with i8mm), xor-ed with 0x88.  The
// caller names the layout.  The xor makes each nibble the weight itself as a signed 4-bit number, so
// (b << 4) and (b & 0xF0) are 16 * w of the low and high nibbles as signed bytes, as ggml's ARM kernels
// use them: signed-by-signed byte dot products (no -8 offset to fold), the 16 taken out exactly when the
// int32 sum is converted (vcvtq_n_f32_s32(s, 4)).
//
// Variants, chosen once per process from Linux's hwcaps (sbq4_arm_variant): SBQ4_NEON_I8MM where the CPU
// has dotprod and i8mm (HWCAP_ASIMDDP, HWCAP2_I8MM: Cortex-A510/A710/X2 and later), SBQ4_NEON_DOTPROD
// where it has dotprod alone (Cortex-A55/A76/A78/X1), none below (ARMv8.0: ggml's kernels run), and never
// one the build lacks (below: GCC builds carry both, even at -march=armv8-a, through function target
// attributes; clang builds what its flags enable).  A CPU is never handed an instruction it lacks.
// - dotprod: vdotq_s32 sums 4 byte products per int32 lane.  4X4: lane r of a weight vector is row r's
//   4 quants, multiplied by the activation's matching 4 (vdotq_laneq_s32).  4X8: rows own two adjacent
//   lanes (8 quants), multiplied by the activation's 8 duplicated; vpaddq_s32 adds each row's two lanes.
// - i8mm: vmmlaq_s32 multiplies a 2x8 matrix of bytes by another's transpose: 2 weight rows x 8 quants
//   (4X8 as stored; 4X4 after vzip1q/vzip2q_s32 of two vectors, once per block for all rows) by 8 quants
//   of 2 activation rows, 32 products per instruction against dotprod's 16.  Activation rows go in
//   pairs (j, j+1); an odd last row is paired with itself.
// Either way each activation row gets, per block, one int32 per weight row (exact: at most
// 32 * 128 * 127 in magnitude) and then the same float operations in the same order, one float
// multiply-add per block into that row's own accumulator.  The pairing changes no integer, so rows are
// bit-identical to one-row decoding by construction, and the two variants and the two layouts give the
// same bits (the qemu test checks all three).  Not tuned on any ARM core: the prefetch distance is x86's.
namespace {

constexpr int QK = 32;
constexpr int GROUP4_BYTES = 72;  // sizeof(block_q4_0x4): 4 fp16 scales + 64 quant bytes

// Which variants a build carries.  dotprod needs ARMv8.2's dot product, i8mm the int8 matrix multiply.  A
// file compiled with a feature on (-march=armv8.2-a+dotprod+i8mm, -mcpu=native on a phone) needs nothing
// more.  GCC also builds the others, each function with its own target attribute.  clang builds only what
// the compile flags enable: clang 14's arm_neon.h declares vdotq/vmmlaq only then (clang 14 is what this
// was checked with; newer clang may allow attributes, untried).
#if defined(__ARM_FEATURE_DOTPROD)
#define SBQ4_DOTPROD_FN
#elif !defined(__clang__)
#define SBQ4_DOTPROD_FN __attribute__((target("arch=armv8.2-a+dotprod")))
#endif
#if defined(__ARM_FEATURE_MATMUL_INT8)
#define SBQ4_I8MM_FN
#elif !defined(__clang__) && defined(__ARM_FEATURE_DOTPROD)
#define SBQ4_I8MM_FN __attribute__((target("+i8mm")))
#elif !defined(__clang__)
#define SBQ4_I8MM_FN __attribute__((target("arch=armv8.2-a+dotprod+i8mm")))
#endif

#define SBQ4_UNROLL _Pragma("GCC unroll 8")

// ---------------------------------------------------------------- activations
// ggml's quantize_row_q8_0 on NEON: d = amax / 127 kept as fp16, values rounded to nearest-even (the same
// bytes as the x86 code above); bias is x86's and stays 0 here.
void quantize_block(const float * x, sbq4_act * y) {
    float32x4_t v[8];
    float32x4_t amax = vdupq_n_f32(0.0f);
    for (int i = 0; i < 8; i++) {
        v[i] = vld1q_f32(x + 4 * i);
        amax = vmaxq_f32(amax, vabsq_f32(v[i]));
    }
    const float d = vmaxvq_f32(amax) / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y->d = (float) (__fp16) d;
    int16x8_t h[4];
    for (int i = 0; i < 4; i++) {
        h[i] = vcombine_s16(vmovn_s32(vcvtnq_s32_f32(vmulq_n_f32(v[2 * i], id))),
                            vmovn_s32(vcvtnq_s32_f32(vmulq_n_f32(v[2 * i + 1], id))));
    }
    vst1q_s8(y->qs, vcombine_s8(vmovn_s16(h[0]), vmovn_s16(h[1])));
    vst1q_s8(y->qs + 16, vcombine_s8(vmovn_s16(h[2]), vmovn_s16(h[3])));
    y->bias = 0;
}

#if defined(SBQ4_DOTPROD_FN) || defined(SBQ4_I8MM_FN)
// ---------------------------------------------------------------- one block of 4 weight rows
constexpr int PREFETCH_BYTES = 64 * GROUP4_BYTES;  // 64 blocks ahead, as on x86

// The 4 rows' scales as floats.
inline float32x4_t row_scales(const uint8_t * w) {
    uint16x4_t h;
    memcpy(&h, w, sizeof(h));
    return vcvt_f32_f16(vreinterpret_f16_u16(h));
}

// 16 * the low and high nibbles of 16 stored bytes, as signed bytes.
inline int8x16_t low16(int8x16_t b) { return vshlq_n_s8(b, 4); }
inline int8x16_t high16(int8x16_t b) { return vandq_s8(b, vdupq_n_s8((int8_t) 0xF0)); }

inline int8x16_t load_s8(const uint8_t * p) { return vld1q_s8((const int8_t *) p); }

// 8 activation bytes in both halves of a vector.
inline int8x16_t dup8(const int8_t * p) {
    int64_t v;
    memcpy(&v, p, sizeof(v));
    return vreinterpretq_s8_s64(vdupq_n_s64(v));
}

// Row j's accumulator += (its 4 int32 sums / 16) * (weight scales * activation scale).
inline float32x4_t accumulate(float32x4_t acc, int32x4_t s, float32x4_t dw, float da) {
    return vfmaq_f32(acc, vcvtq_n_f32_s32(s, 4), vmulq_n_f32(dw, da));
}

// ---------------------------------------------------------------- dotprod
#ifdef SBQ4_DOTPROD_FN
template <int LAYOUT, int N>
SBQ4_DOTPROD_FN void group_dot(const uint8_t * w, const sbq4_act * act, int64_t nb, float * dst, size_t stride) {
    const int32x4_t zero = vdupq_n_s32(0);
    float32x4_t acc[N];
    SBQ4_UNROLL
    for (int j = 0; j < N; j++) {
        acc[j] = vdupq_n_f32(0.0f);
    }
    for (int64_t b = 0; b < nb; b++, w += GROUP4_BYTES) {
        __builtin_prefetch(w + PREFETCH_BYTES);
        __builtin_prefetch(w + PREFETCH_BYTES + 64);
        const float32x4_t dw = row_scales(w);
        int8x16_t lo[4], hi[4];
        SBQ4_UNROLL
        for (int k = 0; k < 4; k++) {
            const int8x16_t q = load_s8(w + 8 + 16 * k);
            lo[k] = low16(q);
            hi[k] = high16(q);
        }
        SBQ4_UNROLL
        for (int j = 0; j < N; j++) {
            const sbq4_act * a = act + j * nb + b;
            int32x4_t s;
            if (LAYOUT == SBQ4_4X4) {
                // vector k: the 4 rows' quant bytes 4k..4k+3 (elements 4k.. low, 16+4k.. high)
                const int8x16_t a0 = vld1q_s8(a->qs), a1 = vld1q_s8(a->qs + 16);
                s = vdotq_laneq_s32(zero, lo[0], a0, 0);
                s = vdotq_laneq_s32(s, lo[1], a0, 1);
                s = vdotq_laneq_s32(s, lo[2], a0, 2);
                s = vdotq_laneq_s32(s, lo[3], a0, 3);
                s = vdotq_laneq_s32(s, hi[0], a1, 0);
                s = vdotq_laneq_s32(s, hi[1], a1, 1);
                s = vdotq_laneq_s32(s, hi[2], a1, 2);
                s = vdotq_laneq_s32(s, hi[3], a1, 3);
            } else {
                // vector 0: rows 0, 1 bytes 0..7; 1: rows 2, 3 bytes 0..7; 2 and 3: the same for bytes 8..15
                const int8x16_t e0 = dup8(a->qs), e1 = dup8(a->qs + 8), e2 = dup8(a->qs + 16), e3 = dup8(a->qs + 24);
                int32x4_t s01 = vdotq_s32(zero, lo[0], e0), s23 = vdotq_s32(zero, lo[1], e0);
                s01 = vdotq_s32(s01, lo[2], e1);
                s23 = vdotq_s32(s23, lo[3], e1);
                s01 = vdotq_s32(s01, hi[0], e2);
                s23 = vdotq_s32(s23, hi[1], e2);
                s01 = vdotq_s32(s01, hi[2], e3);
                s23 = vdotq_s32(s23, hi[3], e3);
                s = vpaddq_s32(s01, s23);
            }
            acc[j] = accumulate(acc[j], s, dw, a->d);
        }
    }
    SBQ4_UNROLL
    for (int j = 0; j < N; j++) {
        vst1q_f32(dst + j * stride, acc[j]);
    }
}

#endif  // SBQ4_DOTPROD_FN

// ---------------------------------------------------------------- i8mm
#ifdef SBQ4_I8MM_FN
template <int LAYOUT, int N>
SBQ4_I8MM_FN void group_mmla(const uint8_t * w, const sbq4_act * act, int64_t nb, float * dst, size_t stride) {
    const int32x4_t zero = vdupq_n_s32(0);
    float32x4_t acc[N];
    SBQ4_UNROLL
    for (int j = 0; j < N; j++) {
        acc[j] = vdupq_n_f32(0.0f);
    }
    for (int64_t b = 0; b < nb; b++, w += GROUP4_BYTES) {
        __builtin_prefetch(w + PREFETCH_BYTES);
        __builtin_prefetch(w + PREFETCH_BYTES + 64);
        const float32x4_t dw = row_scales(w);
        // m[0]: rows 0, 1 quant bytes 0..7; m[1]: rows 2, 3 bytes 0..7; m[2], m[3]: the same for bytes 8..15
        int8x16_t m[4];
        if (LAYOUT == SBQ4_4X8) {
            SBQ4_UNROLL
            for (int k = 0; k < 4; k++) {
                m[k] = load_s8(w + 8 + 16 * k);
            }
        } else {  // 4X4: vector k holds the 4 rows' bytes 4k..4k+3; pair up bytes 0..3 with 4..7, 8..11 with 12..15
            const int32x4_t v0 = vreinterpretq_s32_s8(load_s8(w + 8)), v1 = vreinterpretq_s32_s8(load_s8(w + 24));
            const int32x4_t v2 = vreinterpretq_s32_s8(load_s8(w + 40)), v3 = vreinterpretq_s32_s8(load_s8(w + 56));
            m[0] = vreinterpretq_s8_s32(vzip1q_s32(v0, v1));
            m[1] = vreinterpretq_s8_s32(vzip2q_s32(v0, v1));
            m[2] = vreinterpretq_s8_s32(vzip1q_s32(v2, v3));
            m[3] = vreinterpretq_s8_s32(vzip2q_s32(v2, v3));
        }
        int8x16_t lo[4], hi[4];
        SBQ4_UNROLL
        for (int k = 0; k < 4; k++) {
            lo[k] = low16(m[k]);
            hi[k] = high16(m[k]);
        }
        SBQ4_UNROLL
        for (int j = 0; j < N; j += 2) {
            const sbq4_act * a = act + j * nb + b;
            const sbq4_act * a2 = j + 1 < N ? a + nb : a;  // an odd last row pairs with itself
            // e[c]: elements 8c..8c+7 of activation rows j and j+1
            int8x16_t e[4];
            SBQ4_UNROLL
            for (int c = 0; c < 4; c++) {
                e[c] = vcombine_s8(vld1_s8(a->qs + 8 * c), vld1_s8(a2->qs + 8 * c));
            }
            // lanes: row 0 (2) x act j, row 0 (2) x act j+1, row 1 (3) x act j, row 1 (3) x act j+1
            int32x4_t c01 = vmmlaq_s32(zero, lo[0], e[0]), c23 = vmmlaq_s32(zero, lo[1], e[0]);
            c01 = vmmlaq_s32(c01, lo[2], e[1]);
            c23 = vmmlaq_s32(c23, lo[3], e[1]);
            c01 = vmmlaq_s32(c01, hi[0], e[2]);
            c23 = vmmlaq_s32(c23, hi[1], e[2]);
            c01 = vmmlaq_s32(c01, hi[2], e[3]);
            c23 = vmmlaq_s32(c23, hi[3], e[3]);
            acc[j] = accumulate(acc[j], vuzp1q_s32(c01, c23), dw, a->d);
            if (j + 1 < N) {
                acc[j + 1] = accumulate(acc[j + 1], vuzp2q_s32(c01, c23), dw, a2->d);
            }
        }
    }
    SBQ4_UNROLL
    for (int j = 0; j < N; j++) {
        vst1q_f32(dst + j * stride, acc[j]);
    }
}

#endif  // SBQ4_I8MM_FN
#endif  // any variant

using group_fn = void (*)(const uint8_t *, const sbq4_act *, int64_t, float *, size_t);
#define SBQ4_FOR_N(fn, layout) \
    {nullptr, fn<layout, 1>, fn<layout, 2>, fn<layout, 3>, fn<layout, 4>, \
     fn<layout, 5>, fn<layout, 6>, fn<layout, 7>, fn<layout, 8>}

// The routines for a variant and layout: nullptr where this build lacks the variant.
const group_fn * table_for(int variant, int layout) {
#ifdef SBQ4_I8MM_FN
    static constexpr group_fn MMLA_4X4[SBQ4_MAX_ROWS + 1] = SBQ4_FOR_N(group_mmla, SBQ4_4X4);
    static constexpr group_fn MMLA_4X8[SBQ4_MAX_ROWS + 1] = SBQ4_FOR_N(group_mmla, SBQ4_4X8);
    if (variant == SBQ4_NEON_I8MM) {
        return layout == SBQ4_4X4 ? MMLA_4X4 : MMLA_4X8;
    }
#endif
#ifdef SBQ4_DOTPROD_FN
    static constexpr group_fn DOT_4X4[SBQ4_MAX_ROWS + 1] = SBQ4_FOR_N(group_dot, SBQ4_4X4);
    static constexpr group_fn DOT_4X8[SBQ4_MAX_ROWS + 1] = SBQ4_FOR_N(group_dot, SBQ4_4X8);
    if (variant == SBQ4_NEON_DOTPROD) {
        return layout == SBQ4_4X4 ? DOT_4X4 : DOT_4X8;
    }
#endif
    (void) variant, (void) layout;
    return nullptr;
}

}  // namespace

extern "C" void sbq4_quantize(const float * x, sbq4_act * y, int64_t nblocks) {
    for (int64_t i = 0; i < nblocks; i++) {
        quantize_block(x + i * QK, y + i);
    }
}

extern "C" int sbq4_gemm_as(int variant, int layout, int64_t nblocks, const void * w, int64_t nrows,
                            const sbq4_act * act, int n, float * dst, size_t dst_stride) {
    if ((layout != SBQ4_4X4 && layout != SBQ4_4X8) || n < 1 || n > SBQ4_MAX_ROWS || nrows % 4 != 0) {
        return 0;
    }
    const group_fn * table = table_for(variant, layout);
    if (table == nullptr) {
        return 0;
    }
    const uint8_t * wg = (const uint8_t *) w;
    for (int64_t r = 0; r < nrows; r += 4, wg += nblocks * GROUP4_BYTES) {
        table[n](wg, act, nblocks, dst + r, dst_stride);
    }
    return 1;
}
#else  // no variant for this target: nothing to offer; ggml's own kernels run

extern "C" void sbq4_quantize(const float *, sbq4_act *, int64_t) {}
extern "C" int sbq4_gemm_as(int, int, int64_t, const void *, int64_t, const sbq4_act *, int, float *, size_t) {
    return 0;
}

#endif

extern "C" int ggml_cpu_sbq4_variant(void) {
#ifdef SBQ4_AARCH64
    // the best variant both the CPU (its hwcaps) and this build have
    static const int variant = [] {
        const int cpu = sbq4_arm_variant(getauxval(AT_HWCAP), getauxval(AT_HWCAP2));
        if (cpu == SBQ4_NEON_I8MM && table_for(SBQ4_NEON_I8MM, SBQ4_4X4) != nullptr) {
            return SBQ4_NEON_I8MM;
        }
        return cpu != 0 && table_for(SBQ4_NEON_DOTPROD, SBQ4_4X4) != nullptr ? SBQ4_NEON_DOTPROD : 0;
    }();
    return variant;
#else
    return SBQ4_VARIANT;
#endif
}

extern "C" int sbq4_gemm(int layout, int64_t nblocks, const void * w, int64_t nrows, const sbq4_act * act, int n,
                         float * dst, size_t dst_stride) {
    return sbq4_gemm_as(ggml_cpu_sbq4_variant(), layout, nblocks, w, nrows, act, n, dst, dst_stride);
}

#ifndef SBQ4_STANDALONE
// ---------------------------------------------------------------- the ggml side
#include "ggml.h"
#include "ggml-cpu-impl.h"

// The variant that takes weights in this layout here: x86 builds take ggml's x86 layout (SBQ4_8X8),
// aarch64 builds its two ARM ones; 0 for any other pairing (repack.cpp's ARM hook is compiled on x86
// too, and the x86 one on aarch64, where ggml repacks Q4_0 to 8x8 only with 256-bit SVE).
static int layout_variant(int layout) {
#ifdef SBQ4_AARCH64
    return layout == SBQ4_4X4 || layout == SBQ4_4X8 ? ggml_cpu_sbq4_variant() : 0;
#else
    return layout == SBQ4_8X8 ? SBQ4_VARIANT : 0;
#endif
}

static int layout_rows(int layout) { return layout == SBQ4_8X8 ? 8 : 4; }

static bool shape_qualifies(const ggml_tensor * op, int layout) {
    const ggml_tensor * w = op->src[0];
    const ggml_tensor * x = op->src[1];
    return layout_variant(layout) > 0 && op->op == GGML_OP_MUL_MAT && w->type == GGML_TYPE_Q4_0 &&
           w->ne[0] % 32 == 0 && w->ne[1] % layout_rows(layout) == 0 && w->ne[2] == 1 && w->ne[3] == 1 &&
           x->type == GGML_TYPE_F32 && x->ne[1] >= 1 && x->ne[1] <= SBQ4_MAX_ROWS && x->ne[2] == 1 &&
           x->ne[3] == 1 && x->nb[0] == sizeof(float) && op->type == GGML_TYPE_F32 && op->nb[0] == sizeof(float);
}

extern "C" size_t ggml_sbq4_work_size_as(const ggml_tensor * op, int layout) {
    return shape_qualifies(op, layout) ? (size_t) op->src[1]->ne[1] * (op->src[0]->ne[0] / 32) * sizeof(sbq4_act)
                                       : 0;
}

extern "C" int ggml_sbq4_takes_as(const ggml_tensor * op, int layout) {
    const char * env = getenv("OMNIDRAFT_SBQ4");
    return shape_qualifies(op, layout) && !(env != NULL && strcmp(env, "0") == 0);
}

extern "C" int ggml_sbq4_mul_mat_as(const ggml_compute_params * params, ggml_tensor * op, int layout) {
    if (params->wsize < ggml_sbq4_work_size_as(op, layout)) {
        return 0;  // planned for ggml's own path (OMNIDRAFT_SBQ4 changed in between): let it run
    }
    const ggml_tensor * w = op->src[0];
    const ggml_tensor * x = op->src[1];
    const int ith = params->ith, nth = params->nth;
    const int64_t nb = w->ne[0] / 32;
    const int n = (int) x->ne[1];
    sbq4_act * act = (sbq4_act *) params->wdata;

    // every thread quantizes its share of the blocks of every activation row
    const int64_t b0 = nb * ith / nth, b1 = nb * (ith + 1) / nth;
    for (int j = 0; j < n; j++) {
        const float * row = (const float *) ((const char *) x->data + j * x->nb[1]);
        sbq4_quantize(row + b0 * 32, act + j * nb + b0, b1 - b0);
    }
    if (ith == 0) {
        ggml_threadpool_chunk_set(params->threadpool, nth);
    }
    ggml_barrier(params->threadpool);

    // groups of 8 (x86) or 4 (aarch64) weight rows, each group's blocks 18 bytes a row, in 4 chunks per
    // thread, taken as threads come free; which thread computes a row never changes its value
    const int64_t rows = layout_rows(layout), group_bytes = rows * 18;
    const int64_t ngroups = w->ne[1] / rows;
    const int64_t nchunks = std::min<int64_t>(ngroups, 4 * nth);
    for (int64_t c = ith; c < nchunks; c = ggml_threadpool_chunk_add(params->threadpool, 1)) {
        const int64_t g0 = ngroups * c / nchunks, g1 = ngroups * (c + 1) / nchunks;
        sbq4_gemm(layout, nb, (const char *) w->data + g0 * nb * group_bytes, (g1 - g0) * rows, act, n,
                  (float *) op->data + g0 * rows, op->nb[1] / sizeof(float));
    }
    return 1;
}

// The x86 hook's names (block_q4_0x8 weights).
extern "C" size_t ggml_sbq4_work_size(const ggml_tensor * op) { return ggml_sbq4_work_size_as(op, SBQ4_8X8); }
extern "C" int ggml_sbq4_takes(const ggml_tensor * op) { return ggml_sbq4_takes_as(op, SBQ4_8X8); }
extern "C" int ggml_sbq4_mul_mat(const ggml_compute_params * params, ggml_tensor * op) {
    return ggml_sbq4_mul_mat_as(params, op, SBQ4_8X8);
}
#endif  // SBQ4_STANDALONE

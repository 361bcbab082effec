// q8k: ggml's quantize_row_q8_K on x86 with AVX2: the same bytes as quantize_row_q8_K_ref, about ten times
// sooner.
//
// Why.  Every Q4_K and Q6_K product (the Q4_K_M files users download) quantizes its activations to Q8_K
// first, and on x86 ggml has no SIMD version of that step: arch/x86/quants.c calls the scalar reference.
// A 1.5B verification pass of 8 rows quantizes about 4 M floats that way; perf on a 2-core Zen 5 put 5.8 %
// of such a pass in quantize_row_q8_K_ref (and the decode pays the same per row).
//
// Same bytes.  The reference, per block of 256: amax = the largest |x| and max = the first x that has it;
// iscale = -127 / max; q = min(127, nearest_int(iscale * x)) with nearest_int rounding half to even (its
// +1.5 * 2^23 trick on the product rounded to float, no fused multiply-add: ggml-base is built without
// FMA); the 16 sums of 16 q's; d = 1 / iscale.  Here the product is the same float multiply, cvtps2dq rounds
// it half to even (MXCSR's default), and saturating packs clamp as min(127, .) does for |q| <= 128.  Where
// that does not hold (a block holding NaN or infinity, or one so small that iscale overflows), the block
// takes the reference's own scalar steps, so even garbage comes out as the reference's garbage.  One
// difference, on purpose: an all-zero block gets zero sums (the reference leaves them unwritten; d = 0
// multiplies them away).
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(__AVX2__)
#include <immintrin.h>

namespace {

constexpr int QK_K = 256;

struct block_q8_K_view {  // ggml's block_q8_K: float d, int8 qs[256], int16 bsums[16] (292 bytes)
    float d;
    int8_t qs[QK_K];
    int16_t bsums[QK_K / 16];
};
static_assert(sizeof(block_q8_K_view) == 292, "block_q8_K layout");

inline float hmax(__m256 v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
}

// The reference's steps for one block, iscale given (ggml-quants.c: nearest_int and the loop).  The product goes
// through a volatile so that it is rounded to float before the add, as in the reference's build (no FMA): GCC
// contracts `a * b + c` into one fused multiply-add where it may, which rounds once and can land a half on the
// other side.
void quantize_block_scalar(const float * x, float iscale, block_q8_K_view * y) {
    for (int j = 0; j < QK_K; ++j) {
        volatile float p = iscale * x[j];
        const float val = p + 12582912.f;
        int i;
        memcpy(&i, &val, sizeof i);
        const int v = (i & 0x007fffff) - 0x00400000;
        y->qs[j] = (int8_t) (v < 127 ? v : 127);
    }
    for (int j = 0; j < QK_K / 16; ++j) {
        int sum = 0;
        for (int k = 0; k < 16; ++k) {
            sum += y->qs[j * 16 + k];
        }
        y->bsums[j] = (int16_t) sum;
    }
    y->d = 1 / iscale;
}

// The reference's max: the first x of the largest |x| (NaNs skipped, as its `ax > amax` skips them); 0 for a
// block of zeros.  Returns false where the block holds NaN or infinity (then *max comes from the scalar loop).
bool block_max(const float * x, float * max) {
    const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
    const __m256 inf = _mm256_set1_ps(__builtin_inff());
    __m256 vmax = _mm256_setzero_ps(), bad = _mm256_setzero_ps();
    for (int i = 0; i < QK_K; i += 8) {
        const __m256 a = _mm256_and_ps(_mm256_loadu_ps(x + i), abs_mask);
        vmax = _mm256_max_ps(a, vmax);
        bad = _mm256_or_ps(bad, _mm256_cmp_ps(a, inf, _CMP_NLT_UQ));  // NaN or infinite
    }
    *max = 0.0f;
    if (_mm256_movemask_ps(bad)) {
        float amax = 0.0f;
        for (int j = 0; j < QK_K; ++j) {
            if (__builtin_fabsf(x[j]) > amax) {
                amax = __builtin_fabsf(x[j]);
                *max = x[j];
            }
        }
        return false;
    }
    const __m256 va = _mm256_set1_ps(hmax(vmax));
    for (int i = 0; i < QK_K; i += 8) {
        const int m = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_and_ps(_mm256_loadu_ps(x + i), abs_mask), va, _CMP_EQ_OQ));
        if (m) {
            *max = x[i + __builtin_ctz(m)];
            break;
        }
    }
    return true;
}

// 32 values at a time: the products rounded half to even, packed with saturation, and the sums of each 16
// (sad of the bytes offset to unsigned gives sums of 8, plus 8 * 128 each).
void quantize_block_simd(const float * x, float iscale, block_q8_K_view * y) {
    const __m256 vs = _mm256_set1_ps(iscale);
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    const __m256i bias = _mm256_set1_epi8((char) 0x80);
    for (int i = 0; i < QK_K; i += 32) {
        __m256i q[4];
        for (int k = 0; k < 4; k++) {
            q[k] = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + i + 8 * k), vs));
        }
        // packs work within 128-bit lanes: 32-bit lanes of the four vectors end up [0 1 2 3 | 4 5 6 7] apart
        const __m256i b = _mm256_permutevar8x32_epi32(
            _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3])), order);
        _mm256_storeu_si256((__m256i *) (y->qs + i), b);
        alignas(32) uint64_t s[4];
        _mm256_store_si256((__m256i *) s, _mm256_sad_epu8(_mm256_xor_si256(b, bias), _mm256_setzero_si256()));
        y->bsums[i / 16] = (int16_t) ((int) (s[0] + s[1]) - 16 * 128);
        y->bsums[i / 16 + 1] = (int16_t) ((int) (s[2] + s[3]) - 16 * 128);
    }
    y->d = 1 / iscale;
}

void quantize_block(const float * x, block_q8_K_view * y) {
    float max;
    const bool finite = block_max(x, &max);
    if (max == 0.0f) {
        memset(y, 0, sizeof *y);
        return;
    }
    const float iscale = -127.f / max;
    // NaN or infinity in the block, or |max| below 127 / FLT_MAX (the products overflow where cvtps2dq saturates)
    if (!finite || __builtin_isinf(iscale)) {
        quantize_block_scalar(x, iscale, y);
    } else {
        quantize_block_simd(x, iscale, y);
    }
}

bool switched_off(const char * name) {
    const char * env = getenv(name);
    return env != NULL && strcmp(env, "0") == 0;
}

}  // namespace

// k values (a multiple of 256) from x into k / 256 block_q8_K at y.  Returns 0, writing nothing, where this
// build has no AVX2, or OMNIDRAFT_SBQ4 (the switch of all omnidraft's kernels) or OMNIDRAFT_Q8K (this one
// alone: the same bytes either way, so only its time differs) is "0"; read at every call, as ggml_sbk_takes
// reads its switch, so that one process can time both.
extern "C" int sbk_quantize_q8_K(const float * x, void * y, int64_t k) {
    if (switched_off("OMNIDRAFT_SBQ4") || switched_off("OMNIDRAFT_Q8K")) {
        return 0;
    }
    block_q8_K_view * out = (block_q8_K_view *) y;
    for (int64_t i = 0; i < k / QK_K; i++) {
        quantize_block(x + i * QK_K, out + i);
    }
    return 1;
}
#else
extern "C" int sbk_quantize_q8_K(const float *, void *, int64_t) { return 0; }
#endif

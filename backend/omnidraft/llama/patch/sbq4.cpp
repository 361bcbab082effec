// sbq4: omnidraft's small-batch Q4_0 matrix product for ggml's CPU backend (x86, AVX2 and up).
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
// Layout.  Weights are ggml's block_q4_0x8 (repack.cpp, make_block_q4_0x8): the fp16 scales of 8
// rows, then their nibbles interleaved 8 bytes at a time and xor-ed with 0x88.  Bytes 0..63 hold
// row r's quant bytes 0..7 at 8r (elements 0..7 in the low nibbles, 16..23 in the high ones),
// bytes 64..127 its bytes 8..15 (elements 8..15 and 24..31).  We undo the xor to get unsigned
// nibbles u = w + 8 and compute dot(w, a) = dot(u, a) - 8 * sum(a) with an unsigned-by-signed
// byte dot product (vpdpbusd, or vpmaddubsw + vpmaddwd on plain AVX2).  Each weight row owns two
// adjacent int32 lanes; the -8 * sum(a) term is split between them as -4 * sum(a) each, which is the
// value the int32 accumulators start from.
#include "sbq4.h"

#include <stdlib.h>
#include <string.h>

#include <algorithm>

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
#endif

#define GROUP_BYTES_C 144  // sizeof(block_q4_0x8): 8 fp16 scales + 128 quant bytes

extern "C" int ggml_cpu_sbq4_variant(void) { return SBQ4_VARIANT; }

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
inline __m256i dot_u8s8(__m256i acc, __m256i u, __m256i s) {
#if SBQ4_VARIANT == 2 && defined(__AVXVNNI__)
    return _mm256_dpbusd_avx_epi32(acc, u, s);
#elif SBQ4_VARIANT == 2
    return _mm256_dpbusd_epi32(acc, u, s);
#else
    // u <= 15 and |s| <= 128: the 16-bit pair sums stay far from saturation
    return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)));
#endif
}

inline __m256i nibbles(__m256i q) {
    return _mm256_xor_si256(_mm256_and_si256(q, _mm256_set1_epi8(0x0F)), _mm256_set1_epi8(0x08));
}

template <int N>
void group_rows(const uint8_t * w0, const sbq4_act * act, int64_t nb, float * dst, size_t stride) {
    const __m256i dup = _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3);
    for (int half = 0; half < 2; half++) {
        const uint8_t * w = w0;
        __m256 acc[N];
        for (int j = 0; j < N; j++) {
            acc[j] = _mm256_setzero_ps();
        }
        for (int64_t b = 0; b < nb; b++, w += GROUP_BYTES) {
            if (half == 0) {
                prefetch_block(w);  // the second half finds the group's blocks in cache
            }
            const __m256i q0 = _mm256_loadu_si256((const __m256i *) (w + 16 + 32 * half));
            const __m256i q1 = _mm256_loadu_si256((const __m256i *) (w + 80 + 32 * half));
            const __m256i l0 = nibbles(q0), h0 = nibbles(_mm256_srli_epi16(q0, 4));
            const __m256i l1 = nibbles(q1), h1 = nibbles(_mm256_srli_epi16(q1, 4));
            const __m256 dw = _mm256_permutevar8x32_ps(
                _mm256_castps128_ps256(_mm_cvtph_ps(_mm_loadl_epi64((const __m128i *) (w + 8 * half)))), dup);
            for (int j = 0; j < N; j++) {
                const sbq4_act * a = act + j * nb + b;
                __m256i s = _mm256_set1_epi32(a->bias);
                s = dot_u8s8(s, l0, _mm256_set1_epi64x(load64(a->qs + 0)));
                s = dot_u8s8(s, l1, _mm256_set1_epi64x(load64(a->qs + 8)));
                s = dot_u8s8(s, h0, _mm256_set1_epi64x(load64(a->qs + 16)));
                s = dot_u8s8(s, h1, _mm256_set1_epi64x(load64(a->qs + 24)));
                acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(dw, _mm256_set1_ps(a->d)), acc[j]);
            }
        }
        for (int j = 0; j < N; j++) {  // row r = lane 2r + lane 2r + 1
            const __m256 pairs = _mm256_add_ps(acc[j], _mm256_permute_ps(acc[j], _MM_SHUFFLE(2, 3, 0, 1)));
            const __m256 rows = _mm256_permutevar8x32_ps(pairs, _mm256_setr_epi32(0, 2, 4, 6, 0, 0, 0, 0));
            _mm_storeu_ps(dst + j * stride + 4 * half, _mm256_castps256_ps128(rows));
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

extern "C" void sbq4_gemm(int64_t nblocks, const void * w, int64_t nrows, const sbq4_act * act, int n,
                          float * dst, size_t dst_stride) {
    const group_fn fn = GROUP_FOR_N[n];
    const uint8_t * wg = (const uint8_t *) w;
    for (int64_t r = 0; r < nrows; r += 8, wg += nblocks * GROUP_BYTES) {
        fn(wg, act, nblocks, dst + r, dst_stride);
    }
}

#else  // SBQ4_VARIANT == 0: nothing to offer; ggml's own kernels run

extern "C" void sbq4_quantize(const float *, sbq4_act *, int64_t) {}
extern "C" void sbq4_gemm(int64_t, const void *, int64_t, const sbq4_act *, int, float *, size_t) {}

#endif

#ifndef SBQ4_STANDALONE
// ---------------------------------------------------------------- the ggml side
#include "ggml.h"
#include "ggml-cpu-impl.h"

static bool shape_qualifies(const ggml_tensor * op) {
    const ggml_tensor * w = op->src[0];
    const ggml_tensor * x = op->src[1];
    return SBQ4_VARIANT > 0 && op->op == GGML_OP_MUL_MAT && w->type == GGML_TYPE_Q4_0 &&
           w->ne[0] % 32 == 0 && w->ne[1] % 8 == 0 && w->ne[2] == 1 && w->ne[3] == 1 &&
           x->type == GGML_TYPE_F32 && x->ne[1] >= 1 && x->ne[1] <= SBQ4_MAX_ROWS && x->ne[2] == 1 &&
           x->ne[3] == 1 && x->nb[0] == sizeof(float) && op->type == GGML_TYPE_F32 && op->nb[0] == sizeof(float);
}

extern "C" size_t ggml_sbq4_work_size(const ggml_tensor * op) {
    return shape_qualifies(op) ? (size_t) op->src[1]->ne[1] * (op->src[0]->ne[0] / 32) * sizeof(sbq4_act) : 0;
}

extern "C" int ggml_sbq4_takes(const ggml_tensor * op) {
    const char * env = getenv("OMNIDRAFT_SBQ4");
    return shape_qualifies(op) && !(env != NULL && strcmp(env, "0") == 0);
}

extern "C" int ggml_sbq4_mul_mat(const ggml_compute_params * params, ggml_tensor * op) {
    if (params->wsize < ggml_sbq4_work_size(op)) {
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

    // groups of 8 weight rows in 4 chunks per thread, taken as threads come free; which thread
    // computes a row never changes its value
    const int64_t ngroups = w->ne[1] / 8;
    const int64_t nchunks = std::min<int64_t>(ngroups, 4 * nth);
    for (int64_t c = ith; c < nchunks; c = ggml_threadpool_chunk_add(params->threadpool, 1)) {
        const int64_t g0 = ngroups * c / nchunks, g1 = ngroups * (c + 1) / nchunks;
        sbq4_gemm(nb, (const char *) w->data + g0 * nb * GROUP_BYTES_C, (g1 - g0) * 8, act, n,
                  (float *) op->data + g0 * 8, op->nb[1] / sizeof(float));
    }
    return 1;
}
#endif  // SBQ4_STANDALONE

/* The machine's two ceilings for a quantized matrix product: how fast its cores read memory, and how
 * many int8 multiply-adds they issue.  Compiled and run by omnidraft/bench/roofline.py.
 *
 *   roofline THREADS   ->  one JSON line: {"threads":T,"read_gbps":..,"int8_gmacs":..,"int8_isa":".."}
 *
 * read: every thread sums its own slice of a 512 MiB buffer (8 streams of 64-byte loads), best of 5;
 * int8: every thread runs 12 independent chains of the widest unsigned x signed byte dot product the
 * compiler was allowed (vpdpbusd zmm / ymm; on plain AVX2, four vpmaddubsw summed in 16 bits and one vpmaddwd,
 * as the kernels do), 64 M rounds. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#if defined(__AVX2__)
#include <immintrin.h>
#endif

#define BUF_BYTES (512u << 20)
#define ROUNDS 64000000L
#define CHAINS 12

static uint8_t *buf;
static int nthreads;
static volatile int64_t sink[64];

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static void *reader(void *arg) {
    const long t = (long) arg;
    const size_t per = BUF_BYTES / nthreads / 64 * 64;
    const uint64_t *p = (const uint64_t *) (buf + per * t);
    uint64_t s[8] = {0};
    for (size_t i = 0; i < per / 8; i += 8) {
        for (int k = 0; k < 8; k++) s[k] += p[i + k];  /* vectorised by the compiler: 64-byte loads */
    }
    sink[t] = (int64_t) (s[0] + s[1] + s[2] + s[3] + s[4] + s[5] + s[6] + s[7]);
    return NULL;
}

#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
#define ISA "vpdpbusd zmm (AVX-512 VNNI)"
#define MACS_PER_OP 64
typedef __m512i vec;
#define VZERO() _mm512_setzero_si512()
#define VSET(i) _mm512_set1_epi32(i)
#define VONES() _mm512_set1_epi8(1)
#define DOT(a, x) _mm512_dpbusd_epi32((a), (x), (x))
#define VLOW(a) _mm512_cvtsi512_si32(a)
#elif defined(__AVXVNNI__)
#define ISA "vpdpbusd ymm (AVX-VNNI)"
#define MACS_PER_OP 32
typedef __m256i vec;
#define VZERO() _mm256_setzero_si256()
#define VSET(i) _mm256_set1_epi32(i)
#define VONES() _mm256_set1_epi8(1)
#define DOT(a, x) _mm256_dpbusd_avx_epi32((a), (x), (x))
#define VLOW(a) _mm256_cvtsi256_si32(a)
#elif defined(__AVX2__)
/* What omnidraft's AVX2 kernels do (sbq4.cpp, sbkx8.cpp): four byte products summed in 16 bits, then widened
 * by one vpmaddwd.  The accumulator is an operand of every product, so none can be hoisted out of the loop;
 * x and y (two inputs the compiler cannot fold) keep the four products distinct. */
#define ISA "4 vpmaddubsw + 3 vpaddw + vpmaddwd ymm (AVX2)"
#define MACS_PER_OP 128
typedef __m256i vec;
#define VZERO() _mm256_setzero_si256()
#define VSET(i) _mm256_set1_epi32(i)
#define VONES() _mm256_set1_epi8(1)
#define P16(u, s) _mm256_maddubs_epi16((u), (s))
#define DOT(a, x) _mm256_add_epi32((a), _mm256_madd_epi16(_mm256_add_epi16( \
    _mm256_add_epi16(P16((x), (a)), P16((a), (x))), _mm256_add_epi16(P16((y), (a)), P16((a), (y)))), \
    _mm256_set1_epi16(1)))
#define VLOW(a) _mm256_cvtsi256_si32(a)
#endif

#ifdef ISA
static volatile int8_t one = 1;

static void *dotter(void *arg) {
    vec x = VONES(), y = VSET(one + 1);
    if (one != 1) x = VZERO();  /* inputs the compiler cannot fold */
    (void) y;
    /* 12 named accumulators, each started apart so that the compiler keeps 12 independent chains */
    vec a0 = VSET(0), a1 = VSET(1), a2 = VSET(2), a3 = VSET(3), a4 = VSET(4), a5 = VSET(5), a6 = VSET(6),
        a7 = VSET(7), a8 = VSET(8), a9 = VSET(9), a10 = VSET(10), a11 = VSET(11);
    for (long r = 0; r < ROUNDS / CHAINS; r++) {
        a0 = DOT(a0, x); a1 = DOT(a1, x); a2 = DOT(a2, x); a3 = DOT(a3, x); a4 = DOT(a4, x); a5 = DOT(a5, x);
        a6 = DOT(a6, x); a7 = DOT(a7, x); a8 = DOT(a8, x); a9 = DOT(a9, x); a10 = DOT(a10, x); a11 = DOT(a11, x);
    }
    sink[(long) arg] = (int64_t) VLOW(a0) + VLOW(a1) + VLOW(a2) + VLOW(a3) + VLOW(a4) + VLOW(a5) + VLOW(a6) +
                       VLOW(a7) + VLOW(a8) + VLOW(a9) + VLOW(a10) + VLOW(a11);
    return NULL;
}
#endif

static double run(void *(*fn)(void *)) {
    pthread_t th[64];
    const double t0 = now();
    for (long t = 0; t < nthreads; t++) pthread_create(&th[t], NULL, fn, (void *) t);
    for (int t = 0; t < nthreads; t++) pthread_join(th[t], NULL);
    return now() - t0;
}

int main(int argc, char **argv) {
    nthreads = argc > 1 ? atoi(argv[1]) : 1;
    if (nthreads < 1 || nthreads > 64) return 2;
    buf = aligned_alloc(64, BUF_BYTES);
    if (!buf) return 3;
    memset(buf, 1, BUF_BYTES);
    double best = 1e9;
    for (int i = 0; i < 5; i++) {
        const double dt = run(reader);
        if (dt < best) best = dt;
    }
    printf("{\"threads\": %d, \"read_gbps\": %.2f", nthreads, BUF_BYTES / best / 1e9);
#ifdef ISA
    const double dt = run(dotter);
    printf(", \"int8_gmacs\": %.1f, \"int8_isa\": \"%s\"", (double) (ROUNDS / CHAINS * CHAINS) * MACS_PER_OP * nthreads / dt / 1e9, ISA);
#else
    printf(", \"int8_gmacs\": null, \"int8_isa\": null");
#endif
    printf("}\n");
    return 0;
}

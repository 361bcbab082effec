// Does streaming 1 GB with prefetchnta keep a 21 MB buffer (the drafter's weights) in L3?  BENCHMARKS.md, "The drafter's
// share, priced in the loop".  gcc -O2 -mavx512f scripts/lab/cold_read.c -o cold_read && ./cold_read  (one core)
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
static __m512i sum_buf(const char * p, size_t n, int hint) {
    __m512i acc = _mm512_setzero_si512();
    for (size_t i = 0; i < n; i += 64) {
        if (hint == 1) _mm_prefetch(p + i + 4096, _MM_HINT_NTA);
        else if (hint == 0) _mm_prefetch(p + i + 4096, _MM_HINT_T0);
        acc = _mm512_add_epi64(acc, _mm512_load_si512((const void *)(p + i)));
    }
    return acc;
}
int main(void) {
    size_t big = (size_t)1 << 30, small = 21u << 20;
    char * B = aligned_alloc(64, big), * S = aligned_alloc(64, small);
    memset(B, 1, big); memset(S, 2, small);
    volatile long long sink = 0;
    for (int hint = 0; hint < 3; hint++) {
        double ts = 0, tb = 0;
        for (int r = 0; r < 8; r++) {
            double t0 = now(); __m512i a = sum_buf(B, big, hint); double t1 = now();
            __m512i b = sum_buf(S, small, 0); double t2 = now();
            sink += _mm512_reduce_add_epi64(a) + _mm512_reduce_add_epi64(b);
            if (r) { tb += t1 - t0; ts += t2 - t1; }
        }
        printf("%s: 1 GB stream %.2f ms, then 21 MB read %.3f ms (warm alone: see below)\n",
               hint == 0 ? "prefetcht0" : hint == 1 ? "prefetchnta" : "no prefetch", tb / 7 * 1e3, ts / 7 * 1e3);
    }
    double t0 = now(); for (int r = 0; r < 8; r++) { __m512i b = sum_buf(S, small, 0); sink += _mm512_reduce_add_epi64(b); }
    printf("21 MB read back to back: %.3f ms\n", (now() - t0) / 8 * 1e3);
    return (int)(sink & 1);
}

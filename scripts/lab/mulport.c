/* Which AVX2 instruction bounds an extra verification row on this core (issue 41, "the AVX2 path")?
 * One thread, 12 independent chains per instruction mix, 32 M rounds; prints G instructions/s and, for
 * the multiplies, int8 multiply-adds/s.  On cores whose vector integer multiplier is a single 128-bit pipe
 * (AMD Zen 1: a ymm vpmaddubsw is two uops on FP0), vpmaddubsw alone issues at half the rate of vpaddw, and
 * mixing in vpmaddwd halves it again.
 *
 *   cc -O2 -mavx2 -mfma scripts/lab/mulport.c -o /tmp/mulport && /tmp/mulport
 */
#include <immintrin.h>
#include <stdio.h>
#include <time.h>

#define ROUNDS 32000000L
#define CHAINS 12

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static volatile int sink;

/* Each mix: 12 chains in registers (the empty asm keeps them there and keeps the compiler from folding). */
#define STEP12(OP) OP(a0) OP(a1) OP(a2) OP(a3) OP(a4) OP(a5) OP(a6) OP(a7) OP(a8) OP(a9) OP(a10) OP(a11)
#define KEEP(a) __asm__ volatile("" : "+x"(a));
#define MADDUBS(a) a = _mm256_maddubs_epi16(a, x);
#define PAIR(a) a = _mm256_madd_epi16(_mm256_maddubs_epi16(a, x), y);
#define ADDW(a) a = _mm256_add_epi16(a, x);
#define MADDUBS_ADD(a) a = _mm256_add_epi16(_mm256_maddubs_epi16(a, x), y);
#define MIX(NAME, OP)                                                                          \
    static double NAME(void) {                                                                 \
        __m256i a0 = _mm256_set1_epi32(0), a1 = _mm256_set1_epi32(1), a2 = _mm256_set1_epi32(2); \
        __m256i a3 = a0, a4 = a1, a5 = a2, a6 = a0, a7 = a1, a8 = a2, a9 = a0, a10 = a1, a11 = a2; \
        const __m256i x = _mm256_set1_epi8(3), y = _mm256_set1_epi16(1);                       \
        const double t = now();                                                                \
        for (long r = 0; r < ROUNDS; r++) { STEP12(OP) STEP12(KEEP) }                          \
        const double dt = now() - t;                                                           \
        sink = _mm256_extract_epi32(a0, 0) + _mm256_extract_epi32(a11, 0);                     \
        return dt;                                                                             \
    }
MIX(mix0, MADDUBS)
MIX(mix1, PAIR)
MIX(mix2, ADDW)
MIX(mix3, MADDUBS_ADD)

static double run(int mix) { return mix == 0 ? mix0() : mix == 1 ? mix1() : mix == 2 ? mix2() : mix3(); }

int main(void) {
    const char *names[] = {"vpmaddubsw", "vpmaddubsw+vpmaddwd", "vpaddw", "vpmaddubsw+vpaddw"};
    const int per[] = {1, 2, 1, 2};
    for (int mix = 0; mix < 4; mix++) {
        double best = 1e9;
        for (int rep = 0; rep < 3; rep++) {
            const double dt = run(mix);
            best = dt < best ? dt : best;
        }
        const double steps = (double) ROUNDS * CHAINS / best;
        printf("{\"mix\": \"%s\", \"g_instr_per_s\": %.2f, \"g_int8_macs_per_s\": %.1f}\n", names[mix],
               steps * per[mix] / 1e9, mix == 2 ? 0.0 : steps * 32 / 1e9);
    }
    return 0;
}

// One thread (or a few) timing omnidraft's interleaved small-batch kernels alone, outside llama.cpp: sbkx8.cpp
// (Q4_K, block_q4_Kx8), with -DQ6 sbq6x8.cpp (Q6_K, block_q6_Kx8), or with -DQ40 -DSBQ4_STANDALONE sbq4.cpp
// (Q4_0, block_q4_0x8, the fast mode's and the speed format's), on random blocks of a 4480 x 1536 slice
// of the 1.5B (ffn_gate's shape), for n = 1..8 activation rows.  Prints the best of several calls per n in us,
// and a hash of every output, which must not change between kernel variants (the rows' bits).
//
//   g++ -O3 -std=c++17 -pthread -DSBK_STANDALONE -mavx2 -mfma -mf16c scripts/lab/x8_kernel_bench.cpp \
//       backend/omnidraft/llama/patch/sbkx8.cpp -o x8bench        # add -mavxvnni, or -march=..., per tier
//   ./x8bench            # the slice held in cache (L2/L3): the kernel's instructions
//   ./x8bench 48 2       # 48 slices (186 MB) streamed from memory by 2 threads, as a decode reads them
//   g++ -O3 -std=c++17 -pthread -DQ40 -DSBQ4_STANDALONE -mavx2 -mfma -mf16c scripts/lab/x8_kernel_bench.cpp
//       backend/omnidraft/llama/patch/sbq4.cpp -o q40bench     # the Q4_0 kernel (74 MB in 48 slices)
//
// The figures in sbkx8.cpp's comments came from this program (issue 41, ninth session).
// Its twin is scripts/lab/sbk_rows.py (the same timing from Python, through tests/sbk_harness.py's blocks and
// builds); this one exists because it ran as a static binary on a lent GPU host, where the harness was not built.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <chrono>
#include <thread>
#include <vector>

extern "C" int sbk_q4kx8_gemm(int64_t, const void *, int64_t, int64_t, const void *, size_t, int, float *, size_t);
extern "C" int sbk_q6kx8_gemm(int64_t, const void *, int64_t, int64_t, const void *, size_t, int, float *, size_t);

#if defined(Q40)
// sbq4.cpp (-DSBQ4_STANDALONE): block_q4_0x8, 32 values a block; activations sbq4_act (36-byte int8 blocks)
#include "../../backend/omnidraft/llama/patch/sbq4.h"
constexpr size_t BLOCK = 144;  // block_q4_0x8: fp16 d[8] first
constexpr int N_HALF = 8;
constexpr int QB = 32;
static int GEMM(int64_t k, const void * w, int64_t, int64_t rows, const void * act, size_t, int n, float * dst,
                size_t stride) {
    return sbq4_gemm(SBQ4_8X8, k / 32, w, rows, (const sbq4_act *) act, n, dst, stride);
}
#elif defined(Q6)
constexpr size_t BLOCK = 1680;  // block_q6_Kx8: fp16 d[8] first
constexpr int N_HALF = 8;
constexpr int QB = 256;
#define GEMM sbk_q6kx8_gemm
#else
constexpr size_t BLOCK = 1152;  // block_q4_Kx8: fp16 d[8], dmin[8] first
constexpr int N_HALF = 16;
constexpr int QB = 256;
#define GEMM sbk_q4kx8_gemm
#endif
constexpr int64_t K = 1536, ROWS = 4480, NB = K / QB;
#if defined(Q40)
constexpr int64_t Q8K = sizeof(sbq4_act);
#else
constexpr int64_t Q8K = 292;
#endif

int main(int argc, char ** argv) {
    const int slices = argc > 1 ? atoi(argv[1]) : 1;
    const int threads = argc > 2 ? atoi(argv[2]) : 1;
    const size_t slice_bytes = (ROWS / 8) * NB * BLOCK;
    std::vector<uint8_t> w(slice_bytes * slices);
    srand(1);
    for (auto & b : w) b = (uint8_t) rand();
    for (size_t g = 0; g < w.size() / BLOCK; g++) {  // small positive fp16 scales: finite outputs
        uint16_t * h = (uint16_t *) (w.data() + g * BLOCK);
        for (int i = 0; i < N_HALF; i++) h[i] = (uint16_t) (0x2000 + (rand() & 0xff));
    }
    std::vector<uint8_t> act(8 * NB * Q8K);  // block_q8_K rows: float d, 256 int8, int16 sums of each 16
    for (auto & b : act) b = (uint8_t) rand();
#if defined(Q40)  // what sbq4_quantize makes: int8 in -127..127, the bias, a small scale
    for (int j = 0; j < 8 * NB; j++) {
        std::vector<float> x(32);
        for (auto & v : x) v = (float) (rand() % 2001 - 1000) / 1000.0f;
        sbq4_quantize(x.data(), (sbq4_act *) (act.data() + j * Q8K), 1);
    }
#else
    for (int j = 0; j < 8 * NB; j++) {
        const float d = 0.01f;
        memcpy(act.data() + j * Q8K, &d, 4);
        int16_t * s = (int16_t *) (act.data() + j * Q8K + 260);
        for (int t = 0; t < 16; t++) s[t] = (int16_t) (rand() % 1000);
    }
#endif
    std::vector<float> out(8 * ROWS * threads);
    uint64_t hash = 1469598103934665603ULL;
    for (int n = 1; n <= 8; n++) {
        GEMM(K, w.data(), 0, ROWS, act.data(), NB * Q8K, n, out.data(), ROWS);
        for (int i = 0; i < n * ROWS; i++) {
            uint32_t u;
            memcpy(&u, &out[i], 4);
            hash = (hash ^ u) * 1099511628211ULL;
        }
        double best = 1e30;
        for (int rep = 0; rep < (slices > 1 ? 3 : 200); rep++) {
            const auto t0 = std::chrono::steady_clock::now();
            std::vector<std::thread> pool;
            for (int t = 0; t < threads; t++) {
                pool.emplace_back([&, t] {
                    for (int s = t; s < slices; s += threads) {
                        GEMM(K, w.data() + s * slice_bytes, 0, ROWS, act.data(), NB * Q8K, n, out.data() + t * 8 * ROWS,
                             ROWS);
                    }
                });
            }
            for (auto & th : pool) th.join();
            const std::chrono::duration<double, std::micro> dt = std::chrono::steady_clock::now() - t0;
            best = std::min(best, dt.count() / slices);
        }
        printf("n=%d %.1f  ", n, best);
    }
    printf("hash=%016llx\n", (unsigned long long) hash);
    return 0;
}

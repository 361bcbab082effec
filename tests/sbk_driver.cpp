// A command-line driver for sbk.cpp, for builds that Python cannot load (an aarch64 binary under
// qemu-aarch64 on an x86 host, tests/test_sbk_arm.py).  Built with sbk.cpp alone:
//
//   aarch64-linux-gnu-g++ -O2 -std=c++17 -march=armv8.2-a+dotprod -static -DSBK_STANDALONE
//       tests/sbk_driver.cpp backend/omnidraft/llama/patch/sbk.cpp -o sbk_driver
//
//   sbk_driver --info                    prints "variant=V dotprod=D i8mm=I" (D, I: the CPU's hwcaps, 1/0;
//                                        -1 off aarch64 Linux)
//   sbk_driver [--variant V] [--split S] < in
//                                        runs a case through sbk_gemm, or through variant V (sbk_gemm_as);
//                                        --split: the batched calls take weight rows [0, S) and [S, rows)
//                                        separately (the one-row calls take them all at once)
//
// Input, little-endian: "SBKD", int32 type, rows, n (1..8 activation rows given), int64 k, uint64 weight
// row bytes, activation row bytes; then rows * weight row bytes, then n * activation row bytes.
// Output: int32 variant (the one that ran), dotprod, all_ok (every call took the case); then float32
// one[n][rows] (activation row j alone, for each j), then for m = 1..n: float32 batch_m[m][rows] (the
// first m rows in one call).  Refused calls leave NaN.
//
// The aarch64 variants need a CPU with dotprod: without it (hwcap asimddp clear) the driver says so and
// exits 3 before running a kernel, unless a variant is forced (which then dies of SIGILL: the check is real).
#include "../backend/omnidraft/llama/patch/sbk.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <vector>

#if defined(__aarch64__) && defined(__linux__)
#include <sys/auxv.h>
static int hwcap_bit(unsigned long type, unsigned long bit) { return (getauxval(type) & bit) != 0; }
static int cpu_dotprod() { return hwcap_bit(AT_HWCAP, 1UL << 20); }
static int cpu_i8mm() { return hwcap_bit(AT_HWCAP2, 1UL << 13); }
#else
static int cpu_dotprod() { return -1; }
static int cpu_i8mm() { return -1; }
#endif

template <class T> static bool get(T * v) { return fread(v, sizeof(T), 1, stdin) == 1; }

int main(int argc, char ** argv) {
    int variant = ggml_cpu_sbk_variant(), split = 0;
    const int dotprod = cpu_dotprod();
    bool forced = false;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--info") == 0) {
            printf("variant=%d dotprod=%d i8mm=%d\n", variant, dotprod, cpu_i8mm());
            return 0;
        }
        if (strcmp(argv[i], "--variant") == 0 && i + 1 < argc) {
            variant = atoi(argv[++i]);
            forced = true;
        } else if (strcmp(argv[i], "--split") == 0 && i + 1 < argc) {
            split = atoi(argv[++i]);
        }
    }
    if (variant >= SBK_NEON_DOTPROD && dotprod == 0 && !forced) {
        fprintf(stderr, "sbk_driver: variant %d (NEON) needs a CPU with dotprod; this one has none\n", variant);
        return 3;
    }
    char magic[4];
    int32_t type, rows, n;
    int64_t k;
    uint64_t wrb, arb;
    if (fread(magic, 1, 4, stdin) != 4 || memcmp(magic, "SBKD", 4) != 0 || !get(&type) || !get(&rows) || !get(&n) ||
        !get(&k) || !get(&wrb) || !get(&arb) || rows < 1 || n < 1 || n > SBK_MAX_ROWS) {
        fprintf(stderr, "sbk_driver: bad header\n");
        return 2;
    }
    std::vector<uint8_t> w(rows * wrb), act(n * arb);
    if (fread(w.data(), 1, w.size(), stdin) != w.size() || fread(act.data(), 1, act.size(), stdin) != act.size()) {
        fprintf(stderr, "sbk_driver: short input\n");
        return 2;
    }
    auto gemm = [&](int64_t r0, int64_t r1, const uint8_t * a, int m, float * dst) {
        return forced ? sbk_gemm_as(variant, type, k, w.data(), wrb, r0, r1, a, arb, m, dst, rows)
                      : sbk_gemm(type, k, w.data(), wrb, r0, r1, a, arb, m, dst, rows);
    };
    // one[j] = row j alone; then batch_m for m = 1..n
    std::vector<float> out((size_t) n * rows + (size_t) n * (n + 1) / 2 * rows, NAN);
    int32_t all_ok = 1;
    float * dst = out.data();
    for (int j = 0; j < n; j++, dst += rows) {
        all_ok &= gemm(0, rows, act.data() + j * arb, 1, dst);
    }
    for (int m = 1; m <= n; m++) {
        if (split > 0 && split < rows) {
            all_ok &= gemm(0, split, act.data(), m, dst) & gemm(split, rows, act.data(), m, dst);
        } else {
            all_ok &= gemm(0, rows, act.data(), m, dst);
        }
        dst += (size_t) m * rows;
    }
    const int32_t head[3] = {variant, dotprod, all_ok};
    fwrite(head, sizeof(head), 1, stdout);
    fwrite(out.data(), sizeof(float), out.size(), stdout);
    return 0;
}

// A command-line driver for sbq4.cpp compiled alone, for builds that Python cannot load (an aarch64 binary
// under qemu-aarch64 on an x86 host, tests/test_sbq4_arm.py).  Built with sbq4.cpp alone:
//
//   aarch64-linux-gnu-g++ -O2 -std=c++17 -march=armv8-a -static -DSBQ4_STANDALONE
//       tests/sbq4_driver.cpp backend/omnidraft/llama/patch/sbq4.cpp -o sbq4_driver
//
//   sbq4_driver --info               prints "variant=V dotprod=D i8mm=I" (D, I: the CPU's hwcaps, 1/0;
//                                    -1 off aarch64 Linux)
//   sbq4_driver [--variant V] < in   runs a case through sbq4_gemm, or through variant V (sbq4_gemm_as)
//
// Input, little-endian: "SBQ4", int32 layout (SBQ4_8X8 / 4X4 / 4X8), rows, n (1..8 activation rows
// given), int64 nblocks; then the repacked weights (rows * nblocks * 18 bytes in every layout), then
// n * nblocks * 32 float32 activations.
// Output: int32 variant (the one that ran), dotprod, i8mm, all_ok (every call took the case); then the
// quantized activations (n * nblocks sbq4_act, 40 bytes each); then float32 one[n][rows] (activation
// row j alone, for each j), then for m = 1..n: float32 batch_m[m][rows] (the first m rows in one call).
// Refused calls leave NaN.
#include "../backend/omnidraft/llama/patch/sbq4.h"

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

static_assert(sizeof(sbq4_act) == 40, "the test reads sbq4_act as 32 int8, int32 bias, float d");

template <class T> static bool get(T * v) { return fread(v, sizeof(T), 1, stdin) == 1; }

int main(int argc, char ** argv) {
    int variant = ggml_cpu_sbq4_variant();
    bool forced = false;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--info") == 0) {
            printf("variant=%d dotprod=%d i8mm=%d\n", variant, cpu_dotprod(), cpu_i8mm());
            return 0;
        }
        if (strcmp(argv[i], "--variant") == 0 && i + 1 < argc) {
            variant = atoi(argv[++i]);
            forced = true;
        }
    }
    char magic[4];
    int32_t layout, rows, n;
    int64_t nb;
    if (fread(magic, 1, 4, stdin) != 4 || memcmp(magic, "SBQ4", 4) != 0 || !get(&layout) || !get(&rows) ||
        !get(&n) || !get(&nb) || rows < 1 || nb < 1 || n < 1 || n > SBQ4_MAX_ROWS) {
        fprintf(stderr, "sbq4_driver: bad header\n");
        return 2;
    }
    std::vector<uint8_t> w((size_t) rows * nb * 18);
    std::vector<float> x((size_t) n * nb * 32);
    if (fread(w.data(), 1, w.size(), stdin) != w.size() || fread(x.data(), sizeof(float), x.size(), stdin) != x.size()) {
        fprintf(stderr, "sbq4_driver: short input\n");
        return 2;
    }
    std::vector<sbq4_act> act((size_t) n * nb);
    for (int j = 0; j < n; j++) {  // one row at a time, as the hook quantizes
        sbq4_quantize(x.data() + (size_t) j * nb * 32, act.data() + (size_t) j * nb, nb);
    }
    auto gemm = [&](const sbq4_act * a, int m, float * dst) {
        return forced ? sbq4_gemm_as(variant, layout, nb, w.data(), rows, a, m, dst, rows)
                      : sbq4_gemm(layout, nb, w.data(), rows, a, m, dst, rows);
    };
    std::vector<float> out((size_t) n * rows + (size_t) n * (n + 1) / 2 * rows, NAN);
    int32_t all_ok = 1;
    float * dst = out.data();
    for (int j = 0; j < n; j++, dst += rows) {
        all_ok &= gemm(act.data() + (size_t) j * nb, 1, dst);
    }
    for (int m = 1; m <= n; m++) {
        all_ok &= gemm(act.data(), m, dst);
        dst += (size_t) m * rows;
    }
    const int32_t head[4] = {variant, cpu_dotprod(), cpu_i8mm(), all_ok};
    fwrite(head, sizeof(head), 1, stdout);
    fwrite(act.data(), sizeof(sbq4_act), act.size(), stdout);
    fwrite(out.data(), sizeof(float), out.size(), stdout);
    return 0;
}

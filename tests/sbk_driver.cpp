// A command-line driver for sbk.cpp, for builds that Python cannot load (an aarch64 binary under
// qemu-aarch64 on an x86 host, tests/test_sbk_arm.py).  Built with sbk.cpp alone:
//
//   aarch64-linux-gnu-g++ -O2 -std=c++17 -march=armv8.2-a+dotprod -static -DSBK_STANDALONE
//       tests/sbk_driver.cpp backend/omnidraft/llama/patch/sbk.cpp -o sbk_driver
//
//   sbk_driver --info           prints "variant=V dotprod=D" (D: the CPU's hwcap, 1/0; -1 off aarch64)
//   sbk_driver [--force] < in   runs a case, writes the results to stdout
//
// Input, little-endian: "SBKD", int32 type, rows, n (1..8 activation rows given), int64 k, uint64 weight
// row bytes, activation row bytes; then rows * weight row bytes, then n * activation row bytes.
// Output: int32 variant, dotprod, all_ok (every sbk_gemm call took the case); then float32 one[n][rows]
// (activation row j alone, for each j), then for m = 1..n: float32 batch_m[m][rows] (the first m rows
// in one call).  Refused calls leave NaN.
//
// A variant-4 build needs a CPU with dotprod: without it (hwcap asimddp clear) the driver says so and
// exits 3 before running a kernel, unless --force (which then dies of SIGILL: the check is real).
#include "../backend/omnidraft/llama/patch/sbk.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include <vector>

#if defined(__aarch64__) && defined(__linux__)
#include <sys/auxv.h>
#ifndef HWCAP_ASIMDDP
#define HWCAP_ASIMDDP (1 << 20)
#endif
static int cpu_dotprod() { return (getauxval(AT_HWCAP) & HWCAP_ASIMDDP) != 0; }
#else
static int cpu_dotprod() { return -1; }
#endif

template <class T> static bool get(T * v) { return fread(v, sizeof(T), 1, stdin) == 1; }

int main(int argc, char ** argv) {
    const int variant = ggml_cpu_sbk_variant(), dotprod = cpu_dotprod();
    bool force = false;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--info") == 0) {
            printf("variant=%d dotprod=%d\n", variant, dotprod);
            return 0;
        }
        force = force || strcmp(argv[i], "--force") == 0;
    }
    if (variant == 4 && dotprod == 0 && !force) {
        fprintf(stderr, "sbk_driver: variant 4 (NEON dotprod) needs a CPU with dotprod; this one has none\n");
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
    // one[j] = row j alone; then batch_m for m = 1..n
    std::vector<float> out((size_t) n * rows + (size_t) n * (n + 1) / 2 * rows, NAN);
    int32_t all_ok = 1;
    float * dst = out.data();
    for (int j = 0; j < n; j++, dst += rows) {
        all_ok &= sbk_gemm(type, k, w.data(), wrb, 0, rows, act.data() + j * arb, arb, 1, dst, rows);
    }
    for (int m = 1; m <= n; m++) {
        all_ok &= sbk_gemm(type, k, w.data(), wrb, 0, rows, act.data(), arb, m, dst, rows);
        dst += (size_t) m * rows;
    }
    const int32_t head[3] = {variant, dotprod, all_ok};
    fwrite(head, sizeof(head), 1, stdout);
    fwrite(out.data(), sizeof(float), out.size(), stdout);
    return 0;
}

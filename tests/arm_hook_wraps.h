// The functions the small-batch hooks call, wrapped (the probes link with -Wl,--wrap=ggml_sbq4_mul_mat_as,
// -Wl,--wrap=ggml_sbk_mul_mat and -Wl,--wrap=ggml_sbk_fa_rows) to count the products the kernels took, the Q4_0
// layout of the last one sbq4 took, and the flash-attention chunks fa_rows.cpp took.  Shared by
// tests/arm_ggml_probe.cpp and tests/arm_llama_probe.cpp.
#pragma once

#include <stddef.h>
#include <stdint.h>

#include <atomic>

struct ggml_tensor;

static std::atomic<int> g_sbq4_calls{0}, g_sbk_calls{0}, g_layout{0}, g_fa_calls{0};

extern "C" {
struct ggml_compute_params;
int __real_ggml_sbq4_mul_mat_as(const ggml_compute_params * params, ggml_tensor * op, int layout);
void __real_ggml_sbk_mul_mat(const ggml_compute_params * params, ggml_tensor * op, const void * wdata,
                             size_t row_size);
void __real_ggml_sbk_fa_rows(const ggml_compute_params * params, ggml_tensor * dst, int64_t ir0, int64_t ir1);

int __wrap_ggml_sbq4_mul_mat_as(const ggml_compute_params * params, ggml_tensor * op, int layout) {
    const int took = __real_ggml_sbq4_mul_mat_as(params, op, layout);
    if (took) {
        g_sbq4_calls++;
        g_layout = layout;
    }
    return took;
}

void __wrap_ggml_sbk_mul_mat(const ggml_compute_params * params, ggml_tensor * op, const void * wdata,
                             size_t row_size) {
    g_sbk_calls++;
    __real_ggml_sbk_mul_mat(params, op, wdata, row_size);
}

void __wrap_ggml_sbk_fa_rows(const ggml_compute_params * params, ggml_tensor * dst, int64_t ir0, int64_t ir1) {
    g_fa_calls++;
    __real_ggml_sbk_fa_rows(params, dst, ir0, ir1);
}
}

// sbq4: omnidraft's small-batch Q4_0 matrix product for ggml's CPU backend (x86, AVX2 and up).
//
// One routine multiplies ggml's repacked Q4_0 weights (block_q4_0x8) by 1..8 activation rows,
// unpacking each weight block once and feeding every row from registers.  Decoding (1 row) and
// verifying drafts (2..8 rows) run the same instructions per output, so batched rows are
// bit-identical to one-row decoding.  See sbq4.cpp for the why and the layout.
#pragma once

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SBQ4_MAX_ROWS 8

// One quantized activation block: 32 int8 values, the Q4_0 weights' -8 offset folded in as
// bias = -4 * sum(qs) (added to two int32 lanes per weight row), and the fp16-rounded scale.
typedef struct {
    int8_t  qs[32];
    int32_t bias;
    float   d;
} sbq4_act;

// Which variant was compiled in: 0 none (not x86 or no AVX2), 1 AVX2, 2 AVX-VNNI (256-bit),
// 3 AVX-512 VNNI.  Exported so that tools can tell a patched build from an upstream one.
int ggml_cpu_sbq4_variant(void);

// Quantize nblocks blocks of 32 floats (the same rounding as ggml's quantize_row_q8_0).
void sbq4_quantize(const float * x, sbq4_act * y, int64_t nblocks);

// dst[j*dst_stride + r] = dot(weight row r, activation row j) for r in [0, nrows), j in [0, n):
// w holds nrows/8 groups of nblocks block_q4_0x8 each, act holds n rows of nblocks blocks.
void sbq4_gemm(int64_t nblocks, const void * w, int64_t nrows, const sbq4_act * act, int n,
               float * dst, size_t dst_stride);

// ---- the hook in repack.cpp (ggml builds only)
struct ggml_tensor;
struct ggml_compute_params;

// Whether op (a MUL_MAT over block_q4_0x8 weights) is a small batch this routine takes: at most
// SBQ4_MAX_ROWS contiguous f32 activation rows, a compiled-in variant, and OMNIDRAFT_SBQ4 not "0"
// (read at every call, so one process can compare both paths).
int ggml_sbq4_takes(const struct ggml_tensor * op);

// Work buffer bytes op needs if this routine takes it (0 if the shape never qualifies).
size_t ggml_sbq4_work_size(const struct ggml_tensor * op);

// Compute op on every thread of the pool: quantize the activations, barrier, then groups of 8
// weight rows handed out in chunks.  Returns 0 (and does nothing) if the work buffer is too small.
int ggml_sbq4_mul_mat(const struct ggml_compute_params * params, struct ggml_tensor * op);

#ifdef __cplusplus
}
#endif

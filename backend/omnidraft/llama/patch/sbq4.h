// sbq4: omnidraft's small-batch Q4_0 matrix product for ggml's CPU backend (x86 AVX2 and up; aarch64
// NEON dotprod / i8mm, chosen at run time from the CPU's hwcaps).
//
// One routine multiplies ggml's repacked Q4_0 weights (block_q4_0x8 on x86, block_q4_0x4 on aarch64) by
// 1..8 activation rows, unpacking each weight block once and feeding every row from registers.  Decoding
// (1 row) and verifying drafts (2..8 rows) run the same instructions per output, so batched rows are
// bit-identical to one-row decoding.  See sbq4.cpp for the why and the layouts.
#pragma once

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SBQ4_MAX_ROWS 8

// The variants: 1 AVX2, 2 AVX-VNNI (256-bit), 3 AVX-512 VNNI (x86, fixed at compile time); 4 NEON
// dotprod, 5 NEON dotprod + i8mm (aarch64, chosen at run time).
#define SBQ4_NEON_DOTPROD 4
#define SBQ4_NEON_I8MM 5

// The weight layouts, named as ggml's repack names them (rows interleaved x bytes per interleave):
// block_q4_0x8 with 8-byte interleave (what ggml repacks to on x86 with AVX2; the x86 variants' layout),
// block_q4_0x4 with 4-byte interleave (ggml's ARM builds with dotprod) and with 8-byte interleave (ARM
// builds with i8mm).  The aarch64 variants take both block_q4_0x4 layouts.
#define SBQ4_8X8 1
#define SBQ4_4X4 2
#define SBQ4_4X8 3

// One quantized activation block: 32 int8 values, the fp16-rounded scale, and (x86) the Q4_0 weights'
// -8 offset folded in as bias = -4 * sum(qs), added to two int32 lanes per weight row (0 on aarch64,
// whose kernels read the nibbles as signed values).
typedef struct {
    int8_t  qs[32];
    int32_t bias;
    float   d;
} sbq4_act;

// The variant products run through: on x86 the one compiled in (0 none: not x86 or no AVX2); on aarch64
// Linux/Android the one this CPU's hwcaps allow (sbq4_arm_variant, read once), 0 on a CPU without dotprod.
// Exported so that tools can tell a patched build from an upstream one.
int ggml_cpu_sbq4_variant(void);

// The aarch64 variant for a CPU with these Linux hwcaps (getauxval(AT_HWCAP), getauxval(AT_HWCAP2)):
// SBQ4_NEON_I8MM with HWCAP_ASIMDDP and HWCAP2_I8MM, SBQ4_NEON_DOTPROD with HWCAP_ASIMDDP alone, else 0.
int sbq4_arm_variant(uint64_t hwcap, uint64_t hwcap2);

// Quantize nblocks blocks of 32 floats (the same rounding as ggml's quantize_row_q8_0).
void sbq4_quantize(const float * x, sbq4_act * y, int64_t nblocks);

// dst[j*dst_stride + r] = dot(weight row r, activation row j) for r in [0, nrows), j in [0, n):
// w holds nrows/8 (SBQ4_8X8) or nrows/4 groups of nblocks repacked blocks each, in the given layout;
// act holds n rows of nblocks blocks.  Runs ggml_cpu_sbq4_variant(); returns 0 (dst untouched) where
// that variant does not take the layout, n or nrows.
int sbq4_gemm(int layout, int64_t nblocks, const void * w, int64_t nrows, const sbq4_act * act, int n,
              float * dst, size_t dst_stride);

// The same through a given variant (tests: to compare the variants on a CPU that has both, or to show
// that one really needs its feature).  0 for a variant this build does not carry.
int sbq4_gemm_as(int variant, int layout, int64_t nblocks, const void * w, int64_t nrows,
                 const sbq4_act * act, int n, float * dst, size_t dst_stride);

// ---- the hooks in repack.cpp: x86 builds' block_q4_0x8 weights (sbq4-hook.patch), aarch64 builds'
// block_q4_0x4 ones (sbq4-arm-hook.patch, the _as functions with the layout ggml repacked to)
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

// The same for weights in a given layout (SBQ4_8X8 on x86; SBQ4_4X4 or SBQ4_4X8 on aarch64, as ggml's
// repack chose them): 0 / nothing taken for a layout this build's variants do not take.  The three
// above are these with SBQ4_8X8.
int ggml_sbq4_takes_as(const struct ggml_tensor * op, int layout);
size_t ggml_sbq4_work_size_as(const struct ggml_tensor * op, int layout);
int ggml_sbq4_mul_mat_as(const struct ggml_compute_params * params, struct ggml_tensor * op, int layout);

#ifdef __cplusplus
}
#endif

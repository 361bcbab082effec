// sbk: omnidraft's small-batch products for the weight formats users download: Q4_K and Q6_K (Q4_K_M
// files), Q5_0 and Q8_0 (which small models' Q4_K_M files add), and Q8_0 files; in ggml's plain layout
// (no repacking); x86 AVX2 and up, aarch64 NEON with dotprod and with i8mm, the latter chosen at run time
// (checked under qemu only, also inside a cross-built ggml; setup builds it into x86 and aarch64
// Linux/Android llama.cpp).
//
// One routine multiplies a weight matrix by 1..8 activation rows that ggml has already quantized
// (Q8_K for the K-quants, Q8_0 for Q8_0 and Q5_0), unpacking each weight block once and feeding every row from
// registers.  Decoding (1 row) and verifying drafts (2..8 rows) run the same instructions per output,
// so batched rows are bit-identical to one-row decoding.  See sbk.cpp for the why and the layouts.
#pragma once

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SBK_MAX_ROWS 8

// The weight formats this routine takes (ggml_type values, repeated so that sbk.cpp compiles alone).
#define SBK_TYPE_Q5_0 6
#define SBK_TYPE_Q8_0 8
#define SBK_TYPE_Q4_K 12
#define SBK_TYPE_Q6_K 14

// The variant products run through: 0 none (ggml's own kernels run), 1 x86 AVX2 (+FMA, F16C), 2 AVX-VNNI
// (256-bit), 3 AVX-512 VNNI (x86: chosen at compile time from the target's features); 4 aarch64 NEON with
// dotprod, 5 NEON with dotprod and i8mm (sbq4.h's numbers).  aarch64 needs dotprod at compile time
// (__ARM_FEATURE_DOTPROD: -march=armv8.2-a+dotprod or later; an ARMv8.0 build gets 0); such a build also
// carries the i8mm variant (GCC, through function target attributes; clang only with i8mm in its flags)
// and runs it where Linux's hwcaps have HWCAP2_I8MM (read once per process).  Exported so that tools can
// tell a patched build from an upstream one.
#define SBK_NEON_DOTPROD 4
#define SBK_NEON_I8MM 5
int ggml_cpu_sbk_variant(void);

// dst[j*dst_stride + r] = dot(weight row r, activation row j) for r in [r0, r1), j in [0, n):
// weight row r starts at w + r*w_row_bytes, activation row j at act + j*act_row_bytes (ggml's
// vec_dot_type blocks: block_q8_K for Q4_K/Q6_K, block_q8_0 for Q8_0/Q5_0); k values per row.
// Returns 0 for a type it does not take.
int sbk_gemm(int type, int64_t k, const void * w, size_t w_row_bytes, int64_t r0, int64_t r1,
             const void * act, size_t act_row_bytes, int n, float * dst, size_t dst_stride);

// The same through a given variant (tests: to compare the aarch64 variants on a CPU that has both, or to
// show that one really needs its feature).  0 for a variant this build does not carry.
int sbk_gemm_as(int variant, int type, int64_t k, const void * w, size_t w_row_bytes, int64_t r0, int64_t r1,
                const void * act, size_t act_row_bytes, int n, float * dst, size_t dst_stride);

// The same product over ggml's repacked Q4_K (block_q4_Kx8: 8 weight rows interleaved 8 bytes at a time,
// what ggml repacks Q4_K to on x86 with AVX2; sbkx8.cpp): weight rows [r0, r1) (multiples of 8), group g of
// 8 rows at w + g * (k/256) * 1152 bytes; activation rows as above (block_q8_K).  Returns 0 where it does
// not take the shape (or the build has no AVX2).
int sbk_q4kx8_gemm(int64_t k, const void * w, int64_t r0, int64_t r1, const void * act, size_t act_row_bytes,
                   int n, float * dst, size_t dst_stride);

// The same over ggml's repacked Q6_K (block_q6_Kx8 with 8-byte interleave, make_block_q6_Kx8; sbq6x8.cpp),
// groups of 8 rows at w + g * (k/256) * 1680 bytes, activations as above.  x86 ggml has no kernel for this
// layout: the fast mode repacks Q6_K only where sbk_q6kx8_compiled() (the variant, numbered as
// ggml_cpu_sbk_variant's x86 ones) is not 0.
int sbk_q6kx8_gemm(int64_t k, const void * w, int64_t r0, int64_t r1, const void * act, size_t act_row_bytes,
                   int n, float * dst, size_t dst_stride);
int sbk_q6kx8_compiled(void);

// ggml's quantize_row_q8_K_ref with AVX2 (q8k.cpp; x86 ggml calls the scalar reference): the same bytes from
// k floats (a multiple of 256) into k / 256 block_q8_K.  Returns 0, writing nothing, where the build has no
// AVX2, or OMNIDRAFT_SBQ4 or OMNIDRAFT_Q8K is "0"; arch/x86/quants.c's quantize_row_q8_K then runs the reference.
int sbk_quantize_q8_K(const float * x, void * y, int64_t k);

// ---- the hook in ggml-cpu.c (ggml builds only)
struct ggml_tensor;
struct ggml_compute_params;

// Whether op (a MUL_MAT over plain Q4_K/Q6_K/Q8_0/Q5_0 weights) is a small batch this routine takes: at
// most SBK_MAX_ROWS contiguous f32 activation rows, a compiled-in variant, and OMNIDRAFT_SBQ4 not "0"
// (read at every call, so one process can compare both paths).
int ggml_sbk_takes(const struct ggml_tensor * op);

// Compute op on every thread of the pool from the activations ggml quantized into wdata (row_size
// bytes a row), after ggml's barrier: rows of weights handed out in chunks (ggml's chunk counter
// already stands at nth).
void ggml_sbk_mul_mat(const struct ggml_compute_params * params, struct ggml_tensor * op,
                      const void * wdata, size_t row_size);

// ---- the hook in ops.cpp (fa-hook.patch): flash attention
// Whether a single query row must take the path rows of a batch take (no split of the KV cache over threads
// from 512 cells up, which sums the softmax in another order), so that flash attention's rows are
// bit-identical to decoding for batches of up to 63 (ggml's tiled path starts at 64): 1 unless OMNIDRAFT_SBQ4
// is "0" (read at every call).
int ggml_sbk_fa_rows_invariant(void);
// fa_rows.cpp: whether dst (a FLASH_ATTN_EXT) is one ggml_sbk_fa_rows computes (f32 Q, f32 or f16 K and V of one
// type, no sinks) and rows must be invariant; then the work items [ir0, ir1) of ggml's chunk, each row's arithmetic
// independent of the batch (not one_chunk's bits: f32 sums in another order), the KV cache read in blocks shared by
// the items of a KV head.
int ggml_sbk_fa_rows_takes(const struct ggml_tensor * dst);
void ggml_sbk_fa_rows(const struct ggml_compute_params * params, struct ggml_tensor * dst, int64_t ir0, int64_t ir1);

// ---- the hook in repack.cpp (block_q4_Kx8 and block_q6_Kx8 weights, the fast mode's Q4_K and Q6_K)
// Whether op is a batch sbkx8/sbq6x8 take (Q4_K: 1..8 rows, as ggml_sbk_takes says for the plain layout,
// unless OMNIDRAFT_SBQ4=0; Q6_K: every MUL_MAT on a matrix ggml_sbq6x8_repacks accepted, any number of rows,
// 8 at a time, whatever OMNIDRAFT_SBQ4 says by then); the work buffer it needs (the activations as block_q8_K
// rows); and the product on every thread of the pool: quantize, barrier, groups of 8 weight rows in chunks.
// ggml_sbkx8_mul_mat returns 0 (and does nothing) if the work buffer is too small.  ggml_sbq6x8_repacks:
// whether ggml should repack Q6_K tensor t to block_q6_Kx8 on x86, asked as t loads (the kernel is compiled
// in and OMNIDRAFT_SBQ4 is not "0"); sbq6x8-hook.patch keeps the answer with the tensor.
int ggml_sbkx8_takes(const struct ggml_tensor * op);
size_t ggml_sbkx8_work_size(const struct ggml_tensor * op);
int ggml_sbkx8_mul_mat(const struct ggml_compute_params * params, struct ggml_tensor * op);
int ggml_sbq6x8_repacks(const struct ggml_tensor * t);

#ifdef __cplusplus
}
#endif

// Attention alone, as a pass of a long context runs it: ggml_flash_attn_ext over an f16 KV cache laid out as
// llama.cpp's (a cell's heads side by side), Qwen2.5-1.5B's shapes by default (12 query heads, 2 KV heads, head
// size 128; the 0.5B: 14, 2, 64), one op per layer, each layer its own cache, so that a pass reads the cache from
// DRAM as the model's does (LAYERS 1: the same cache again and again, from the CPU's caches).  Prints the time of a
// pass's attention and a checksum of every layer's output: a change that should keep the arithmetic must keep it.
//
// Build against setup's llama.cpp (its headers, and the libraries in the venv; /tmp may forbid running files):
//   V=.venv/src/llama_cpp_python-0.3.36/vendor/llama.cpp/ggml L=.venv/lib/python3.11/site-packages/llama_cpp/lib
//   gcc -O2 -o build/fa_attention scripts/lab/fa_attention.c -I$V/include -L$L -lggml-base -lggml-cpu -lm -Wl,-rpath,$L
//   build/fa_attention CELLS ROWS REPS THREADS [LAYERS [HEAD_SIZE Q_HEADS KV_HEADS]]      e.g. 2048 5 40 2
// OMNIDRAFT_FA_ROWS=0 times ggml's one_chunk instead of fa_rows.cpp; LD_LIBRARY_PATH=DIR another build's
// libggml-cpu.so.0.
#include "ggml.h"
#include "ggml-cpu.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

enum { MAX_LAYERS = 64 };
static int D = 128, HQ = 12, HKV = 2;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static float uniform(void) { return rand() / (float) RAND_MAX - 0.5f; }

// One layer's cache: n_kv cells of HKV heads, viewed per head as llama.cpp's graph views it.
static struct ggml_tensor * cache(struct ggml_context * ctx, int n_kv) {
    struct ggml_tensor * raw = ggml_new_tensor_2d(ctx, GGML_TYPE_F16, D * HKV, n_kv);
    ggml_fp16_t * d = raw->data;
    for (int i = 0; i < D * HKV * n_kv; i++) {
        d[i] = ggml_fp32_to_fp16(uniform());
    }
    return ggml_view_3d(ctx, raw, D, n_kv, HKV, D * HKV * sizeof(ggml_fp16_t), D * sizeof(ggml_fp16_t), 0);
}

int main(int argc, char ** argv) {
    if (argc < 5) {
        fprintf(stderr, "usage: %s CELLS ROWS REPS THREADS [LAYERS (28) [HEAD_SIZE Q_HEADS KV_HEADS]]\n", argv[0]);
        return 2;
    }
    const int n_kv = atoi(argv[1]), rows = atoi(argv[2]), reps = atoi(argv[3]), nth = atoi(argv[4]);
    const int layers = argc > 5 ? atoi(argv[5]) : 28;
    if (argc > 8) {
        D = atoi(argv[6]), HQ = atoi(argv[7]), HKV = atoi(argv[8]);
    }
    if (n_kv < rows || rows < 1 || reps < 1 || nth < 1 || layers < 1 || layers > MAX_LAYERS || D < 16 || D % 16 ||
        HKV < 1 || HQ % HKV) {
        fprintf(stderr, "need CELLS >= ROWS >= 1, REPS and THREADS >= 1, 1 <= LAYERS <= %d, HEAD_SIZE a multiple of "
                "16, Q_HEADS a multiple of KV_HEADS\n", MAX_LAYERS);
        return 2;
    }
    // the caches, queries, outputs and mask, then the graph and the work buffer (a one-row pass plans a large one)
    const size_t bytes = (size_t) layers * 2 * D * HKV * n_kv * sizeof(ggml_fp16_t) + (size_t) (layers + 1) * D *
                         HQ * rows * sizeof(float) + (size_t) n_kv * rows * sizeof(ggml_fp16_t) + (256u << 20);
    struct ggml_init_params ip = {bytes, NULL, false};
    struct ggml_context * ctx = ggml_init(ip);
    srand(1);
    struct ggml_tensor * q = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, D, rows, HQ);
    for (int i = 0; i < D * rows * HQ; i++) {
        ((float *) q->data)[i] = uniform();
    }
    // the last ROWS cells are the pass's own tokens: row r sees the cells before it and itself
    struct ggml_tensor * mask = ggml_new_tensor_2d(ctx, GGML_TYPE_F16, n_kv, rows);
    for (int r = 0; r < rows; r++) {
        for (int c = 0; c < n_kv; c++) {
            ((ggml_fp16_t *) mask->data)[r * n_kv + c] = ggml_fp32_to_fp16(c <= n_kv - rows + r ? 0.0f : -INFINITY);
        }
    }
    struct ggml_cgraph * gf = ggml_new_graph(ctx);
    struct ggml_tensor * out[MAX_LAYERS];
    for (int l = 0; l < layers; l++) {
        struct ggml_tensor * k = cache(ctx, n_kv), * v = cache(ctx, n_kv);
        out[l] = ggml_flash_attn_ext(ctx, q, k, v, mask, 1.0f / sqrtf(D), 0.0f, 0.0f);
        ggml_build_forward_expand(gf, out[l]);
    }
    ggml_graph_compute_with_ctx(ctx, gf, nth);  // warm-up
    const double t0 = now();
    for (int i = 0; i < reps; i++) {
        ggml_graph_compute_with_ctx(ctx, gf, nth);
    }
    const double dt = (now() - t0) / reps;
    double sum = 0;
    for (int l = 0; l < layers; l++) {
        for (int i = 0; i < D * rows * HQ; i++) {
            sum += ((float *) out[l]->data)[i] * (1 + (i + l) % 7);
        }
    }
    printf("head size %d, heads %d / %d, cells %d, rows %d, threads %d: %.1f us a layer, %.2f ms for %d layers; "
           "checksum %.9g\n", D, HQ, HKV, n_kv, rows, nth, dt * 1e6 / layers, dt * 1e3, layers, sum);
    ggml_free(ctx);
    return 0;
}

// ggml's real matrix product on aarch64, with the small-batch hooks of backend/omnidraft/llama/patch/:
// cross-built by tests/test_arm_ggml.py against the patched ggml and ggml-cpu and run under qemu-aarch64.
//
// For each weight format (Q4_0 in ggml's CPU_REPACK buffer, so repacked to block_q4_0x4; plain Q4_K, Q6_K,
// Q8_0, Q5_0) and 1 and 3 threads, through ggml_mul_mat on the CPU backend:
// - every batch of n = 1..8 rows bit-identical, row by row, to each row alone (OMNIDRAFT_SBQ4=1);
// - one-row results the same with 1 and 3 threads;
// - within 1e-4 (relative to the largest output) of ggml's own ARM kernels (OMNIDRAFT_SBQ4=0);
// - the hooks really ran: the test links with -Wl,--wrap on the two functions the hooks call
//   (ggml_sbq4_mul_mat_as from repack.cpp, ggml_sbk_mul_mat from ggml-cpu.c), and the wrappers below count
//   the products they took (and the Q4_0 layout): some with OMNIDRAFT_SBQ4=1, none with =0.  On ARM the
//   outputs cannot tell: ggml's own dotprod kernels do the same float operations in the same order as our
//   dotprod variants, so they are often bit-equal to ours (less often to the i8mm ones, which sum otherwise).
//   Which variant ran is the header's (sbq4_variant, sbk_variant: the one each hook's products go through).
// OMNIDRAFT_PROBE_DRIFT=1 moves one value of one batch by one ulp: the test's proof that the check can fail.
// Prints one line per case and "ok" / "FAILED n"; exits non-zero on any failure.
#include "ggml.h"
#include "ggml-alloc.h"
#include "ggml-backend.h"
#include "ggml-cpu.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <atomic>
#include <random>
#include <vector>

extern "C" int ggml_cpu_sbq4_variant(void);
extern "C" int ggml_cpu_sbk_variant(void);

#include "arm_hook_wraps.h"  // counts the products the kernels took

namespace {

constexpr int ROWS = 96, N = 8;

struct Weights {
    ggml_context * ctx;
    ggml_backend_buffer_t buf;
    ggml_tensor * w;
};

Weights make_weights(ggml_type t, int k, const std::vector<float> & wf, ggml_backend_buffer_type_t buft) {
    ggml_init_params ip = {ggml_tensor_overhead() * 2, NULL, true};
    Weights W;
    W.ctx = ggml_init(ip);
    W.w = ggml_new_tensor_2d(W.ctx, t, k, ROWS);
    W.buf = ggml_backend_alloc_ctx_tensors_from_buft(W.ctx, buft);
    std::vector<uint8_t> q(ggml_row_size(t, k) * ROWS);
    ggml_quantize_chunk(t, wf.data(), q.data(), 0, ROWS, k, NULL);
    ggml_backend_tensor_set(W.w, q.data(), 0, q.size());  // the CPU_REPACK buffer repacks here
    return W;
}

// y = w x for n activation rows (x: n rows of k floats), through one graph on the CPU backend
std::vector<float> mm(ggml_backend_t be, const Weights & W, int k, int n, const float * x) {
    ggml_init_params ip = {ggml_tensor_overhead() * 4 + ggml_graph_overhead(), NULL, true};
    ggml_context * ctx = ggml_init(ip);
    ggml_tensor * xt = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, k, n);
    ggml_tensor * y = ggml_mul_mat(ctx, W.w, xt);
    ggml_cgraph * g = ggml_new_graph(ctx);
    ggml_build_forward_expand(g, y);
    ggml_backend_buffer_t buf = ggml_backend_alloc_ctx_tensors(ctx, be);
    ggml_backend_tensor_set(xt, x, 0, sizeof(float) * k * n);
    if (ggml_backend_graph_compute(be, g) != GGML_STATUS_SUCCESS) {
        fprintf(stderr, "graph compute failed\n");
        exit(2);
    }
    std::vector<float> out((size_t) ROWS * n);
    ggml_backend_tensor_get(y, out.data(), 0, out.size() * sizeof(float));
    ggml_backend_buffer_free(buf);
    ggml_free(ctx);
    return out;
}

ggml_backend_buffer_type_t repack_buft(ggml_backend_t be) {
    ggml_backend_dev_t dev = ggml_backend_get_device(be);
    ggml_backend_reg_t reg = ggml_backend_dev_backend_reg(dev);
    auto get = (ggml_backend_dev_get_extra_bufts_t) ggml_backend_reg_get_proc_address(reg, "ggml_backend_dev_get_extra_bufts");
    for (ggml_backend_buffer_type_t * p = get ? get(dev) : NULL; p && *p; p++) {
        if (strcmp(ggml_backend_buft_name(*p), "CPU_REPACK") == 0) {
            return *p;
        }
    }
    return NULL;
}

}  // namespace

int main() {
    const bool drift = getenv("OMNIDRAFT_PROBE_DRIFT") && strcmp(getenv("OMNIDRAFT_PROBE_DRIFT"), "1") == 0;
    ggml_backend_t be = ggml_backend_cpu_init();
    ggml_backend_buffer_type_t repack = repack_buft(be);
    printf("sbq4_variant=%d sbk_variant=%d ggml_dotprod=%d ggml_i8mm=%d repack=%s\n", ggml_cpu_sbq4_variant(),
           ggml_cpu_sbk_variant(), ggml_cpu_has_dotprod(), ggml_cpu_has_matmul_int8(), repack ? "yes" : "no");
    if (repack == NULL) {
        printf("FAILED: no CPU_REPACK buffer type\n");
        return 1;
    }
    const struct { ggml_type t; int k; const char * name; bool repacked; } cases[] = {
        {GGML_TYPE_Q4_0, 1536, "q4_0", true}, {GGML_TYPE_Q4_K, 1536, "q4_K", false},
        {GGML_TYPE_Q6_K, 1536, "q6_K", false}, {GGML_TYPE_Q8_0, 1536, "q8_0", false},
        {GGML_TYPE_Q5_0, 896, "q5_0", false}};
    std::mt19937 rng(1);
    std::normal_distribution<float> nd(0.f, 1.f);
    int bad = 0;
    bool drifted = false;
    for (const auto & c : cases) {
        std::vector<float> wf((size_t) c.k * ROWS), xf((size_t) c.k * N);
        for (auto & v : wf) v = 0.05f * nd(rng);
        for (auto & v : xf) v = nd(rng);
        Weights W = make_weights(c.t, c.k, wf, c.repacked ? repack : ggml_backend_cpu_buffer_type());
        const bool in_repack = W.w->extra != NULL;
        if (c.repacked && !in_repack) {
            printf("%s: not repacked (no repack layout for this CPU)\n", c.name);
            bad++;
        }
        std::vector<float> first_single;
        for (int threads : {1, 3}) {
            ggml_backend_cpu_set_n_threads(be, threads);
            setenv("OMNIDRAFT_SBQ4", "1", 1);
            g_sbq4_calls = 0, g_sbk_calls = 0, g_layout = 0;
            std::vector<std::vector<float>> single(N);
            for (int j = 0; j < N; j++) {
                single[j] = mm(be, W, c.k, 1, xf.data() + (size_t) j * c.k);
            }
            int identical = 1;
            for (int n = 1; n <= N; n++) {
                std::vector<float> b = mm(be, W, c.k, n, xf.data());
                if (drift && !drifted && n == N) {
                    b[(size_t) 3 * ROWS + 5] = nextafterf(b[(size_t) 3 * ROWS + 5], INFINITY);
                    drifted = true;
                }
                for (int j = 0; j < n; j++) {
                    identical &= memcmp(&b[(size_t) j * ROWS], single[j].data(), ROWS * sizeof(float)) == 0;
                }
            }
            std::vector<float> flat;
            for (auto & s : single) flat.insert(flat.end(), s.begin(), s.end());
            const bool threads_same = first_single.empty() || first_single == flat;
            if (first_single.empty()) first_single = flat;

            const int ours_calls = c.repacked ? g_sbq4_calls.load() : g_sbk_calls.load(), layout = g_layout;
            setenv("OMNIDRAFT_SBQ4", "0", 1);
            g_sbq4_calls = 0, g_sbk_calls = 0;
            std::vector<float> theirs = mm(be, W, c.k, N, xf.data());
            double maxd = 0, maxv = 0;
            bool same_as_theirs = true;
            for (int j = 0; j < N; j++) {
                for (int r = 0; r < ROWS; r++) {
                    const double a = single[j][r], t = theirs[(size_t) j * ROWS + r];
                    maxd = fmax(maxd, fabs(a - t));
                    maxv = fmax(maxv, fabs(t));
                    same_as_theirs &= a == t;
                }
            }
            int theirs_identical = 1;  // ggml's own kernels: its batch of 8 against its own one-row results
            for (int j = 0; j < N; j++) {
                std::vector<float> t1 = mm(be, W, c.k, 1, xf.data() + (size_t) j * c.k);
                theirs_identical &= memcmp(&theirs[(size_t) j * ROWS], t1.data(), ROWS * sizeof(float)) == 0;
            }
            const int theirs_calls = g_sbq4_calls + g_sbk_calls;
            const bool hooked = ours_calls > 0 && theirs_calls == 0;
            const bool ok = identical && threads_same && maxd / maxv <= 1e-4 && hooked;
            printf("%s k=%d threads=%d repacked=%s: hook took %d products (layout %d), 0 expected with SBQ4=0: %d; "
                   "batches 1..8 identical to one row: %s; same with 1 and 3 threads: %s; max |ours - ggml| / "
                   "max |ggml| = %.2e%s; ggml's own batch of 8 identical to its one row: %s\n",
                   c.name, c.k, threads, in_repack ? "yes" : "no", ours_calls, layout, theirs_calls,
                   identical ? "yes" : "NO", threads_same ? "yes" : "NO", maxd / maxv,
                   same_as_theirs ? " (bit-equal)" : "", theirs_identical ? "yes" : "no");
            bad += !ok;
        }
        ggml_backend_buffer_free(W.buf);
        ggml_free(W.ctx);
    }
    ggml_backend_free(be);
    printf(bad ? "FAILED %d\n" : "ok\n", bad);
    return bad != 0;
}

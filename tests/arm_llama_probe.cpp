// libllama on aarch64 with the small-batch hooks, decoding a tiny GGUF: cross-built by
// tests/test_arm_llama.py and run under qemu-aarch64.
//
//   arm_llama_probe MODEL THREADS
//
// For both weight modes, repacked (use_extra_bufts: the fast mode, Q4_0 in block_q4_0x4 through sbq4.cpp)
// and plain (the exact mode: Q8_0 / Q4_K through sbk.cpp), and both attention paths: ggml's plain attention over
// an f32 KV cache, and flash attention over an f16 one (the product's default: a few rows' attention goes
// through fa_rows.cpp, whose chunks are counted):
// - greedy: the prompt, then 8 tokens one at a time, with OMNIDRAFT_SBQ4=1 and =0: the same tokens (with flash
//   attention: the same as plain attention's over the f32 cache; ggml's own, with =0, reported);
// - rows: after the prompt, the 8 greedy tokens decoded one at a time, then batches of their first n = 2..8
//   over the same positions (logits for every row): up to which n every batch row's logits are
//   bit-identical to one-row decoding (OMNIDRAFT_SBQ4=1), reported for the test to judge: a format and mode
//   the kernels do not take (ggml's repacked Q8_0 on ARM) stops at n = 3.
// Exits non-zero if the greedy tokens differ or a kernel ran with OMNIDRAFT_SBQ4=0.
// OMNIDRAFT_PROBE_DRIFT=1 moves one batched logit by one ulp: the test's proof that the check can fail.
#include "llama.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <atomic>
#include <vector>

#include "arm_hook_wraps.h"  // counts the products the kernels took

namespace {

constexpr int NEW = 8, PROMPT = 72;

llama_context * make_ctx(llama_model * model, int threads, bool fa) {
    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = 256;
    cp.n_batch = 256;  // the prompt in one call, read 64 tokens a pass
    cp.n_ubatch = 64;
    cp.n_threads = cp.n_threads_batch = threads;
    cp.type_k = cp.type_v = fa ? GGML_TYPE_F16 : GGML_TYPE_F32;
    cp.flash_attn_type = fa ? LLAMA_FLASH_ATTN_TYPE_ENABLED : LLAMA_FLASH_ATTN_TYPE_DISABLED;
    cp.no_perf = true;
    return llama_init_from_model(model, cp);
}

// decode toks at positions pos0.., logits for every row; returns them (rows x n_vocab)
std::vector<float> decode(llama_context * ctx, const std::vector<llama_token> & toks, int pos0, int n_vocab) {
    llama_batch b = llama_batch_init((int) toks.size(), 0, 1);
    for (size_t i = 0; i < toks.size(); i++) {
        b.token[i] = toks[i];
        b.pos[i] = pos0 + (int) i;
        b.n_seq_id[i] = 1;
        b.seq_id[i][0] = 0;
        b.logits[i] = 1;
    }
    b.n_tokens = (int) toks.size();
    if (llama_decode(ctx, b) != 0) {
        fprintf(stderr, "llama_decode failed\n");
        exit(2);
    }
    std::vector<float> out;
    for (size_t i = 0; i < toks.size(); i++) {
        const float * l = llama_get_logits_ith(ctx, (int) i);
        out.insert(out.end(), l, l + n_vocab);
    }
    llama_batch_free(b);
    return out;
}

llama_token argmax(const float * l, int n) {
    int best = 0;
    for (int i = 1; i < n; i++) {
        if (l[i] > l[best]) best = i;
    }
    return best;
}

std::vector<llama_token> greedy(llama_model * model, int threads, bool fa, const std::vector<llama_token> & prompt,
                                int n_vocab) {
    llama_context * ctx = make_ctx(model, threads, fa);
    std::vector<float> l = decode(ctx, prompt, 0, n_vocab);
    std::vector<llama_token> out = {argmax(&l[l.size() - n_vocab], n_vocab)};
    while ((int) out.size() < NEW) {
        l = decode(ctx, {out.back()}, (int) (prompt.size() + out.size() - 1), n_vocab);
        out.push_back(argmax(l.data(), n_vocab));
    }
    llama_free(ctx);
    return out;
}

}  // namespace

int main(int argc, char ** argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s MODEL THREADS\n", argv[0]);
        return 2;
    }
    const int threads = atoi(argv[2]);
    const bool drift = getenv("OMNIDRAFT_PROBE_DRIFT") && strcmp(getenv("OMNIDRAFT_PROBE_DRIFT"), "1") == 0;
    llama_log_set([](ggml_log_level, const char *, void *) {}, NULL);
    llama_backend_init();
    int bad = 0;
    std::vector<llama_token> plain[2];  // plain attention's greedy tokens, by weight mode (the f32 reference)
    for (int mode = 0; mode < 4; mode++) {
        const int repacked = mode % 2 == 0, fa = mode >= 2;
        llama_model_params mp = llama_model_default_params();
        mp.use_extra_bufts = repacked;
        llama_model * model = llama_model_load_from_file(argv[1], mp);
        if (model == NULL) {
            printf("FAILED: cannot load %s\n", argv[1]);
            return 1;
        }
        const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
        std::vector<llama_token> prompt;
        // byte tokens; 72 of them, so that attention spans several of fa_rows' 16-cell blocks and ends in a
        // partial one
        for (int i = 0; i < PROMPT; i++) prompt.push_back(3 + 'a' + (i * 7) % 26);

        setenv("OMNIDRAFT_SBQ4", "1", 1);
        g_sbq4_calls = 0, g_sbk_calls = 0;
        const std::vector<llama_token> ours = greedy(model, threads, fa, prompt, n_vocab);
        const int sbq4_calls = g_sbq4_calls, sbk_calls = g_sbk_calls;
        setenv("OMNIDRAFT_SBQ4", "0", 1);
        const std::vector<llama_token> theirs = greedy(model, threads, fa, prompt, n_vocab);
        const int off_calls = g_sbq4_calls + g_sbk_calls - sbq4_calls - sbk_calls;
        setenv("OMNIDRAFT_SBQ4", "1", 1);

        // rows: one at a time, then batches of n over the same positions
        llama_context * ctx = make_ctx(model, threads, fa);
        decode(ctx, prompt, 0, n_vocab);
        g_fa_calls = 0;
        const int p0 = (int) prompt.size();
        std::vector<float> single;
        for (int i = 0; i < NEW; i++) {
            std::vector<float> l = decode(ctx, {ours[i]}, p0 + i, n_vocab);
            single.insert(single.end(), l.begin(), l.end());
        }
        int identical_up_to = 1;
        for (int n = 2; n <= NEW; n++) {
            llama_memory_seq_rm(llama_get_memory(ctx), 0, p0, -1);
            std::vector<float> b = decode(ctx, std::vector<llama_token>(ours.begin(), ours.begin() + n), p0, n_vocab);
            if (drift && n == 4) {
                b[(size_t) 2 * n_vocab + 7] = nextafterf(b[(size_t) 2 * n_vocab + 7], INFINITY);
            }
            if (memcmp(b.data(), single.data(), b.size() * sizeof(float)) != 0) {
                break;
            }
            identical_up_to = n;
        }
        const int fa_calls = g_fa_calls;
        llama_free(ctx);

        printf("repacked=%d fa=%d threads=%d: greedy tokens", repacked, fa, threads);
        for (llama_token t : ours) printf(" %d", t);
        const bool same = ours == theirs;
        // flash attention's tokens must be plain attention's over the f32 cache (fa_rows sums in f32).  Against
        // ggml's own flash attention (OMNIDRAFT_SBQ4=0) they are only reported: its one_chunk sums V in f16 (the
        // likely cause), and on the tiny Q8_0 model its 3rd greedy token differed
        if (!fa) {
            plain[repacked] = ours;
        }
        const bool as_plain = ours == plain[repacked];
        printf("; the same with OMNIDRAFT_SBQ4=0: %s", same ? "yes" : "NO");
        if (fa) {
            printf(" (");
            for (size_t i = 0; i < theirs.size(); i++) printf(i ? " %d" : "%d", theirs[i]);
            printf("); the same as plain attention over an f32 cache: %s", as_plain ? "yes" : "NO");
        }
        printf("; batch rows bit-identical to one-row decoding up to n=%d; products taken by sbq4 %d, sbk %d "
               "(with OMNIDRAFT_SBQ4=0: %d); attention chunks taken by fa_rows %d\n",
               identical_up_to, sbq4_calls, sbk_calls, off_calls, fa_calls);
        // how far rows are bit-identical: the test judges, per format and mode
        bad += (fa ? !as_plain : !same) || off_calls != 0;
        llama_model_free(model);
    }
    llama_backend_free();
    printf(bad ? "FAILED %d\n" : "ok\n", bad);
    return bad != 0;
}

// Greedy decoding of a GGUF file with llama.cpp's library, for scripts/gguf/check_export.py.
//
// Usage: llama_greedy MODEL.gguf STEPS TEXT [ID ...]
// Prints three lines: `tokens:` the ids llama.cpp's tokenizer gives TEXT (special tokens added as
// the file's metadata says), `greedy:` the STEPS ids greedy decoding appends to the given IDs
// (or to TEXT's ids where none are given), `logits:` the logits after the prompt.
//
// Build against a llama.cpp build (its include/ and the directory of libllama.so):
//   g++ -O2 -std=c++17 scripts/gguf/llama_greedy.cpp -I LLAMA/include -I LLAMA/ggml/include \
//       -L LLAMA/build/bin -lllama -Wl,-rpath,LLAMA/build/bin -o llama_greedy

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "llama.h"

static void quiet(ggml_log_level, const char *, void *) {}

int main(int argc, char ** argv) {
    if (argc < 4) {
        std::fprintf(stderr, "usage: %s MODEL.gguf STEPS TEXT [ID ...]\n", argv[0]);
        return 2;
    }
    llama_log_set(quiet, nullptr);
    llama_backend_init();
    llama_model * model = llama_model_load_from_file(argv[1], llama_model_default_params());
    if (!model) {
        std::fprintf(stderr, "llama.cpp could not load %s\n", argv[1]);
        return 1;
    }
    const llama_vocab * vocab = llama_model_get_vocab(model);
    const int steps = std::atoi(argv[2]);
    const char * text = argv[3];
    std::vector<llama_token> tokens(std::strlen(text) + 8);
    const int n = llama_tokenize(vocab, text, (int) std::strlen(text), tokens.data(), (int) tokens.size(), true, true);
    if (n < 0) {
        std::fprintf(stderr, "tokenizing failed\n");
        return 1;
    }
    tokens.resize(n);
    std::printf("tokens:");
    for (llama_token t : tokens) std::printf(" %d", t);
    std::printf("\n");
    std::vector<llama_token> prompt;
    for (int i = 4; i < argc; i++) prompt.push_back(std::atoi(argv[i]));
    if (prompt.empty()) prompt = tokens;
    llama_context_params params = llama_context_default_params();
    params.n_ctx = (uint32_t) (prompt.size() + steps + 1);
    params.n_batch = params.n_ctx;
    params.n_threads = 1;
    params.n_threads_batch = 1;
    llama_context * ctx = llama_init_from_model(model, params);
    if (!ctx) {
        std::fprintf(stderr, "no context\n");
        return 1;
    }
    const int n_vocab = llama_vocab_n_tokens(vocab);
    llama_batch batch = llama_batch_get_one(prompt.data(), (int) prompt.size());
    std::vector<float> first;
    llama_token next = 0;
    std::printf("greedy:");
    for (int i = 0; i < steps; i++) {
        if (llama_decode(ctx, batch) != 0) {
            std::fprintf(stderr, "decode failed\n");
            return 1;
        }
        const float * logits = llama_get_logits_ith(ctx, -1);
        if (first.empty()) first.assign(logits, logits + n_vocab);
        next = 0;
        for (int v = 1; v < n_vocab; v++) {
            if (logits[v] > logits[next]) next = v;
        }
        std::printf(" %d", next);
        batch = llama_batch_get_one(&next, 1);
    }
    std::printf("\nlogits:");
    for (float v : first) std::printf(" %.7g", v);
    std::printf("\n");
    llama_free(ctx);
    llama_model_free(model);
    return 0;
}

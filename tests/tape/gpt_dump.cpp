// Writes the tape dump of one training step of a GPT built from tapegrad::nn (nanoGPT's
// architecture: tests/nn/nn_testing.hpp's TinyGPT, with wte, wpe, Blocks "h", ln_f and an untied
// lm_head, then ops::cross_entropy), its backward recorded. The default is the tiny config of
// examples/gpt (2 blocks, 4 heads, C 128, T 64, B 16) over a 40-token vocabulary; gpt_test.sh and the
// page test read it with `tape show` and `tape html`. More layers and smaller sizes make a tape of
// thousands of nodes cheaply (`gpt_dump big.json 500 2 8 16 2`). The dump names the 40 tokens
// (characters, "\n" and " " among them: DumpOptions::vocabulary) for the token table's and the
// head's rows and the ids and targets.
//
//   gpt_dump FILE [LAYERS [B T C HEADS]]
// prints "values V nodes N contributions E", the step's and the dump's times, and the numbers the
// tape holds (tape_numbers: what check_dump_size bounds).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "nn/nn_testing.hpp"
#include "tapegrad/tape/tape_dump.hpp"

using namespace tapegrad;

namespace {

long arg(char** argv, int i, long lo, long hi) {
  const long v = std::strtol(argv[i], nullptr, 10);
  if (v < lo || v > hi) {
    std::fprintf(stderr, "gpt_dump: argument %d must be from %ld to %ld, got %s\n", i, lo, hi, argv[i]);
    std::exit(2);
  }
  return v;
}

double since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2 && argc != 3 && argc != 7) {
    std::fprintf(stderr, "usage: gpt_dump FILE [LAYERS [B T C HEADS]]\n");
    return 2;
  }
  const int layers = argc > 2 ? static_cast<int>(arg(argv, 2, 1, 1000)) : 2;
  const int64_t B = argc > 3 ? arg(argv, 3, 1, 64) : 16, T = argc > 3 ? arg(argv, 4, 1, 256) : 64;
  const int64_t C = argc > 3 ? arg(argv, 5, 1, 1024) : 128, H = argc > 3 ? arg(argv, 6, 1, 64) : 4;
  const int64_t V = 40;
  if (C % H != 0) {
    std::fprintf(stderr, "gpt_dump: C %lld is not a multiple of HEADS %lld\n", static_cast<long long>(C),
                 static_cast<long long>(H));
    return 2;
  }
  testing::Place place(1337);
  testing::TinyGPT model(place.f, V, T, C, H, layers);
  Graph& g = place.g;

  // ids (B, T): a fixed pseudo-text; targets: the next token
  std::vector<int32_t> ids, targets;
  for (int64_t i = 0; i < B * T; ++i) {
    ids.push_back(static_cast<int32_t>((7 * i + i / 5) % V));
    targets.push_back(static_cast<int32_t>((7 * (i + 1) + (i + 1) / 5) % V));
  }
  const auto start = std::chrono::steady_clock::now();
  Var logits = model(g.input(Tensor::from_vector(ids, Shape{B, T}), "ids"));
  Var loss = ops::cross_entropy(logits, g.input(Tensor::from_vector(targets, Shape{B, T}), "targets")).label("loss");
  BackwardRecord record;
  g.backward(loss, {.record = &record});
  const double step_ms = since(start);

  DumpOptions options;
  std::vector<std::string> tokens = {"\n", " "};
  for (const char c : std::string("etaoinshrdlucmfwypvbgkqjxzETAOI.,!?"))
    tokens.emplace_back(1, c);
  tokens.resize(static_cast<size_t>(V), "?");
  options.vocabulary = DumpOptions::Vocabulary{tokens, {"wte.weight", "lm_head.weight", "ids", "targets"}};
  options.title = "GPT (L" + std::to_string(layers) + " H" + std::to_string(H) + " C" + std::to_string(C) + " T" +
                  std::to_string(T) + " B" + std::to_string(B) + " V" + std::to_string(V) + "): one training step";
  const auto dumped = std::chrono::steady_clock::now();
  try {
    write_tape_dump(argv[1], g, &record, options);
  } catch (const Error& e) {
    std::fprintf(stderr, "gpt_dump: %s\n", e.what());
    return 2;
  }
  std::printf("values %zu nodes %zu contributions %zu; step %.0f ms, dump %.0f ms; loss %.4f; %lld numbers\n",
              g.value_count() + g.parameter_count(), g.nodes().size(), record.events.size(), step_ms, since(dumped),
              loss.value().item(), static_cast<long long>(tape_numbers(g)));
  return 0;
}

// gpt: a character-level (or byte-level) GPT trained with tapegrad, written against its installed
// API. The model is model.hpp (nanoGPT's GPT from tapegrad::nn layers, with value embeddings as an
// option); train.cpp trains it and samples from it. docs/nn.md, "The GPT example", walks through it.
//
//   gpt                                   train the tiny config for 200 steps on the built-in corpus,
//                                         then print a sample
//   gpt train [--config tiny|small|gpt2] [--data FILE] [--tokens char|byte|random] [--steps N]
//             [--device cpu|cuda] [--dtype f32|f64] [--autocast bf16] [--value-embeds P] [--value-embeds-dense]
//             [--dropout P] [--checkpoint CKPT [--resume | --force] [--save-every K]]
//             [--log FILE.csv] [--seed S] [--dump-tape FILE] [--trace FILE] [--graph] [--cast-weights]
//             [--gelu exact|tanh] [--fused-mlp] [--sample N] [--accumulate A] [--zero 0|1] [--dist]
//             [--show-batches]
//   mpirun -np N gpt train ...            the same, on N ranks (docs/distributed.md)
//   gpt sample --checkpoint CKPT [--prompt TEXT] [--tokens N] [--temperature T] [--top-k K]
//              [--seed S] [--device cpu|cuda] [--no-cache]
//
// Each training step prints a line that begins `step N loss X`. Exit codes: 0 done, 2 bad input
// (a bad flag, an unreadable, damaged or mismatched checkpoint, data shorter than one block, an
// output that cannot be written or is in use, a loss that is not finite; then nothing is written,
// or what was is put back: outputs.hpp), 1 an internal failure.
#include <CLI/CLI.hpp>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <string>

#include "train.hpp"

namespace {

int run(CLI::App& app, int argc, char** argv, const std::function<int()>& body) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help
    std::fprintf(stderr, "gpt: %s\nRun with --help for more information.\n", e.what());
    return 2;
  }
  // A rank of a job of several that fails ends the whole job with its exit code (124 for a
  // collective that timed out), so that no other rank waits for it (docs/distributed.md).
  auto fail = [](int code, const std::string& text) {
    std::fflush(stdout);
    const bool job = tapegrad::dist::in_job();
    const bool named = text.rfind("[dist] rank ", 0) == 0;  // a timeout says which rank it is
    if (job && !named)
      std::fprintf(stderr, "gpt: rank %d: %s\n", tapegrad::dist::placement_from_environment().rank, text.c_str());
    else std::fprintf(stderr, "gpt: %s\n", text.c_str());
    if (job) tapegrad::dist::abort_job(code);
    return code;
  };
  try {
    return body();
  } catch (const std::bad_alloc&) {
    return fail(2, "out of memory");
  } catch (const tapegrad::dist::Timeout& e) {
    return fail(124, e.what());
  } catch (const tapegrad::Error& e) {  // bad input, a refused file, a device that cannot run it
    return fail(2, e.what());
  } catch (const std::exception& e) {
    return fail(1, std::string("internal failure: ") + e.what());
  }
}

}  // namespace

// A positive finite number, or CLI11's message naming the option.
const CLI::Validator positive_finite(
    [](std::string& text) -> std::string {
      char* end = nullptr;
      const double v = std::strtod(text.c_str(), &end);
      return !text.empty() && *end == 0 && v > 0 && std::isfinite(v) ? "" : "must be a positive finite number, got '" + text + "'";
    },
    "a positive finite number");

// A seed: an integer from 0 to 2^64 - 1, checked on its text (CLI11 reads "-1" into a u64 as a
// bound, and "18446744073709551616" as the largest: both silently other seeds).
const CLI::Validator seed_value(
    [](std::string& text) -> std::string {
      char* end = nullptr;
      errno = 0;
      const bool digits = !text.empty() && text.find_first_not_of("0123456789") == std::string::npos;
      if (digits) std::strtoull(text.c_str(), &end, 10);
      return digits && errno == 0 ? "" : "must be an integer from 0 to 18446744073709551615, got '" + text + "'";
    },
    "an integer from 0 to 2^64 - 1");

// A dropout probability from 0 to 0.99 (CLI::Range lets NaN through: no comparison fails for it).
const CLI::Validator dropout_value(
    [](std::string& text) -> std::string {
      char* end = nullptr;
      const double v = std::strtod(text.c_str(), &end);
      const bool ok = !text.empty() && *end == 0 && v >= 0 && v <= 0.99;  // false for NaN
      return ok ? "" : "must be a number from 0 to 0.99, got '" + text + "'";
    },
    "a number from 0 to 0.99");

int main(int argc, char** argv) {
  CLI::App app{"gpt: a character-level GPT (nanoGPT's) trained with tapegrad.\n"
               "Without a subcommand: the tiny config, 200 steps on the built-in corpus, then a sample."};
  app.require_subcommand(0, 1);

  gpt::TrainOptions t;
  std::string config = "tiny", dtype = "f32", tokens = "char", autocast = "f32", gelu = "exact";
  int64_t value_embeds = 0;
  bool ve_dense = false, fused_mlp = false;
  double dropout = -1;
  CLI::App* train = app.add_subcommand("train", "train (or resume) until --steps, writing the checkpoint at the end");
  train->add_option("--config", config, "tiny (L2 H4 C128 T64 B16, default), small (L6 H6 C384 T256 B64) or gpt2 "
                                         "(GPT-2 124M's L12 H12 C768 T1024 B16)")
      ->check(CLI::IsMember({"tiny", "small", "gpt2"}));
  train->add_option("--data", t.data, "a text file to train on (default: the built-in corpus)");
  train->add_option("--tokens", tokens, "char (the text's characters, default), byte (V = 256) or random (uniform "
                                         "ids at GPT-2's V = 50304, no text: for timing)")
      ->check(CLI::IsMember({"char", "byte", "random"}));
  train->add_option("--steps", t.steps, "train until this step (default 200)")->check(CLI::Range(1, 100000000));
  train->add_option("--device", t.device, "cpu (default) or cuda[:N]");
  train->add_option("--dtype", dtype, "f32 (default) or f64")->check(CLI::IsMember({"f32", "f64"}));
  train->add_option("--autocast", autocast, "bf16: the model's products in bf16, all else f32; f32 (default): none")
      ->check(CLI::IsMember({"f32", "bf16"}));
  train->add_option("--gelu", gelu, "exact (nanoGPT's nn.GELU(), default) or tanh (GPT-2's approximation)")
      ->check(CLI::IsMember({"exact", "tanh"}));
  train->add_flag("--fused-mlp", fused_mlp, "each MLP as one fused op (ops::mlp); on CUDA with --autocast bf16 "
                                            "and --gelu tanh its GELU runs in the GEMMs' epilogues");
  train->add_option("--value-embeds", value_embeds, "P value-embed planes, added to the values of layers 0..P-1")
      ->check(CLI::Range(0, 1024));
  train->add_flag("--value-embeds-dense", ve_dense, "look them up with the dense embedding op (for comparison)");
  train->add_option("--dropout", dropout, "the dropout probability (default: the config's)")->check(dropout_value);
  train->add_option("--checkpoint", t.checkpoint, "where the checkpoint goes (written atomically)");
  CLI::Option* resume = train->add_flag("--resume", t.resume, "continue from --checkpoint up to --steps");
  train->add_flag("--force", t.force, "replace an existing checkpoint with a fresh run")->excludes(resume);
  train->add_option("--save-every", t.save_every, "also write the checkpoint every K steps")->check(CLI::Range(1, 100000000));
  train->add_option("--log", t.log, "a CSV log of every step, and its plot beside it (.svg)");
  train->add_option("--seed", t.seed, "the seed of the weights, batches and dropout (default 1337)")->check(seed_value);
  train->add_option("--dump-tape", t.dump_tape, "write the first step's tape here (for apps/tape)");
  train->add_option("--trace", t.trace, "for the PyTorch parity test: weights, batches, losses, first gradients");
  train->add_flag("--graph", t.graph, "CUDA: capture one training step as a CUDA graph and replay it for the others "
                                      "(dropout 0)");
  train->add_flag("--cast-weights", t.cast_weights, "with --autocast bf16: cast each weight to bf16 at its product, "
                                                   "where by default AdamW writes bf16 copies as it updates them (the "
                                                   "same bits; for timing the two)");
  train->add_option("--sample", t.sample_tokens, "print a sample of N tokens at the end")->check(CLI::Range(0, 1000000));
  train->add_option("--accumulate", t.accumulate, "A micro-batches of --config's batch a step on each rank (default 1); "
                                                  "the step's gradient is their mean over the job's ranks")
      ->check(CLI::Range(1, 1 << 20));
  int zero = 0;
  train->add_option("--zero", zero, "1: ZeRO-1, AdamW's moments cut over the ranks (the same bits); 0: none (default)")
      ->check(CLI::Range(0, 1));
  train->add_flag("--dist", t.dist, "join the job's communicator (MPI on the CPU, NCCL on CUDA) even as its only rank "
                                    "(a job of one: nothing to exchange, the step as without); jobs of several ranks "
                                    "use it anyway");
  train->add_flag("--show-batches", t.show_batches, "print the windows each micro-batch draws, and which rank drew them");

  gpt::SampleOptions s;
  CLI::App* sample = app.add_subcommand("sample", "print text sampled from a checkpoint");
  sample->add_option("--checkpoint", s.checkpoint, "the checkpoint")->required();
  sample->add_option("--prompt", s.prompt, "the text to continue (default: a newline)");
  sample->add_option("--tokens", s.tokens, "how many tokens to sample (default 200)")->check(CLI::Range(1, 1000000));
  sample->add_option("--temperature", s.temperature, "divides the logits (default 1)")->check(positive_finite);
  sample->add_option("--top-k", s.top_k, "sample among the K most likely tokens (default: all)")->check(CLI::Range(0, 1 << 30));
  sample->add_option("--seed", s.seed, "the sampling seed (default 1337)")->check(seed_value);
  sample->add_option("--device", s.device, "cpu (default) or cuda[:N]");
  sample->add_flag("--no-cache", s.no_cache, "run the model over the whole window for every token, without the "
                                           "KV cache (the same tokens, slower: for comparison)");

  return run(app, argc, argv, [&]() {
    if (*sample) return gpt::sample(s);
    t.config = config;
    t.preset = gpt::preset(config);
    t.zero = zero == 1;
    t.dtype = dtype == "f64" ? tapegrad::DType::f64 : tapegrad::DType::f32;
    t.bytes = tokens == "byte";
    t.random_tokens = tokens == "random";
    t.preset.model.fused_mlp = fused_mlp;
    t.preset.model.gelu_tanh = gelu == "tanh";
    t.preset.model.value_embeds = value_embeds;
    t.preset.model.ve_mode = ve_dense ? gpt::ValueEmbeds::dense : gpt::ValueEmbeds::sparse;
    t.preset.model.products = autocast == "bf16" ? tapegrad::DType::bf16 : tapegrad::DType::f32;
    if (dropout >= 0) t.preset.model.dropout = dropout;
    if (!*train) t.sample_tokens = 200;  // `gpt` alone: the short run and a sample
    return gpt::train(t);
  });
}

// value_embed: a next-token model trained through the value-embed path (docs/value_embed.md).
//
//   value_embed                                      train on the built-in text on the CPU (small sizes)
//   value_embed --device cuda --planes 4 --vocab 50304 --dim 768     the seed's sizes
//   value_embed --deterministic | --buffer f32       the backward's other modes
//   value_embed --table bf16                         a bf16 table (as the seed's), f32 planes
//   value_embed --dump-tape FILE                     also write the first step's tape dump
//   value_embed --bench [--bench-out DIR]            the benchmark table on cuda:0 at the seed's sizes (CUDA builds)
//
// Exit codes: 0 done, 1 an internal failure, 2 bad input (a bad flag, a size out of its range or
// too large for memory) or no device. Every size has a limit (model.hpp) checked before any
// allocation.
#include <cstdio>

#include "app_main.hpp"
#include "tapegrad/config.hpp"
#include "model.hpp"
#include "text.hpp"
#if TAPEGRAD_WITH_CUDA
#include "bench.hpp"
#endif

int main(int argc, char** argv) {
  CLI::App app{"value_embed: a next-token model trained through tapegrad's value-embed path"};
  ve_app::Config c;
  std::string device = "cpu", table = "f32", buffer = "f16";
  bool deterministic = false, bench = false;
  std::string bench_out;
  int runs = 50;
  app.add_option("--device", device, "cpu or cuda");
  app.add_option("--planes", c.planes, "P, value planes")
      ->check(apps::integer_range(1, ve_app::max_planes))->capture_default_str();
  app.add_option("--vocab", c.vocab, "V, rows per plane (0: the text's distinct tokens)")
      ->check(apps::integer_range(0, ve_app::max_vocab))->capture_default_str();
  app.add_option("--dim", c.dim, "D, the embedding width")
      ->check(apps::integer_range(1, ve_app::max_dim))->capture_default_str();
  app.add_option("--tokens", c.tokens, "T, tokens per step")
      ->check(apps::integer_range(1, ve_app::max_tokens))->capture_default_str();
  app.add_option("--steps", c.steps, "training steps")
      ->check(apps::integer_range(1, ve_app::max_steps))->capture_default_str();
  app.add_option("--accum", c.accum, "steps the buffer gathers before each pull")
      ->check(apps::integer_range(1, ve_app::max_accum))->capture_default_str();
  app.add_option("--table", table, "the table's dtype: f32 or bf16 (its planes are f32 either way)")->capture_default_str();
  app.add_option("--buffer", buffer, "the buffer's dtype: f16 or f32")->capture_default_str();
  app.add_flag("--deterministic", deterministic, "sorted segment sums instead of atomics");
  app.add_option("--lr", c.lr, "dense AdamW's learning rate (mix, W, b)")
      ->check(apps::positive_float())->capture_default_str();
  app.add_option("--table-lr", c.table_lr, "sparse AdamW's learning rate (the table)")
      ->check(apps::positive_float())->capture_default_str();
  app.add_option("--seed", c.seed, "initialization seed")
      ->check(apps::integer_range(0, UINT64_MAX))->capture_default_str();
  app.add_option("--dump-tape", c.dump_tape, "write the first step's tape dump to FILE (docs/tape-format.md)");
  app.add_flag("--bench", bench, "print the benchmark table on cuda:0 (P=4, V=50304, D=768 unless given)");
  app.add_option("--runs", runs, "--bench: runs per measurement (the median is shown)")
      ->check(apps::integer_range(1, ve_app::max_runs))->capture_default_str();
  app.add_option("--bench-out", bench_out, "--bench: write the inputs and buffers for bench/value_embed/baseline.py here");
  return apps::run_main(app, "value_embed", argc, argv, [&] {
    c.device = tapegrad::parse_device(device);
    if (buffer != "f16" && buffer != "f32") throw tapegrad::Error("[value_embed] --buffer must be f16 or f32, got " + buffer);
    c.buffer = buffer == "f16" ? tapegrad::DType::f16 : tapegrad::DType::f32;
    if (table != "f32" && table != "bf16") throw tapegrad::Error("[value_embed] --table must be f32 or bf16, got " + table);
    c.table = table == "f32" ? tapegrad::DType::f32 : tapegrad::DType::bf16;
    if (deterministic) c.accumulate = tapegrad::ops::ValueEmbedAccumulate::deterministic;
    if (bench) {
#if TAPEGRAD_WITH_CUDA
      ve_app::BenchConfig b;  // the seed's sizes unless the flags say otherwise
      if (app.count("--planes")) b.planes = c.planes;
      if (app.count("--vocab")) b.vocab = c.vocab;
      if (app.count("--dim")) b.dim = c.dim;
      ve_app::check_sizes(b.planes, b.vocab, b.dim, 0);
      b.runs = runs;
      b.out_dir = bench_out;
      ve_app::run_bench(b, stdout);
      return 0;
#else
      throw tapegrad::DeviceError("[value_embed] --bench needs a CUDA build (meson setup -Dcuda=enabled)");
#endif
    }
    ve_app::train(c, ve_app::tokenize(ve_app::kText), stdout);
    return 0;
  });
}

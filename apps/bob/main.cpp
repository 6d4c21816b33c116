// bob: a resumable byte-level next-byte trainer (docs/bob.md), built on tapegrad's graph.
//
//   bob                                          the main job on the built-in corpus
//   bob fixture [--corpus FILE] [--offset N] [--prompt TEXT]... --out REC
//   bob train --input REC --checkpoint CKPT --fresh|--resume [--force] [--predictions FILE]
//             [--overwrite-bug] [--device cpu|cuda[:N]] [--no-graph] [--dump-tape FILE]
//   bob inspect CKPT
//   bob verify-resume --input REC [--invocations N] [--device cpu|cuda[:N]] [--no-graph]
//
// Exit codes (docs/bob.md, "Exit codes"): 0 done; 2 bad input (a bad flag, a count out of range, out of memory),
// a refused file or a device that cannot run it (nothing is written); 1 an internal failure, or
// verify-resume found a difference.
#include <cstdio>

#include "app_main.hpp"
#include "commands.hpp"

int main(int argc, char** argv) {
  CLI::App app{"bob: a resumable byte-level next-byte trainer (docs/bob.md), built on tapegrad's graph.\n"
               "Without a subcommand: the main job on the built-in corpus (a fresh invocation and two resumes)."};
  app.require_subcommand(0, 1);

  bob::FixtureOptions fixture;
  CLI::App* fixture_cmd = app.add_subcommand("fixture", "write an input record: 257 corpus bytes and up to 3 prompts");
  fixture_cmd->add_option("--corpus", fixture.corpus, "a file of raw bytes (default: the built-in corpus)");
  fixture_cmd->add_option("--offset", fixture.offset, "where the 257 bytes start (default 0)")
      ->check(apps::integer_range(0, uint64_t{1} << 40));  // 1 TiB: no offset + 257 can overflow;
  fixture_cmd->add_option("--prompt", fixture.prompts, "a prompt (repeat for up to 3; missing ones are empty)");
  fixture_cmd->add_option("--out", fixture.out, "the record to write (atomically)")->required();

  bob::TrainOptions train;
  CLI::App* train_cmd = app.add_subcommand("train", "one invocation: 10 updates, then the checkpoint and predictions");
  train_cmd->add_option("--input", train.input, "the input record")->required();
  train_cmd->add_option("--checkpoint", train.checkpoint, "the checkpoint to resume from and to write")->required();
  CLI::Option* fresh = train_cmd->add_flag("--fresh", train.fresh, "start from bob-seed-v1; read no checkpoint");
  CLI::Option* resume = train_cmd->add_flag("--resume", train.resume, "continue from the checkpoint (it must exist)");
  fresh->excludes(resume);
  train_cmd->add_flag("--force", train.force, "let --fresh replace an existing checkpoint")->needs(fresh);
  train_cmd->add_option("--predictions", train.predictions, "also write the predictions (8 bytes a prompt) here");
  train_cmd->add_flag("--overwrite-bug", train.overwrite_bug,
                      "run the backward in the engine's overwrite-bug mode (repeated bytes overwrite their rows)");
  train_cmd->add_option("--device", train.device, "cpu (default) or cuda[:N]");
  train_cmd->add_option("--dump-tape", train.dump_tape,
                        "write the last update's tape here (see apps/tape); runs op by op on CUDA");
  train_cmd->add_flag("--no-graph", train.no_graph,
                      "on CUDA, launch every op of every update instead of replaying the 10 updates as one graph");

  std::string inspect_path;
  CLI::App* inspect_cmd = app.add_subcommand("inspect", "show a checkpoint's fields, planes and CRC, and bob's verdict");
  inspect_cmd->add_option("CKPT", inspect_path, "the checkpoint")->required();

  bob::VerifyOptions verify;
  CLI::App* verify_cmd = app.add_subcommand(
      "verify-resume", "N invocations as separate processes against the same updates in one: equal bit for bit?");
  verify_cmd->add_option("--input", verify.input, "the input record")->required();
  verify_cmd->add_option("--invocations", verify.invocations, "how many invocations (default 3)")
      ->check(apps::integer_range(1, 1000));
  verify_cmd->add_option("--device", verify.device, "cpu (default) or cuda[:N]");
  verify_cmd->add_flag("--no-graph", verify.no_graph, "on CUDA, run every invocation op by op (no CUDA graph)");

  return apps::run_main(app, "bob", argc, argv, [&] {
    if (*fixture_cmd) bob::fixture(fixture);
    else if (*train_cmd) bob::train(train);
    else if (*inspect_cmd) return bob::inspect(inspect_path);
    else if (*verify_cmd) return bob::verify_resume(verify);
    else bob::main_job();
    return 0;
  });
}

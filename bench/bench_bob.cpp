// Microbenchmarks of bob's update (Google Benchmark; not a timed test). Goal: <= 50 us per update
// on the CPU (docs/bob.md has the numbers and the machine).
//
//   ./build/bench/bench_bob --benchmark_repetitions=10 --benchmark_report_aggregates_only=true
//
// BM_BobUpdate: one full update exactly as `bob train` makes it (forward, backward through the
// engine, AdamW) on the record of the built-in corpus, run for as long as the benchmark runs
// (thousands of updates: a sharply trained table, sharper the longer it runs). BM_BobUpdateFirst30:
// the first 30 updates from the seed, the ones `bob` makes, timed per update; BM_BobUpdateTrained
// 30 updates from the state after 5000, the same ones every run; BM_BobUpdatePhases the first 30 with
// counters for the forward, the backward and AdamW. The others split an update: BM_BobLoss is the
// forward alone (gather + cross-entropy, no tape), BM_BobAdamW the optimizer alone on a [256, 256]
// table. First30 and Trained also report cpu_us, the calling thread's CPU time per update, which
// a loaded machine moves less than the wall clock. bench/bob_invocations.sh times whole `bob train`
// processes; bench/bob_ab.sh compares two builds, or the CPU paths of one, interleaved.
#include <benchmark/benchmark.h>

#include <time.h>

#include <algorithm>
#include <chrono>

#include "bench_main.hpp"
#include "bob_model.hpp"
#include "default_corpus.hpp"

namespace {

bob::Model make_model() {
  return bob::Model(tapegrad::io::make_record(bob::default_corpus, 0, {"Down the Rabbit", "she had peeped into th", ""}),
                    tapegrad::Device::cpu());
}

// The calling thread's CPU time in seconds: unlike the wall clock, it does not count the time the
// thread waited for a core, so it moves less on a loaded machine (with one intra-op thread it is
// the whole update's).
double thread_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

// Puts `from` back (untimed), then makes 30 updates: seconds per update, with the phase times added
// to *times and the calling thread's CPU seconds per update to *cpu when given.
double seconds_per_update(bob::Model& model, const tapegrad::io::Checkpoint& from,
                          bob::Model::PhaseTimes* times = nullptr, double* cpu = nullptr) {
  model.load(from);
  const double cpu_start = thread_cpu_seconds();
  const auto start = std::chrono::steady_clock::now();
  for (int k = 0; k < 30; ++k) benchmark::DoNotOptimize(model.update(false, "", times).raw_data());
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / 30;
  if (cpu) *cpu += (thread_cpu_seconds() - cpu_start) / 30;
  return seconds;
}

// The counter cpu_us: the calling thread's CPU time per update, from the sum over the iterations.
void report_cpu(benchmark::State& state, double cpu_seconds) {
  state.counters["cpu_us"] = cpu_seconds * 1e6 / static_cast<double>(std::max<int64_t>(state.iterations(), 1));
}

void BM_BobUpdate(benchmark::State& state) {
  bob::Model model = make_model();
  for (auto _ : state) benchmark::DoNotOptimize(model.update().raw_data());
}
BENCHMARK(BM_BobUpdate)->Unit(benchmark::kMicrosecond);

// The updates `bob` itself makes: 30 from the seed (a fresh invocation and two resumes), the
// state put back between iterations outside the timing. Reported per update.
void BM_BobUpdateFirst30(benchmark::State& state) {
  bob::Model model = make_model();
  const tapegrad::io::Checkpoint seed = model.state();
  double cpu = 0;
  for (auto _ : state) state.SetIterationTime(seconds_per_update(model, seed, nullptr, &cpu));
  report_cpu(state, cpu);
}
BENCHMARK(BM_BobUpdateFirst30)->UseManualTime()->Unit(benchmark::kMicrosecond);

// 30 updates from the state after 5000 (a sharply trained table, where the softmax's sums take
// their slow path), put back between iterations (both with the counter cpu_us): unlike BM_BobUpdate, whose table keeps training
// for as long as the benchmark runs, the same updates whatever --benchmark_min_time is.
void BM_BobUpdateTrained(benchmark::State& state) {
  bob::Model model = make_model();
  for (int k = 0; k < 5000; ++k) model.update();
  const tapegrad::io::Checkpoint trained = model.state();
  double cpu = 0;
  for (auto _ : state) state.SetIterationTime(seconds_per_update(model, trained, nullptr, &cpu));
  report_cpu(state, cpu);
}
BENCHMARK(BM_BobUpdateTrained)->UseManualTime()->Unit(benchmark::kMicrosecond);

// The first 30 updates again, split by phase: forward (gather + cross-entropy, recording the
// tape), backward (the engine: the seed, cross-entropy's backward, the scatter into dW) and AdamW,
// as counters in us per update.
void BM_BobUpdatePhases(benchmark::State& state) {
  bob::Model model = make_model();
  const tapegrad::io::Checkpoint seed = model.state();
  bob::Model::PhaseTimes times;
  int64_t updates = 0;
  for (auto _ : state) {
    state.SetIterationTime(seconds_per_update(model, seed, &times));
    updates += 30;
  }
  const double n = static_cast<double>(std::max<int64_t>(updates, 1));
  state.counters["forward_us"] = times.forward_us / n;
  state.counters["backward_us"] = times.backward_us / n;
  state.counters["adamw_us"] = times.optimizer_us / n;
}
BENCHMARK(BM_BobUpdatePhases)->UseManualTime()->Unit(benchmark::kMicrosecond);

void BM_BobLoss(benchmark::State& state) {
  bob::Model model = make_model();
  for (auto _ : state) benchmark::DoNotOptimize(model.loss().raw_data());
}
BENCHMARK(BM_BobLoss)->Unit(benchmark::kMicrosecond);

void BM_BobAdamW(benchmark::State& state) {
  bob::Model model = make_model();
  model.update();  // the table now has a gradient
  tapegrad::optim::AdamW adamw({model.table()}, bob::learner_config());
  for (auto _ : state) {
    adamw.step();
    benchmark::DoNotOptimize(model.table().value().raw_data());
  }
}
BENCHMARK(BM_BobAdamW)->Unit(benchmark::kMicrosecond);

}  // namespace

int main(int argc, char** argv) { return tapegrad::bench::run_benchmarks(argc, argv); }

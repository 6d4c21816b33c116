// Writes the tape dump of a long chain: a parameter scaled N times, then summed, with its backward
// recorded (N + 2 values, N + 1 nodes, N + 1 events). long_chain_test.sh reads it with `tape show`:
// a reader that searched its values once per lookup would take quadratic time on it.
//
//   long_chain_dump N FILE
#include <cstdio>
#include <cstdlib>
#include <string>

#include "tapegrad/ops/ops.hpp"
#include "tapegrad/tape/tape_dump.hpp"

using namespace tapegrad;

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: long_chain_dump N FILE\n");
    return 2;
  }
  const long n = std::strtol(argv[1], nullptr, 10);
  if (n < 1 || n > 10'000'000) {
    std::fprintf(stderr, "long_chain_dump: N must be from 1 to 10000000, got %s\n", argv[1]);
    return 2;
  }
  Graph g;
  Var x = g.parameter(Tensor::from_doubles({0.5, -0.25}, Shape{2}, DType::f64), "start");
  for (long i = 0; i < n; ++i) x = ops::scale(x, 1.0);
  Var loss = ops::sum(x).label("loss");
  BackwardRecord record;
  g.backward(loss, {.record = &record});
  DumpOptions options;
  options.title = "a chain of " + std::to_string(n) + " scales";
  write_tape_dump(argv[2], g, &record, options);
  return 0;
}

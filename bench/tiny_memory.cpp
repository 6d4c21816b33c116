// Peak RSS after N tiny steps in one process: the tape is cleared each step, so memory stays flat.
//   ./build/bench/tiny_memory 1000 && ./build/bench/tiny_memory 100000
#include <sys/resource.h>

#include <cstdio>
#include <cstdlib>

#include "tapegrad/optim/sgd.hpp"
#include "tiny_model.hpp"

int main(int argc, char** argv) {
  const long steps = argc > 1 ? std::atol(argv[1]) : 1000;
  tiny::Model m(tiny::Config{});
  tapegrad::optim::SGD sgd(0.5);
  for (long i = 0; i < steps; ++i) {
    m.g.clear();
    m.g.zero_grad();
    m.g.backward(m.loss(m.g));
    sgd.step(m.g.parameters());
  }
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  std::printf("steps %ld  peak RSS %ld KiB\n", steps, ru.ru_maxrss);
  return 0;
}

// The tiny next-token model of the Python reference (docs/tiny_step.md, "Model"), assembled from
// the graph: embedding gather, matmul, bias row, cross-entropy. The engine computes every gradient;
// the matmul and the cross-entropy are the app's own ops, with the reference's arithmetic
// (reference_matmul.hpp, reference_loss.hpp).
#pragma once

#include <string>
#include <vector>

#include "tapegrad/graph/graph.hpp"
#include "tapegrad/io/json.hpp"

namespace tiny {

using tapegrad::Device;
using tapegrad::Graph;
using tapegrad::Tensor;
using tapegrad::Var;
namespace json = tapegrad::json;

// The reference's constants. Numbers stay json::Values so ints print as ints ("learning_rate": 1).
struct Config {
  std::vector<std::string> vocab{"red", "green", "stop", "go"};
  std::vector<std::string> inputs{"red", "green", "red"};
  std::vector<std::string> targets{"stop", "go", "stop"};
  int64_t embed_dim = 2;
  json::Value seed = int64_t{7};
  json::Value learning_rate = 0.5;
  json::Value epsilon = 1e-5;
  std::vector<json::Value> learning_rate_sweep{0.1, 0.5, int64_t{1}, int64_t{2}, int64_t{5}, int64_t{10}, int64_t{20}};
  json::Value large_learning_rate = int64_t{20};
};

// Reads and validates a config file (every key optional); throws tapegrad::Error naming the key.
Config load_config(const std::string& path);
// Checks what the reference would refuse: unknown tokens, empty or mismatched batch, bad rates;
// and check_work.
void validate(const Config& c);

// The gradient check costs about 2 * parameters * a forward pass's operations (docs/tiny_step.md,
// "Limits"); a config that asks for more than this is refused, naming how much it asks for.
constexpr int64_t max_check_work = int64_t{1000000000};  // about 10 s on one core
void check_work(const Config& c);

struct Model {
  Graph g;
  Var embedding, weights, bias;  // (V, d), (d, V), (V,)
  Tensor ids, targets;           // (B,) i32
  Device device;

  Model(const Config& c, Device device = Device::cpu());
  // One forward pass recorded on the graph; x and logits are returned for the trace when asked.
  Var loss(Graph& g, Var* x = nullptr, Var* logits = nullptr) const;
};

struct TraceOptions {
  bool overwrite_bug = false;       // run the step itself in the engine's overwrite-bug mode
  bool progress = true;             // show gradient-check progress on stderr when it runs > 1 s
  std::string dump_tape;            // when set, write the step's tape dump here (docs/tape-format.md)
};

// The reference's trace() as JSON (docs/tiny_step.md, "The trace"): byte-identical to
// json.dumps(trace(), indent=2).
json::Value trace(const Config& c, Device device, const TraceOptions& options);

}  // namespace tiny

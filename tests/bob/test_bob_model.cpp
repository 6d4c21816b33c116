// Tests for bob's model (apps/bob/bob_model.*): the initial table against the Python values, the
// gradient the engine computes against the contract's formula (docs/bob.md, "Model and objective"),
// the overwrite-bug mode, in-process resume, predictions, the checkpoint comparison
// verify-resume reports, and the same bits on every CPU path (src/kernels/cpu/simd.hpp).
//
// Rule: values that the contract fixes are checked bit for bit against
// tests/fixtures/gen_bob_adamw.py; the gradient, whose softmax rounding the contract leaves to
// the implementation, is checked against a double-precision evaluation of the contract's formula.
#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <limits>

#include "bob_model.hpp"
#include "default_corpus.hpp"
#include "cpu_paths.hpp"
#include "golden.hpp"
#include "tapegrad/ops/ops.hpp"

using namespace tapegrad;

namespace {

io::BobRecord default_record() {
  return io::make_record(bob::default_corpus, 0, {"Down the Rabbit", "", "she had peeped into th"});
}

std::vector<float> values(const Tensor& t) {
  const Tensor host = t.to(Device::cpu());
  const float* p = host.data<float>();
  return std::vector<float>(p, p + host.numel());
}

std::string checkpoint_bytes(const bob::Model& model) {
  const io::Checkpoint state = model.state();
  return io::encode(io::bob_checkpoint_identity(), state.step, state.planes);
}

// The contract's gradient in double precision: dW[b] = (1/B) sum over i with x_i = b of
// (softmax(W[b]) - onehot(y_i)); with only_last, each row gets only its last example's term.
std::vector<double> spec_gradient(const std::vector<float>& w, const io::BobRecord& r, bool only_last) {
  std::vector<double> grad(w.size(), 0.0);
  const double batch = static_cast<double>(io::bob_examples);
  for (size_t i = 0; i < io::bob_examples; ++i) {
    const size_t b = r.x[i];
    const float* row = w.data() + b * 256;
    double top = row[0], total = 0;
    for (int j = 1; j < 256; ++j) top = std::max(top, static_cast<double>(row[j]));
    for (int j = 0; j < 256; ++j) total += std::exp(row[j] - top);
    if (only_last) std::fill(grad.begin() + static_cast<long>(b * 256), grad.begin() + static_cast<long>(b * 256 + 256), 0.0);
    for (int j = 0; j < 256; ++j)
      grad[b * 256 + j] += (std::exp(row[j] - top) / total - (j == r.y[i] ? 1.0 : 0.0)) / batch;
  }
  return grad;
}

// The CRC-32 a checkpoint ends with, of every byte before it (src/io/envelope.hpp).
uint32_t stored_crc(const std::string& bytes) {
  uint32_t crc = 0;
  for (int i = 0; i < 4; ++i) crc |= static_cast<uint32_t>(static_cast<uint8_t>(bytes[bytes.size() - 4 + i])) << (8 * i);
  return crc;
}

double max_difference(const std::vector<float>& a, const std::vector<double>& b) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::fabs(a[i] - b[i]));
  return worst;
}

}  // namespace

TEST_CASE("the seed key and the initial table match the Python values bit for bit") {
  CHECK(bob::fnv1a64("bob-seed-v1") == bob_golden::hex(bob_golden::words("seed_key")[0]));
  const std::vector<float> table = bob::initial_table();
  REQUIRE(table.size() == 65536);
  const std::vector<std::string> first = bob_golden::words("table_first");
  for (size_t i = 0; i < first.size(); ++i) {
    CAPTURE(i);
    CHECK(std::bit_cast<uint32_t>(table[i]) == bob_golden::hex(first[i]));
  }
  for (int i : {255, 256, 4097, 32768, 65535}) {
    CAPTURE(i);
    CHECK(std::bit_cast<uint32_t>(table[static_cast<size_t>(i)]) ==
          bob_golden::hex(bob_golden::words("table_at " + std::to_string(i))[0]));
  }
  const std::string bytes(reinterpret_cast<const char*>(table.data()), table.size() * 4);  // little-endian host
  CHECK(bob::fnv1a64(bytes) == bob_golden::hex(bob_golden::words("table_fnv1a64")[0]));
  for (const float w : table) {
    REQUIRE(w >= -0x1p-7f);
    REQUIRE(w < 0x1p-7f);
    REQUIRE(std::ldexp(w, 30) == std::round(std::ldexp(w, 30)));  // a multiple of 2^-30
  }
}

TEST_CASE("splitmix64 is the reference generator") {
  CHECK(bob::splitmix64(0) == 0xe220a8397b1dcdafull);  // the first output of SplitMix64 seeded with 0
}

TEST_CASE("a fresh model starts at step 0 with the seed table and zero moments") {
  bob::Model model(default_record(), Device::cpu());
  const io::Checkpoint state = model.state();
  CHECK(state.step == 0);
  CHECK(state.planes[0] == bob::initial_table());
  CHECK(state.planes[1] == std::vector<float>(65536, 0.0f));
  CHECK(state.planes[2] == std::vector<float>(65536, 0.0f));
}

TEST_CASE("the engine's gradient is the spec's: repeated bytes accumulate their rows") {
  const io::BobRecord record = default_record();
  bob::Model model(record, Device::cpu());
  const std::vector<float> w0 = values(model.table().value());
  model.update();
  const std::vector<float> grad = values(model.table().grad());
  CHECK(max_difference(grad, spec_gradient(w0, record, false)) < 1e-7);
  // rows of bytes that never occur in x get exactly zero
  std::vector<bool> seen(256, false);
  for (uint8_t b : record.x) seen[b] = true;
  for (size_t b = 0; b < 256; ++b)
    if (!seen[b])
      for (size_t j = 0; j < 256; ++j) REQUIRE(grad[b * 256 + j] == 0.0f);
}

TEST_CASE("--overwrite-bug: a repeated byte's row keeps only its last example's gradient") {
  const io::BobRecord record = default_record();
  bob::Model model(record, Device::cpu());
  const std::vector<float> w0 = values(model.table().value());
  model.update(/*overwrite_bug=*/true);
  const std::vector<float> grad = values(model.table().grad());
  CHECK(max_difference(grad, spec_gradient(w0, record, true)) < 1e-7);
  CHECK(max_difference(grad, spec_gradient(w0, record, false)) > 1e-3);
}

TEST_CASE("the loss falls over 30 updates and the step counts them") {
  bob::Model model(default_record(), Device::cpu());
  const double start = model.loss().item();
  CHECK(start == doctest::Approx(std::log(256.0)).epsilon(1e-3));  // near-uniform at the start
  double last = start;
  for (int k = 0; k < 30; ++k) {
    const double loss = model.update().item();
    CHECK(loss <= last);
    last = loss;
  }
  CHECK(model.step() == 30);
  CHECK(model.loss().item() < start / 2);
}

TEST_CASE("in-process resume through checkpoint bytes gives the same bytes as one run") {
  const io::BobRecord record = default_record();
  bob::Model straight(record, Device::cpu());
  for (int k = 0; k < 30; ++k) straight.update();

  std::string bytes = checkpoint_bytes(bob::Model(record, Device::cpu()));
  for (int invocation = 0; invocation < 3; ++invocation) {
    bob::Model resumed(record, Device::cpu());
    resumed.load(io::decode(bytes, io::bob_checkpoint_identity(), "resume.ckpt"));
    const std::vector<Tensor> losses = resumed.updates(bob::updates_per_invocation);  // on the CPU: update() 10 times
    CHECK(losses.size() == bob::updates_per_invocation);
    bytes = checkpoint_bytes(resumed);
  }
  CHECK(bob::describe_difference(bytes, checkpoint_bytes(straight), "resumed", "straight") == "");
}

// The checkpoints' CRC-32 are those the build before the AVX2 path (19216a8) wrote on its AVX-512
// path: bob's own 30 updates, and 5000 (sharp rows, where the softmax's block sums take their
// slower branches).
TEST_CASE("every CPU path gives bob's updates the same bits: 30 and 5000 from the seed, as before the AVX2 path") {
  std::vector<uint32_t> first_losses;  // the first path's 30 losses
  for (cpu::simd::Path path : testing::cpu_paths()) {
    const testing::ForcedPath forced(path);
    CAPTURE(cpu::simd::name(path));
    bob::Model model(default_record(), Device::cpu());
    std::vector<uint32_t> losses;
    for (int k = 0; k < 30; ++k) losses.push_back(std::bit_cast<uint32_t>(static_cast<float>(model.update().item())));
    CHECK(stored_crc(checkpoint_bytes(model)) == 0x608863afu);
    if (first_losses.empty()) first_losses = losses;
    CHECK(losses == first_losses);
    for (int k = 30; k < 5000; ++k) model.update();
    CHECK(stored_crc(checkpoint_bytes(model)) == 0x41269bf9u);
  }
}

TEST_CASE("CUDA graphs are for CUDA models: turning them on for a CPU model is refused") {
  bob::Model model(default_record(), Device::cpu());
  CHECK_FALSE(model.graphs());
  CHECK_THROWS_WITH_AS(model.set_graphs(true), "[bob] CUDA graphs need a CUDA device; this model is on cpu",
                       tapegrad::Error);
  CHECK_NOTHROW(model.set_graphs(false));
}

TEST_CASE("predictions: argmax with the lowest index on ties, validity, empty prompts") {
  std::vector<float> table(65536, 0.0f);
  io::BobRecord record;
  record.prompt_last = {'a', io::bob_empty_prompt, 'c'};
  table['a' * 256 + 7] = 2.0f;
  table['a' * 256 + 9] = 2.0f;  // a tie: 7 wins
  table['c' * 256 + 3] = -1.0f;  // the rest of row 'c' is 0: the first 0 (index 0) wins
  bob::Predictions p = bob::predict(table, record);
  CHECK(p[0] == std::pair<uint32_t, uint32_t>{7, 1});
  CHECK(p[1] == std::pair<uint32_t, uint32_t>{0, 0});
  CHECK(p[2] == std::pair<uint32_t, uint32_t>{0, 1});

  table['c' * 256 + 200] = std::numeric_limits<float>::infinity();  // a row with a non-finite value
  p = bob::predict(table, record);
  CHECK(p[2] == std::pair<uint32_t, uint32_t>{0, 0});
  table['c' * 256 + 200] = std::numeric_limits<float>::quiet_NaN();
  CHECK(bob::predict(table, record)[2] == std::pair<uint32_t, uint32_t>{0, 0});
  CHECK(io::encode_predictions(p) == std::string("\x07\0\0\0\x01\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0", 24));
}

TEST_CASE("describe_difference names the field, and inside a plane the element and both values") {
  bob::Model model(default_record(), Device::cpu());
  const std::string a = checkpoint_bytes(model);
  CHECK(bob::describe_difference(a, a, "a", "b") == "");

  io::Checkpoint state = model.state();
  state.planes[1][3 * 256 + 5] = 1.0f;
  const std::string b = io::encode(io::bob_checkpoint_identity(), state.step, state.planes);
  const size_t planes_begin = a.size() - 4 - 3 * 262144;
  const size_t offset = planes_begin + 262144 + 4 * (3 * 256 + 5);
  CHECK(bob::describe_difference(a, b, "a", "b") ==
        "first difference at byte " + std::to_string(offset + 2) +  // 1.0f is 00 00 80 3f
            ", in the plane M, element [3][5]: a has 0x00000000 (0), b has 0x3f800000 (1)");

  const std::string later = io::encode(io::bob_checkpoint_identity(), 20, model.state().planes);
  CHECK(bob::describe_difference(a, later, "a", "b").find(", in the step") != std::string::npos);
  CHECK(bob::describe_difference(a, a.substr(0, 100), "a", "b") ==
        "first difference at byte 100 (a is 786695 bytes, b is 100): one file ends there");
}

TEST_CASE("envelope_fields follows the file's own lengths and stops where a truncated file ends") {
  const std::string bytes = checkpoint_bytes(bob::Model(default_record(), Device::cpu()));
  const std::vector<bob::EnvelopeField> fields = bob::envelope_fields(bytes);
  REQUIRE(fields.size() == 19);  // magic, format, 4 x (length, identity), 5 numbers, 3 planes, CRC
  CHECK(fields.front().name == "magic");
  CHECK(fields[3].name == "schema identity");
  CHECK(fields[15].name == "plane P");
  CHECK(fields.back().name == "CRC-32");
  CHECK(fields.back().end == bytes.size());
  const std::vector<bob::EnvelopeField> cut = bob::envelope_fields(bytes.substr(0, 1000));
  CHECK(cut.back().name == "chunk count");
}

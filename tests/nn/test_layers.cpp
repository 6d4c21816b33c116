// tests/nn: the layer library. Names and order against PyTorch's state_dict keys, train/eval,
// initialisers (known draws, statistics, determinism), every layer's forward against PyTorch's
// (tests/nn/nn_values.hpp, from tests/fixtures/gen_nn_values.py) in f64 and f32, the gradient
// check of a tiny Block, and errors by message.
#include <doctest/doctest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <numeric>
#include <set>

#include "messages.hpp"
#include "nn_testing.hpp"
#include "nn_values.hpp"
#include "tapegrad/graph/gradcheck.hpp"
#include "tapegrad/nn/init.hpp"
#include "tapegrad/ops/ops.hpp"

using namespace tapegrad;
using tapegrad::testing::fill;
using tapegrad::testing::message_of;
using tapegrad::testing::Place;
using tapegrad::testing::TinyGPT;

namespace {

std::vector<std::string> names_of(const nn::Module& m) {
  std::vector<std::string> names;
  for (const auto& [name, _] : m.named_parameters()) names.push_back(name);
  return names;
}

// Every element's bits, widened: two tensors of one dtype are equal bit for bit when these are.
std::vector<uint64_t> bits(const Tensor& t) {
  std::vector<uint64_t> out;
  if (t.dtype() == DType::f64) {
    for (int64_t i = 0; i < t.numel(); ++i) out.push_back(std::bit_cast<uint64_t>(t.data<double>()[i]));
  } else {
    for (int64_t i = 0; i < t.numel(); ++i) out.push_back(std::bit_cast<uint32_t>(t.data<float>()[i]));
  }
  return out;
}

// Every element within tol * (1 + |expected|) of the expected values.
void check_values(const Tensor& got, const std::vector<double>& expected, double tol) {
  const std::vector<double> v = got.to_doubles();
  REQUIRE(v.size() == expected.size());
  double worst = 0;
  for (size_t i = 0; i < v.size(); ++i) worst = std::max(worst, std::abs(v[i] - expected[i]) / (1 + std::abs(expected[i])));
  CHECK_MESSAGE(worst <= tol, "largest scaled difference " << worst << " over tolerance " << tol);
}

struct Stats {
  double mean, std, lo, hi;
};
Stats stats(const Tensor& t) {
  const std::vector<double> v = t.to_doubles();
  const double n = static_cast<double>(v.size());
  const double mean = std::accumulate(v.begin(), v.end(), 0.0) / n;
  double ss = 0;
  for (double x : v) ss += (x - mean) * (x - mean);
  return {mean, std::sqrt(ss / n), *std::min_element(v.begin(), v.end()), *std::max_element(v.begin(), v.end())};
}

}  // namespace

TEST_CASE("named_parameters of a 2-block GPT: PyTorch's state_dict keys, order and graph labels") {
  Place place(1);
  TinyGPT model(place.f, 11, 6, 8, 2, 2);
  std::vector<std::string> expected = {"wte.weight", "wpe.weight"};
  for (int l = 0; l < 2; ++l)
    for (const char* key : nn_values::block_keys) expected.push_back("h." + std::to_string(l) + "." + key);
  for (const char* key : {"ln_f.weight", "ln_f.bias", "lm_head.weight"}) expected.push_back(key);
  CHECK(names_of(model) == expected);

  // each parameter is a graph parameter labelled by its full name, in the graph's order too
  const auto named = model.named_parameters();
  CHECK(place.g.parameter_count() == named.size());
  std::set<int32_t> ids;
  for (const auto& [name, p] : named) {
    CHECK(p.requires_grad());
    CHECK(p.label() == name);
    ids.insert(p.id());
  }
  CHECK(ids.size() == named.size());
  CHECK(model.parameters().size() == named.size());
  // shapes as PyTorch's: Linear (out, in); the MLP's hidden size 4 C
  CHECK(model.h[1].attn.c_attn.weight.shape() == Shape{24, 8});
  CHECK(model.h[1].mlp.c_fc.weight.shape() == Shape{32, 8});
  CHECK(model.h[1].mlp.c_proj.bias.shape() == Shape{8});
  CHECK(!model.lm_head.bias.defined());
  const int64_t per_block = 2 * 8 + (24 * 8 + 24) + (8 * 8 + 8) + 2 * 8 + (32 * 8 + 32) + (8 * 32 + 8);
  CHECK(model.parameter_count() == 11 * 8 + 6 * 8 + 2 * per_block + 2 * 8 + 8 * 11);

  // a child's names are relative to it, its labels and path are the tree's
  const nn::Block& second = model.h[1];
  CHECK(second.path() == "h.1");
  CHECK(second.attn.c_proj.path() == "h.1.attn.c_proj");
  CHECK(names_of(second).front() == "ln_1.weight");
  CHECK(second.named_parameters().front().second.label() == "h.1.ln_1.weight");
  CHECK(model.children().size() == 5);
  CHECK(model.children()[2].first == "h");
  CHECK(model.h.children()[1].first == "1");

  // parameters persist across clear(), and a forward labels its values with the layers' names
  place.g.clear();
  CHECK(place.g.parameter_count() == named.size());
  Var ids_in = place.g.input(Tensor::from_vector(std::vector<int32_t>{1, 2, 3, 4, 5, 6}, Shape{2, 3}));
  Var logits = model(ids_in);
  CHECK(logits.shape() == Shape{2, 3, 11});
  CHECK(logits.label() == "lm_head");
  std::set<std::string> labels;
  for (size_t id = 0; id < place.g.value_count(); ++id) labels.insert(place.g.value(static_cast<int32_t>(id)).label);
  for (const char* label : {"wte", "h.0.ln_1", "h.0.attn.c_attn", "h.1.attn", "h.1.mlp.c_fc", "h.1.mlp", "h.1", "ln_f"})
    CHECK_MESSAGE(labels.count(label) == 1, label);
}

TEST_CASE("each forward records its nodes in its module's name scope, nested layers in their own") {
  Place place(1);
  TinyGPT model(place.f, 11, 6, 8, 2, 2);
  Graph& g = place.g;
  g.clear();
  Var ids = g.input(Tensor::from_vector(std::vector<int32_t>{1, 2, 3, 4, 5, 6}, Shape{2, 3}));
  Var loss = ops::cross_entropy(model(ids), g.input(Tensor::from_vector(std::vector<int32_t>{2, 3, 4, 5, 6, 7}, Shape{2, 3})));
  // every node's op and scope, in tape order
  std::vector<std::pair<std::string, std::string>> nodes;
  for (const Node& n : g.nodes()) nodes.emplace_back(n.op, g.var(n.output).scope());
  auto has = [&](const std::string& op, const std::string& scope) {
    return std::count(nodes.begin(), nodes.end(), std::make_pair(op, scope));
  };
  CHECK(has("gather", "wte") == 1);  // ops::embedding is a gather and a reshape
  CHECK(has("gather", "wpe") == 1);
  CHECK(has("add", "") == 1);              // wte(ids) + wpe(pos): the GPT's own forward, no scope
  CHECK(has("cross_entropy", "") == 1);
  for (const std::string b : {"h.0", "h.1"}) {
    CAPTURE(b);
    CHECK(has("layer_norm", b + ".ln_1") == 1);
    CHECK(has("layer_norm", b + ".ln_2") == 1);
    CHECK(has("linear", b + ".attn.c_attn") == 1);
    CHECK(has("linear", b + ".attn.c_proj") == 1);
    CHECK(has("qkv_attention", b + ".attn") == 1);
    CHECK(has("gelu_erf", b + ".mlp") == 1);
    CHECK(has("linear", b + ".mlp.c_fc") == 1);
    // the two residual additions: the first made by ln_2's pass over the stream (LayerNorm::residual)
    CHECK(has("add", b + ".ln_2") == 1);
    CHECK(has("add", b) == 1);
  }
  CHECK(has("layer_norm", "ln_f") == 1);
  CHECK(has("linear", "lm_head") == 1);
  for (const auto& [op, scope] : nodes) CHECK_MESSAGE(scope != "h", op);  // a ModuleList has no forward
  CHECK(ids.scope() == "");
  CHECK(model.h[0].attn.c_attn.weight.scope() == "");  // made before the tree knew its path
  g.backward(loss);                                    // scopes change nothing in the backward
  CHECK(model.wte.weight.grad().defined());
}

TEST_CASE("registration refuses bad and repeated names, and a child registered twice") {
  Place place;
  struct Bad : nn::Module {
    explicit Bad(nn::Factory& f) : a(f, 2, 2), b(f, 2, 2) {}
    const char* kind() const override { return "Bad"; }
    void add(const std::string& name, nn::Module& m) { register_module(name, m); }
    void param(const std::string& name, Graph& g) { register_parameter(name, Tensor::zeros({2}, DType::f32), g); }
    nn::Linear a, b;
  } bad(place.f);
  bad.add("a", bad.a);
  CHECK(message_of([&] { bad.add("a", bad.b); }) == "[Bad] 'a' is already a child of this module");
  CHECK(message_of([&] { bad.param("a", place.g); }) == "[Bad] 'a' is already a child of this module");
  CHECK(message_of([&] { bad.add("x.y", bad.b); }) ==
        "[Bad] 'x.y' is not a name: names are not empty and hold no '.' or white space");
  CHECK(message_of([&] { bad.add("", bad.b); }) ==
        "[Bad] '' is not a name: names are not empty and hold no '.' or white space");
  CHECK(message_of([&] { bad.add("b b", bad.b); }) ==
        "[Bad] 'b b' is not a name: names are not empty and hold no '.' or white space");
  CHECK(message_of([&] { bad.add("again", bad.a); }) ==
        "[Bad] the Linear to register as 'again' is already the child 'a' of another module");
  bad.param("w", place.g);
  CHECK(message_of([&] { bad.param("w", place.g); }) == "[Bad] 'w' is already a parameter of this module");
  CHECK(names_of(bad) == std::vector<std::string>{"w", "a.weight", "a.bias"});  // own parameters first
}

TEST_CASE("train and eval reach every descendant; dropout is the identity in eval") {
  Place place(3, DType::f64);
  TinyGPT model(place.f, 11, 6, 8, 2, 2, /*dropout=*/0.5);
  auto all_modes = [&](bool expected) {
    std::vector<const nn::Module*> stack = {&model};
    int seen = 0;
    while (!stack.empty()) {
      const nn::Module* m = stack.back();
      stack.pop_back();
      CHECK(m->training() == expected);
      ++seen;
      for (const auto& [_, child] : m->children()) stack.push_back(child);
    }
    return seen;
  };
  CHECK(all_modes(true) == 6 + 2 * 11);  // every module, dropouts included
  model.eval();
  all_modes(false);
  CHECK(!model.h[1].mlp.dropout.training());

  // eval: the Block with dropout 0.5 gives PyTorch's values of the Block without dropout
  Place same(0, DType::f64);
  nn::Block block(same.f, 8, 2, 0.5);
  fill(block);
  block.eval();
  Var x = same.g.input(testing::inputs({2, 3, 8}, DType::f64));
  Var ve = same.g.input(testing::value_embeds({2, 3, 8}, DType::f64));
  const uint64_t offset = same.gen.offset();
  check_values(block(x, ve).value(), nn_values::block_ve, 1e-12);
  CHECK(same.gen.offset() == offset);  // eval draws nothing

  // train: masks are drawn (the generator moves), each call its own, repeatable from the seed
  block.train();
  const std::vector<double> first = block(x, ve).value().to_doubles();
  CHECK(same.gen.offset() > offset);
  const std::vector<double> second = block(x, ve).value().to_doubles();
  CHECK(first != second);
  same.gen.manual_seed(0);
  same.gen.take(offset);
  CHECK(block(x, ve).value().to_doubles() == first);

  nn::Dropout drop(same.f, 0.25);
  Var y = drop(x);
  int zeros = 0;
  for (double v : y.value().to_doubles()) zeros += v == 0.0;
  CHECK(zeros > 0);
  drop.eval();
  CHECK(drop(x).id() == x.id());  // the identity: x itself
}

TEST_CASE("initialisers: Philox draws as the Note says, PyTorch's defaults, determinism by seed") {
  Graph g;
  Generator gen(1234);
  Tensor u = Tensor::empty({5}, DType::f64), n = Tensor::empty({5}, DType::f64);
  nn::init::uniform_(u, -0.5, 2.0, gen);
  CHECK(gen.offset() == 3);
  nn::init::normal_(n, 1.0, 2.0, gen);
  CHECK(gen.offset() == 6);
  check_values(u, nn_values::init_uniform, 1e-15);
  check_values(n, nn_values::init_normal, 1e-15);

  // statistics of the defaults: Linear U(-1/sqrt(in), 1/sqrt(in)), Embedding N(0, 1), norms 1 and 0
  Place place(7);
  nn::Linear linear(place.f, 256, 512);
  const double bound = 1.0 / 16;
  for (const Tensor& t : {linear.weight.value(), linear.bias.value()}) {
    const Stats s = stats(t);
    const double count = static_cast<double>(t.numel());
    CHECK(std::abs(s.mean) < 5 * bound / std::sqrt(3 * count));
    CHECK(std::abs(s.std - bound / std::sqrt(3.0)) < 0.05 * bound / std::sqrt(3.0));
    CHECK(s.lo >= -bound);
    CHECK(s.hi <= bound);
    CHECK(s.lo < -0.98 * bound);
    CHECK(s.hi > 0.98 * bound);
  }
  nn::Embedding embedding(place.f, 512, 256);
  const Stats e = stats(embedding.weight.value());
  CHECK(std::abs(e.mean) < 5.0 / std::sqrt(512.0 * 256));
  CHECK(std::abs(e.std - 1.0) < 0.01);
  CHECK(e.hi > 4.0);  // tails: 131072 draws reach beyond 4 sigma
  nn::LayerNorm ln(place.f, 6);
  CHECK(ln.weight.value().to_doubles() == std::vector<double>(6, 1.0));
  CHECK(ln.bias.value().to_doubles() == std::vector<double>(6, 0.0));
  Tensor w = Tensor::empty({300, 200}, DType::f32);
  nn::init::normal_(w, 0.0, 0.02, gen);
  CHECK(std::abs(stats(w).std - 0.02) < 0.0004);
  nn::init::kaiming_uniform_(w, gen, 0.0, nn::init::FanMode::fan_out);  // bound sqrt(2) sqrt(3 / 300)
  CHECK(stats(w).hi <= std::sqrt(6.0 / 300));
  CHECK(stats(w).hi > 0.99 * std::sqrt(6.0 / 300));
  CHECK(nn::init::fans(Shape{16, 3, 5, 5}) == std::pair<int64_t, int64_t>{75, 400});

  // one seed, one model, the same bits; another seed, other bits; f32 is the f64 draw rounded
  auto build = [](uint64_t seed, DType dtype) {
    auto place = std::make_unique<Place>(seed, dtype);
    auto model = std::make_unique<TinyGPT>(place->f, 11, 6, 8, 2, 2);
    nn::StateDict sd = nn::state_dict(*model);
    return sd;
  };
  const nn::StateDict a = build(42, DType::f32), b = build(42, DType::f32), c = build(43, DType::f32);
  const nn::StateDict d = build(42, DType::f64);
  REQUIRE(a.size() == c.size());
  bool all_same = true, any_other = false;
  for (size_t i = 0; i < a.size(); ++i) {
    all_same &= bits(a[i].second) == bits(b[i].second);
    any_other |= bits(a[i].second) != bits(c[i].second);
    const std::vector<double> wide = d[i].second.to_doubles(), narrow = a[i].second.to_doubles();
    for (size_t k = 0; k < wide.size(); ++k) CHECK(static_cast<float>(wide[k]) == static_cast<float>(narrow[k]));
  }
  CHECK(all_same);
  CHECK(any_other);

  CHECK(message_of([&] { nn::init::normal_(Tensor::empty({2}, DType::i32), 0, 1, gen); }) ==
        "[init.normal_] fills floating-point tensors, got a i32 (2,) one");
  CHECK(message_of([&] { nn::init::uniform_(w, 1, 0, gen); }) ==
        "[init.uniform_] needs finite bounds lo <= hi, got 1 and 0");
  CHECK(message_of([&] { nn::init::kaiming_uniform_(Tensor::empty({4}, DType::f32), gen); }) ==
        "[init.fans] fan in and fan out need a tensor of at least 2 dimensions, got shape (4,)");
}

TEST_CASE("each layer's forward matches PyTorch's, in f64 and f32") {
  for (const DType dtype : {DType::f64, DType::f32}) {
    const std::string dtype_text = dtype_name(dtype);
    CAPTURE(dtype_text);
    const double tol = dtype == DType::f64 ? 1e-12 : 3e-6;
    Place p(0, dtype);
    auto x_of = [&](const Shape& s) { return p.g.input(testing::inputs(s, dtype)); };
    auto check = [&](Var y, const std::vector<double>& expected) { check_values(y.value(), expected, tol); };

    nn::Linear linear(p.f, 5, 3), linear_nb(p.f, 5, 3, false);
    fill(linear);
    fill(linear_nb);
    check(linear(x_of({2, 5})), nn_values::linear);
    check(linear_nb(x_of({2, 5})), nn_values::linear_no_bias);

    nn::Embedding embedding(p.f, 6, 3);
    fill(embedding);
    Var ids = p.g.input(Tensor::from_vector(std::vector<int64_t>{3, 4, 5, 0, 5, 0, 1, 2}, Shape{2, 4}));
    check(embedding(ids), nn_values::embedding);

    nn::LayerNorm ln(p.f, 5), ln_nb(p.f, 5, 1e-5, true, false), ln_na(p.f, 5, 1e-3, false);
    fill(ln);
    fill(ln_nb);
    CHECK(ln_na.parameters().empty());
    check(ln(x_of({2, 5})), nn_values::layer_norm);
    check(ln_nb(x_of({2, 5})), nn_values::layer_norm_no_bias);
    check(ln_na(x_of({2, 5})), nn_values::layer_norm_no_affine);

    nn::RMSNorm rms(p.f, 5);  // eps: the dtype's machine epsilon, as torch's eps=None
    fill(rms);
    check(rms(x_of({2, 5})), dtype == DType::f64 ? nn_values::rms_norm : nn_values::rms_norm_f32);

    nn::MLP mlp(p.f, 4, 8), fused(p.f, 4, 8, nn::Activation::gelu, 0.0, true, /*fused=*/true);
    fill(mlp);
    fill(fused);
    check(mlp(x_of({2, 3, 4})), nn_values::mlp);
    check(fused(x_of({2, 3, 4})), nn_values::mlp);

    nn::CausalSelfAttention attn(p.f, 8, 2);
    fill(attn);
    check(attn(x_of({2, 3, 8})), nn_values::attention);
    check(attn(x_of({2, 3, 8}), p.g.input(testing::value_embeds({2, 3, 8}, dtype))), nn_values::attention_ve);
    check(attn(x_of({2, 3, 8}), p.g.input(testing::value_embeds({3, 8}, dtype))), nn_values::attention_ve_row);

    nn::Block block(p.f, 8, 2);
    fill(block);
    check(block(x_of({2, 3, 8}), p.g.input(testing::value_embeds({2, 3, 8}, dtype))), nn_values::block_ve);
  }
}

TEST_CASE("gradient check (f64) of a tiny Block with value embeddings from an Embedding") {
  Place p(5, DType::f64);
  nn::Block block(p.f, 4, 2);
  nn::Embedding values(p.f, 5, 4);
  // weights of a realistic spread (the defaults leave the norms at exactly 1 and 0)
  for (const Var& w : block.parameters()) nn::init::normal_(w, 0.0, 0.5, p.gen);
  Tensor x = testing::inputs({2, 3, 4}, DType::f64);
  Tensor ids = Tensor::from_vector(std::vector<int64_t>{1, 4, 1, 0, 2, 4}, Shape{2, 3});
  Tensor r = testing::value_embeds({2, 3, 4}, DType::f64);
  auto loss = [&](Graph& g) {
    Var y = block(g.input(x), values(g.input(ids)));
    return ops::sum(y * g.input(r));
  };
  const GradcheckResult check = gradcheck(p.g, loss);
  CAPTURE(check.str());
  CHECK(check.max_error() < 1e-8);
  // every parameter took part: block and table gradients are nonzero
  for (const auto& [name, v] : block.named_parameters()) {
    const std::vector<double> grad = v.grad().to_doubles();
    CHECK_MESSAGE(std::any_of(grad.begin(), grad.end(), [](double d) { return d != 0; }), name);
  }
  CHECK(values.weight.grad().defined());
}

TEST_CASE("a fused MLP (ops::mlp) gives the unfused one's values and gradients, bit for bit in f32") {
  for (nn::Activation act : {nn::Activation::gelu, nn::Activation::gelu_tanh, nn::Activation::silu})
    for (bool bias : {false, true}) {
      CAPTURE(static_cast<int>(act));
      CAPTURE(bias);
      Place p(3, DType::f32);
      nn::MLP plain(p.f, 8, 32, act, 0.0, bias), fused(p.f, 8, 32, act, 0.0, bias, /*fused=*/true);
      fill(plain);
      fill(fused);
      Var x = p.g.parameter(testing::inputs({2, 3, 8}, DType::f32));
      Var yp = plain(x), yf = fused(x);
      CHECK(yf.value().to_doubles() == yp.value().to_doubles());
      p.g.backward(ops::sum(yp * yp) + ops::sum(yf * yf));
      const auto a = plain.named_parameters(), b = fused.named_parameters();
      REQUIRE(a.size() == b.size());
      for (size_t k = 0; k < a.size(); ++k) {
        CAPTURE(a[k].first);
        CHECK(a[k].first == b[k].first);
        CHECK(a[k].second.grad().to_doubles() == b[k].second.grad().to_doubles());
      }
    }
  Place p;
  CHECK(message_of([&] { nn::MLP(p.f, 8, 16, nn::Activation::relu_squared, 0.0, true, true); }) ==
        "[MLP] a fused MLP takes gelu, gelu_tanh, relu or silu; relu_squared is two ops (relu, then square)");
}

TEST_CASE("layer errors name the layer, its path and both shapes") {
  Place p;
  TinyGPT model(p.f, 11, 6, 8, 2, 1);
  Var x = p.g.input(Tensor::zeros({2, 3, 6}, DType::f32));
  CHECK(message_of([&] { model.h[0].attn.c_attn(x); }) == "[Linear h.0.attn.c_attn] x must be (..., 8), got (2, 3, 6)");
  CHECK(message_of([&] { model.h[0].attn(x); }) == "[CausalSelfAttention h.0.attn] x must be (B, T, 8), got (2, 3, 6)");
  CHECK(message_of([&] { model.ln_f(x); }) == "[LayerNorm ln_f] x must be (..., 8), got (2, 3, 6)");
  Var x8 = p.g.input(Tensor::zeros({2, 3, 8}, DType::f32));
  Var ve = p.g.input(Tensor::zeros({3, 3, 8}, DType::f32));
  CHECK(message_of([&] { model.h[0](x8, ve); }) ==
        "[CausalSelfAttention h.0.attn] value_embed of shape (3, 3, 8) does not broadcast to v's shape (2, 3, 8)");

  const size_t before = p.g.parameter_count();
  CHECK(message_of([&] { nn::Linear(p.f, 0, 3); }) == "[Linear] in_features must be positive, got 0");
  CHECK(message_of([&] { nn::Block(p.f, 8, 3); }) == "[Block] dim 8 is not a multiple of heads 3");
  CHECK(message_of([&] { nn::CausalSelfAttention(p.f, 8, 0); }) == "[CausalSelfAttention] heads must be positive, got 0");
  CHECK(message_of([&] { nn::MLP(p.f, 8, 16, nn::Activation::gelu, 1.5); }) ==
        "[MLP] dropout p must be a probability in [0, 1], got 1.5");
  CHECK(message_of([&] { nn::Block(p.f, int64_t{1} << 62, 1); }) ==
        "[Block] 4 x dim 4611686018427387904 overflows 64 bits");
  CHECK(message_of([&] { nn::Linear(p.f, int64_t{1} << 32, int64_t{1} << 32); }) ==
        "[shape] (4294967296, 4294967296) has more elements than fit in 64 bits");
  // 4 TiB of weight: refused by the layer and the parameter, with its shape and bytes (issue 37)
  CHECK(message_of([&] { nn::Linear(p.f, int64_t{1} << 20, int64_t{1} << 20); }) ==
        "[Linear] weight (f32, shape (1048576, 1048576)) needs 4398046511104 bytes (4.0 TiB), more than this host's "
        "memory and swap (" + testing::host_memory() + ")");
  CHECK_THROWS_AS(nn::Linear(p.f, int64_t{1} << 20, int64_t{1} << 20), OutOfMemory);
  CHECK(p.g.parameter_count() == before);  // a refused layer adds no parameter
  Generator gen;
  nn::Factory half{p.g, gen, DType::bf16};
  CHECK(message_of([&] { nn::Linear(half, 2, 2); }) == "[Linear] parameters are f32 or f64, the factory asks for bf16");
}

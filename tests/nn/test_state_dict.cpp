// tests/nn: state dicts. Round trips bit for bit (f32, f64 and every other dtype), every refusal by
// its whole message with the file and the model unchanged, damaged and malformed files, and the
// safetensors export.
#include <doctest/doctest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <functional>
#include <set>
#include <limits>

#include "io/temp_dir.hpp"
#include "messages.hpp"
#include "nn_testing.hpp"
#include "tapegrad/io/envelope.hpp"
#include "tapegrad/optim/adamw.hpp"

using namespace tapegrad;
using tapegrad::testing::message_of;
using tapegrad::testing::Place;
using tapegrad::testing::TempDir;
using tapegrad::testing::TinyGPT;

namespace {

// The raw bytes of every tensor, in order: equal when the state dicts are equal bit for bit.
std::string raw(const nn::StateDict& sd) {
  std::string out;
  for (const auto& t : sd) {
    out += t.first + "|" + dtype_name(t.second.dtype()) + t.second.shape().str() + "|";
    out.append(static_cast<const char*>(t.second.raw_data()), t.second.nbytes());
  }
  return out;
}

// A host tensor of `dtype` holding `bytes` (numel * size of them).
Tensor from_bytes(const std::string& bytes, const Shape& shape, DType dtype) {
  Tensor t = Tensor::empty(shape, dtype);
  REQUIRE(bytes.size() == t.nbytes());
  if (!bytes.empty()) std::memcpy(t.raw_data(), bytes.data(), bytes.size());
  return t;
}

// What load_state_dict(path, model) throws (a RefusedFile, but for a file too large to read), checking that neither the file nor the model moved.
std::string refusal(const std::string& path, nn::Module& model) {
  const std::string file = io::read_file(path);
  const std::string before = raw(nn::state_dict(model));
  std::string message = "(no error)";
  try {
    nn::load_state_dict(path, model);
  } catch (const Error& e) {
    message = e.what();
  }
  CHECK(io::read_file(path) == file);
  CHECK(raw(nn::state_dict(model)) == before);
  return message;
}

// An envelope whose schema is `schema` and whose single plane holds `plane` (a multiple of 4 bytes).
void write_envelope(const std::string& path, const std::string& schema, const std::string& plane) {
  io::EnvelopeIdentity id;
  id.schema = schema;
  id.chunk_count = 1;
  id.chunk_bytes = id.payload_bytes = plane.size();
  std::vector<std::vector<float>> planes(1, std::vector<float>(plane.size() / 4));
  if (!plane.empty()) std::memcpy(planes[0].data(), plane.data(), plane.size());
  io::write(path, id, 0, planes);
}

}  // namespace

TEST_CASE("a model's state dict round-trips through a file bit for bit, f32 and f64") {
  for (const DType dtype : {DType::f32, DType::f64}) {
    const std::string dtype_text = dtype_name(dtype);
    CAPTURE(dtype_text);
    TempDir dir;
    const std::string path = dir.file("model.sd");
    Place a_place(1, dtype), b_place(2, dtype);
    TinyGPT a(a_place.f, 11, 6, 8, 2, 2), b(b_place.f, 11, 6, 8, 2, 2);
    // values a float format carries at its edges, in wte's row 0: a NaN with a payload, -0, a
    // denormal, infinity
    Tensor wte = a.wte.weight.value();
    if (dtype == DType::f64) {
      double* w = wte.mutable_data<double>();
      w[0] = std::bit_cast<double>(uint64_t{0x7ff8dead0000beefull});
      w[1] = -0.0;
      w[2] = std::numeric_limits<double>::denorm_min();
      w[3] = -std::numeric_limits<double>::infinity();
    } else {
      float* w = wte.mutable_data<float>();
      w[0] = std::bit_cast<float>(0x7fc0beefu);
      w[1] = -0.0f;
      w[2] = std::numeric_limits<float>::denorm_min();
      w[3] = -std::numeric_limits<float>::infinity();
    }
    CHECK(raw(nn::state_dict(a)) != raw(nn::state_dict(b)));
    const nn::StateDictFile written{"adamw lr=3e-4", "shakespeare_char", "seed 1", 250};
    nn::save_state_dict(path, a, written);
    CHECK(dir.entries() == std::set<std::string>{"model.sd"});  // no temporary file left

    const nn::StateDictFile info = nn::load_state_dict(path, b);
    CHECK(raw(nn::state_dict(b)) == raw(nn::state_dict(a)));
    CHECK(info.learner == written.learner);
    CHECK(info.data == written.data);
    CHECK(info.seed == written.seed);
    CHECK(info.step == 250);
    // the loaded model computes what the saved one does (ids that miss row 0), and saves the same bytes
    const Tensor ids = Tensor::from_vector(std::vector<int32_t>{1, 2, 3, 4, 5, 6}, Shape{2, 3});
    CHECK(raw({{"y", b(b_place.g.input(ids)).value()}}) == raw({{"y", a(a_place.g.input(ids)).value()}}));
    nn::save_state_dict(dir.file("again.sd"), b, written);
    CHECK(io::read_file(dir.file("again.sd")) == io::read_file(path));
  }
}

TEST_CASE("a model and its AdamW in one file: a resumed run equals an uninterrupted one bit for bit") {
  TempDir dir;
  const std::string path = dir.file("run.ckpt");
  const Tensor ids = Tensor::from_vector(std::vector<int32_t>{1, 2, 3, 4, 5, 6}, Shape{2, 3});
  const Tensor targets = Tensor::from_vector(std::vector<int32_t>{2, 3, 4, 5, 6, 7}, Shape{2, 3});
  auto train = [&](Place& place, TinyGPT& model, optim::AdamW& opt, int steps) {
    for (int s = 0; s < steps; ++s) {
      place.g.clear();
      place.g.zero_grad();
      place.g.backward(ops::cross_entropy(model(place.g.input(ids)), place.g.input(targets)));
      opt.step();
    }
  };
  Place a_place(6);
  TinyGPT a(a_place.f, 11, 6, 8, 2, 2);
  optim::AdamW a_opt(a.parameters(), {.lr = 1e-2});
  train(a_place, a, a_opt, 2);
  nn::StateDict all = nn::prefixed(nn::state_dict(a), "model.");
  for (auto& entry : a_opt.state_tensors()) all.push_back(entry);
  nn::save_tensors(path, all, {"adamw lr=1e-2", "", "seed 6", a_opt.step_count()});
  train(a_place, a, a_opt, 3);

  Place b_place(99);
  TinyGPT b(b_place.f, 11, 6, 8, 2, 2);
  optim::AdamW b_opt(b.parameters(), {.lr = 1e-2});
  nn::StateDictFile info;
  const nn::StateDict back = nn::load_tensors(path, &info);
  CHECK(info.step == 2);
  nn::load_state_dict(b, nn::under(back, "model."));
  b_opt.load_state(nn::under(back, "adamw.", false));
  train(b_place, b, b_opt, 3);
  CHECK(raw(nn::state_dict(b)) == raw(nn::state_dict(a)));
  CHECK(nn::under(back, "model.").size() == a.named_parameters().size());
}

TEST_CASE("a generator's place in its stream saves and loads: the same dropout masks after a resume") {
  Place place(0, DType::f64);
  nn::Dropout drop(place.f, 0.5);
  Var x = place.g.input(testing::inputs({64}, DType::f64));
  place.gen.manual_seed(uint64_t{1} << 63);
  drop(x);
  const nn::StateDict saved = nn::generator_state(place.gen, "dropout_rng");
  REQUIRE(saved.size() == 2);
  CHECK(saved[0].first == "dropout_rng.seed");
  CHECK(saved[1].first == "dropout_rng.offset");
  const std::vector<double> next = drop(x).value().to_doubles();
  Generator other(5);
  nn::load_generator_state(other, saved, "dropout_rng");
  CHECK(other.seed() == uint64_t{1} << 63);
  CHECK(other.offset() == 16);
  place.gen.manual_seed(5);
  nn::load_generator_state(place.gen, saved, "dropout_rng");
  CHECK(drop(x).value().to_doubles() == next);
  CHECK(message_of([&] { nn::load_generator_state(other, {saved[0]}, "dropout_rng"); }) ==
        "[state_dict] missing tensor 'dropout_rng.offset'");
  CHECK(message_of([&] { nn::load_generator_state(other, {saved[0], {"dropout_rng.offset", Tensor::zeros({1}, DType::i64)}}, "dropout_rng"); }) ==
        "[state_dict] 'dropout_rng.offset' must be a () i64 tensor, got i64 (1,)");
  CHECK(other.offset() == 16);  // unchanged by the refusals
}

TEST_CASE("save_tensors and load_tensors carry every dtype, any shape and the order, bit for bit") {
  TempDir dir;
  const std::string path = dir.file("mixed.sd");
  const nn::StateDict tensors = {
      {"bf16", from_bytes(std::string("\x80\x3f\x01\x7f\xff\xff\x00\x80\x49\x40", 10), {5}, DType::bf16)},
      {"mask", from_bytes(std::string("\x01\x00\xfe", 3), {3}, DType::u8)},
      {"ids", Tensor::from_vector(std::vector<int64_t>{-1, INT64_MAX, INT64_MIN, 7}, Shape{2, 2})},
      {"half", from_bytes(std::string("\x00\x3c", 2), {}, DType::f16)},
      {"empty", Tensor::empty({0, 4}, DType::f32)},
      {"opt.m.h.0.attn.c_attn.weight", Tensor::from_vector(std::vector<double>{0.1, -2.5e300}, Shape{1, 2, 1})},
      {"i32", Tensor::from_vector(std::vector<int32_t>{5}, Shape{1})},
  };
  nn::save_tensors(path, tensors, {"", "", "", 3});
  nn::StateDictFile info;
  const nn::StateDict back = nn::load_tensors(path, &info);
  CHECK(raw(back) == raw(tensors));
  CHECK(info.step == 3);

  // the layout is the schema identity, readable without tapegrad
  const io::EnvelopeContents contents = io::inspect(io::read_file(path), path);
  CHECK(contents.identity.schema ==
        "tapegrad state dict 1\n"
        "bf16 bf16 [5] 0 10\n"
        "mask u8 [3] 10 3\n"
        "ids i64 [2,2] 13 32\n"
        "half f16 [] 45 2\n"
        "empty f32 [0,4] 47 0\n"
        "opt.m.h.0.attn.c_attn.weight f64 [1,2,1] 47 16\n"
        "i32 i32 [1] 63 4\n");
  CHECK(contents.identity.chunk_count == 1);
  CHECK(contents.identity.chunk_bytes == 68);  // 67 bytes, padded to 4

  CHECK(message_of([&] { nn::save_tensors(path, {{"a b", Tensor::zeros({1}, DType::f32)}}); }) ==
        "[state_dict] cannot save " + path + ": 'a b' is not a tensor name: names are not empty and hold no white "
        "space or control characters");
  CHECK(message_of([&] { nn::save_tensors(path, {{"a", Tensor::zeros({1}, DType::f32)}, {"a", Tensor::zeros({1}, DType::f32)}}); }) ==
        "[state_dict] cannot save " + path + ": tensor 'a' is given twice");
  CHECK(message_of([&] { nn::save_tensors(path, {{"a", Tensor()}}); }) ==
        "[state_dict] cannot save " + path + ": tensor 'a' is empty (undefined)");
  CHECK(raw(nn::load_tensors(path)) == raw(tensors));  // a refused save wrote nothing
}

TEST_CASE("loading refuses a missing, unexpected, mis-shaped or mis-typed tensor by name, changing nothing") {
  TempDir dir;
  Place place(4);
  TinyGPT model(place.f, 11, 6, 8, 2, 2);
  const nn::StateDict good = nn::state_dict(model);
  const std::string path = dir.file("model.sd");
  auto save_with = [&](const std::function<void(nn::StateDict&)>& change) {
    nn::StateDict sd = good;
    change(sd);
    nn::save_tensors(path, sd);
  };
  auto erase = [](nn::StateDict& sd, const std::string& name) {
    std::erase_if(sd, [&](const auto& t) { return t.first == name; });
  };
  auto replace = [](nn::StateDict& sd, const std::string& name, Tensor t) {
    for (auto& e : sd)
      if (e.first == name) e.second = std::move(t);
  };
  const std::string where = "[state_dict] " + path + ": ";

  save_with([&](nn::StateDict& sd) { erase(sd, "h.1.attn.c_attn.weight"); });
  CHECK(refusal(path, model) == where + "missing tensor 'h.1.attn.c_attn.weight'");
  CHECK_THROWS_AS(nn::load_state_dict(path, model), RefusedFile);
  save_with([&](nn::StateDict& sd) { sd.push_back({"lm_head.bias", Tensor::zeros({11}, DType::f32)}); });
  CHECK(refusal(path, model) == where + "unexpected tensor 'lm_head.bias'");
  save_with([&](nn::StateDict& sd) { replace(sd, "wte.weight", Tensor::zeros({65, 8}, DType::f32)); });
  CHECK(refusal(path, model) == where + "'wte.weight' has shape (65, 8) in the file but (11, 8) in the model");
  save_with([&](nn::StateDict& sd) { replace(sd, "ln_f.bias", Tensor::zeros({8}, DType::f64)); });
  CHECK(refusal(path, model) == where + "'ln_f.bias' has dtype f64 in the file but f32 in the model");
  save_with([&](nn::StateDict& sd) {
    erase(sd, "h.0.ln_1.weight");
    replace(sd, "wpe.weight", Tensor::zeros({6}, DType::f64));
    sd.insert(sd.begin(), {"extra", Tensor::zeros({1}, DType::f32)});
  });
  CHECK(refusal(path, model) == where +
                                    "'wpe.weight' has shape (6,) in the file but (6, 8) in the model; "
                                    "'wpe.weight' has dtype f64 in the file but f32 in the model; "
                                    "missing tensor 'h.0.ln_1.weight'; unexpected tensor 'extra'");
  // a model of other sizes: every difference named, the first of them here
  Place other_place(4);
  TinyGPT other(other_place.f, 11, 6, 8, 2, 3);
  nn::save_state_dict(path, model);
  CHECK(refusal(path, other).rfind(where + "missing tensor 'h.2.ln_1.weight'; missing tensor 'h.2.ln_1.bias'; ", 0) == 0);

  // the same checks in memory
  nn::StateDict sd = good;
  erase(sd, "ln_f.weight");
  replace(sd, "wte.weight", Tensor::zeros({65, 8}, DType::f32));
  const std::string before = raw(nn::state_dict(model));
  CHECK(message_of([&] { nn::load_state_dict(model, sd); }) ==
        "[state_dict] 'wte.weight' has shape (65, 8) in the state dict but (11, 8) in the model; "
        "missing tensor 'ln_f.weight'");
  sd = good;
  sd.push_back(good[3]);
  CHECK(message_of([&] { nn::load_state_dict(model, sd); }) ==
        "[state_dict] tensor '" + good[3].first + "' appears twice");
  CHECK(raw(nn::state_dict(model)) == before);
  // in any order
  sd = good;
  std::reverse(sd.begin(), sd.end());
  Place third_place(9);
  TinyGPT third(third_place.f, 11, 6, 8, 2, 2);
  nn::load_state_dict(third, sd);
  CHECK(raw(nn::state_dict(third)) == before);
}

TEST_CASE("a damaged, truncated or foreign file is refused, and neither it nor the model changes") {
  TempDir dir;
  Place place(4);
  TinyGPT model(place.f, 11, 6, 8, 2, 1);
  const std::string path = dir.file("model.sd");
  nn::save_state_dict(path, model);
  const std::string file = io::read_file(path);

  std::string damaged = file;
  damaged[damaged.size() / 2] ^= 0x10;  // one bit in the tensors' bytes
  io::write_file_atomic(path, damaged);
  CHECK(refusal(path, model).rfind("checkpoint " + path + " refused: bad CRC-32: stored ", 0) == 0);
  damaged = file;
  damaged[30] ^= 0x01;  // one bit in the schema
  io::write_file_atomic(path, damaged);
  CHECK(refusal(path, model).rfind("checkpoint " + path + " refused: bad CRC-32: stored ", 0) == 0);
  io::write_file_atomic(path, file.substr(0, file.size() - 100));
  CHECK(refusal(path, model).rfind("checkpoint " + path + " refused: truncated in plane 1 of 1", 0) == 0);

  write_envelope(path, "bob checkpoint v1: P M V", std::string(8, '\0'));
  CHECK(refusal(path, model) == "[state_dict] " + path +
                                    ": not a state dict: its schema identity begins 'bob checkpoint v1: P M V', "
                                    "not 'tapegrad state dict 1\\x0a'");

  // layouts that do not add up, each with a valid CRC
  const std::string where = "[state_dict] " + path + ": ";
  const std::string header = "tapegrad state dict 1\n";
  struct Bad {
    std::string schema, plane, message;
  };
  const std::vector<Bad> bad = {
      {header + "w f32 [2] 0\n", std::string(8, '\0'),
       "the schema's line 2 ('w f32 [2] 0') is not 'NAME DTYPE [EXTENTS] OFFSET BYTES'"},
      {header + "w f33 [2] 0 8\n", std::string(8, '\0'), "the schema's line 2 ('w f33 [2] 0 8') names an unknown dtype"},
      {header + "w f32 [2,] 0 8\n", std::string(8, '\0'), "the schema's line 2 ('w f32 [2,] 0 8') has a malformed extent"},
      {header + "w f32 [-2] 0 8\n", std::string(8, '\0'), "the schema's line 2 ('w f32 [-2] 0 8') has a malformed extent"},
      {header + "w f32 [2] 0 12\n", std::string(12, '\0'), "the schema's line 2 ('w f32 [2] 0 12') gives 12 bytes, not the shape's"},
      {header + "w f32 [4294967296,4294967296] 0 8\n", std::string(8, '\0'),
       "the schema's line 2 ('w f32 [4294967296,4294967296] 0 8') has more elements than fit in 64 bits"},
      {header + "w f32 [2] 4 8\n", std::string(12, '\0'), "tensor 'w' starts at byte 4, not where the one before it ends (0)"},
      {header + "w f32 [2] 0 8\nw f32 [1] 8 4\n", std::string(12, '\0'), "tensor 'w' appears twice"},
      {header + "w f32 [2] 0 8\n", std::string(12, '\0'),
       "the schema's 8 bytes of tensors do not fill its 1 plane(s) of 12 bytes"},
      {header + "w u8 [3] 0 3\n", std::string("\x01\x02\x03\x04", 4), "the padding after the tensors' bytes is not zero"},
      {header + "w u8 [3] 0 3", std::string(4, '\0'), "the schema's last line has no newline"},
  };
  for (const Bad& b : bad) {
    write_envelope(path, b.schema, b.plane);
    CHECK(refusal(path, model) == where + b.message);
  }
  // a file far larger than this model's is refused by its size before it is read
  Place big_place(4);
  nn::Linear big(big_place.f, 1000, 1000);
  nn::save_state_dict(path, big);
  const std::string message = refusal(path, model);
  CHECK(message.rfind("cannot read " + path + ": it is ", 0) == 0);
}

TEST_CASE("export_safetensors writes Hugging Face's layout, and import_safetensors reads it back") {
  TempDir dir;
  const std::string path = dir.file("w.safetensors");
  const nn::StateDict tensors = {{"a.weight", Tensor::from_vector(std::vector<float>{1.5f, -2.0f}, Shape{2})},
                                 {"b", Tensor::from_vector(std::vector<double>{3.0}, Shape{1, 1})},
                                 {"ids", Tensor::from_vector(std::vector<int64_t>{7}, Shape{})}};
  nn::export_safetensors(path, tensors);
  const std::string file = io::read_file(path);
  const std::string header =
      "{\"a.weight\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]}, "
      "\"b\": {\"dtype\": \"F64\", \"shape\": [1, 1], \"data_offsets\": [8, 16]}, "
      "\"ids\": {\"dtype\": \"I64\", \"shape\": [], \"data_offsets\": [16, 24]}}";
  const size_t padded = (header.size() + 7) / 8 * 8;
  REQUIRE(file.size() == 8 + padded + 24);
  CHECK(io::load_u64(file, 0) == padded);
  CHECK(file.substr(8, padded) == header + std::string(padded - header.size(), ' '));
  CHECK(io::load_f32(file, 8 + padded + 4) == -2.0f);
  CHECK(raw(nn::import_safetensors(path)) == raw(tensors));

  // a model exported and imported is the model
  Place place(2, DType::f64);
  TinyGPT model(place.f, 11, 6, 8, 2, 1);
  nn::export_safetensors(path, nn::state_dict(model));
  CHECK(raw(nn::import_safetensors(path)) == raw(nn::state_dict(model)));

  const std::string where = "[safetensors] " + path + ": ";
  auto refused = [&](const std::string& bytes) {
    io::write_file_atomic(path, bytes);
    std::string message = "(no error)";
    try {
      nn::import_safetensors(path);
    } catch (const RefusedFile& e) {
      message = e.what();
    }
    return message;
  };
  auto with_header = [](const std::string& json, const std::string& data) {
    std::string out;
    io::append_u64(out, json.size());
    return out + json + data;
  };
  CHECK(refused("abc") == where + "the file is 3 bytes, shorter than a header");
  CHECK(refused(with_header("{}", "").substr(0, 9)) == where + "the header claims 2 bytes, the file has 1 after its size");
  CHECK(refused(with_header("[1]", "")) == where + "the header is not a JSON object");
  CHECK(refused(with_header(R"({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 4]}})", std::string(4, '\0'))) ==
        where + "tensor 'w' of shape (2,) has bytes [0, 4) in a buffer of 4");
  CHECK(refused(with_header(R"({"w": {"dtype": "F64", "shape": [2305843009213693952, 2], "data_offsets": [0, 0]}})", "")) ==
        where + "tensor 'w' of shape (2305843009213693952, 2) has bytes [0, 0) in a buffer of 0");
  CHECK(refused(with_header(R"({"w": {"dtype": "C64", "shape": [], "data_offsets": [0, 8]}})", std::string(8, '\0'))) ==
        where + "tensor 'w' has dtype C64, which tapegrad lacks");
  CHECK(refused(with_header(R"({"w": {"dtype": "U8", "shape": [1]}})", std::string(1, '\0'))) ==
        where + "tensor 'w' has no data_offsets");
  CHECK(refused(with_header(R"({"w": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]}})", std::string(2, '\0'))) ==
        where + "1 bytes follow the last tensor");
  CHECK(refused(with_header(R"({"w": {"dtype": "U8", "shape": [1], "data_offsets": [1, 2]}})", std::string(2, '\0'))) ==
        where + "tensor 'w' does not start where the one before it ends");
  CHECK(refused(with_header(R"({"w": {"dtype": 5}})", "")).rfind(where + "malformed header: ", 0) == 0);
  CHECK(refused(with_header("{", "")).rfind(where + "malformed header: [json] malformed JSON in " + path, 0) == 0);
}

// The engine's door for parts (BackwardContext::accumulate with a region, Note [regions]): a
// slice's backward adds into the part of its input's gradient it covers. The gradients are the
// dense path's bit for bit; the overwrite-bug mode writes the part alone; records and tape dumps
// log the part with its region; a region that does not fit its input is refused by name.
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "messages.hpp"
#include "tapegrad/graph/function.hpp"
#include "tapegrad/graph/graph.hpp"
#include "tapegrad/graph/region.hpp"
#include "tapegrad/io/json.hpp"
#include "tapegrad/kernels/kernels.hpp"
#include "tapegrad/ops/ops.hpp"
#include "tapegrad/tape/tape_dump.hpp"

using namespace tapegrad;
using testing::message_of;

namespace {

Tensor f64(std::vector<double> v, Shape s) { return Tensor::from_doubles(v, s, DType::f64); }
const json::Value& at(const json::Value& v, const char* key) { return *v.find(key); }

// The slice as it was before the door for parts: its backward makes a dense gradient of the whole
// input, zeros but for its part, and hands it to accumulate. The reference for the bits.
struct DenseSlice {
  static constexpr const char* name = "dense_slice";
  // saved 0: (axis, begin, end), i64 on the host
  static Tensor forward(const std::vector<Tensor>& in, Saved& saved) {
    const std::vector<double> p = saved.tensors[0].to_doubles();
    const kernels::View part = kernels::sliced_view(in[0].shape(), static_cast<int>(p[0]), static_cast<int64_t>(p[1]),
                                                    static_cast<int64_t>(p[2]));
    return copy_region(in[0], part);
  }
  static void backward(BackwardContext& ctx) {
    const std::vector<double> p = ctx.saved(0).to_doubles();
    const Tensor& dy = ctx.grad_output();
    Tensor dx = Tensor::zeros(ctx.input(0).shape(), dy.dtype(), dy.device());
    kernels::copy_strided(dy, kernels::contiguous_view(dy.shape()), dx,
                          kernels::sliced_view(dx.shape(), static_cast<int>(p[0]), static_cast<int64_t>(p[1]),
                                               static_cast<int64_t>(p[2])));
    ctx.accumulate(0, dx);
  }
};

Var slice_either(bool dense, Var x, int axis, int64_t begin, int64_t end) {
  if (!dense) return ops::slice(x, axis, begin, end);
  // what apply<> does, with the bounds saved for the forward to read too
  Saved saved;
  saved.tensors[0] = Tensor::from_vector(std::vector<int64_t>{axis < 0 ? axis + x.value().ndim() : axis, begin, end},
                                         Shape{3});
  Tensor out = DenseSlice::forward({x.value()}, saved);
  return x.graph().record(DenseSlice::name, std::move(out), {x}, &DenseSlice::backward, std::move(saved.tensors));
}

std::vector<uint8_t> bytes_of(const Tensor& t) {
  const Tensor host = t.to(Device::cpu());
  const auto* p = static_cast<const uint8_t*>(host.raw_data());
  return std::vector<uint8_t>(p, p + host.numel() * static_cast<int64_t>(dtype_size(host.dtype())));
}

// An LSTM over a precomputed projection gx (B, T, 4H), as nn::LSTM runs it: each step slices its
// time step out of gx and splits the gates; gx is also read whole (a penalty), so a dense
// contribution meets the parts. `through` is gx's dtype on the way to the slices (bf16: autocast's
// activations). Returns the gradients of gx and w_hh, as bytes.
std::vector<std::vector<uint8_t>> lstm_gradients(bool dense, DType dtype, DType through) {
  const int64_t B = 3, T = 5, H = 4;
  Graph g;
  std::vector<double> v(static_cast<size_t>(B * T * 4 * H)), w(static_cast<size_t>(H * 4 * H));
  for (size_t i = 0; i < v.size(); ++i) v[i] = std::sin(0.37 * static_cast<double>(i) + 0.1);
  for (size_t i = 0; i < w.size(); ++i) w[i] = 0.3 * std::cos(0.91 * static_cast<double>(i));
  Var gx = g.parameter(Tensor::from_doubles(v, Shape{B, T, 4 * H}, dtype), "gx");
  Var w_hh = g.parameter(Tensor::from_doubles(w, Shape{H, 4 * H}, dtype), "w_hh");
  Var gates = through == dtype ? gx : ops::to(gx, through);
  Var h = g.input(Tensor::zeros(Shape{B, H}, dtype)), c = g.input(Tensor::zeros(Shape{B, H}, dtype));
  Var loss;
  for (int64_t t = 0; t < T; ++t) {
    Var step = ops::reshape(slice_either(dense, gates, 1, t, t + 1), {B, 4 * H});
    if (through != dtype) step = ops::to(step, dtype);
    step = step + ops::matmul(h, w_hh);
    std::vector<Var> q;
    for (int k = 0; k < 4; ++k) q.push_back(slice_either(dense, step, -1, k * H, (k + 1) * H));
    c = ops::sigmoid(q[1]) * c + ops::sigmoid(q[0]) * ops::tanh(q[2]);
    h = ops::sigmoid(q[3]) * ops::tanh(c);
    loss = loss.defined() ? loss + ops::sum(h) : ops::sum(h);
  }
  loss = loss + ops::sum(gx * gx) * 0.01;
  g.backward(loss);
  return {bytes_of(gx.grad()), bytes_of(w_hh.grad())};
}

}  // namespace

TEST_CASE("a slice adds into the part of its input's gradient it covers: the dense path's bits") {
  for (const auto& [dtype, through] : {std::pair{DType::f64, DType::f64}, std::pair{DType::f32, DType::f32},
                                       std::pair{DType::f32, DType::bf16}}) {
    CAPTURE(dtype_name(dtype));
    CAPTURE(dtype_name(through));
    const auto parts = lstm_gradients(false, dtype, through);
    const auto dense = lstm_gradients(true, dtype, through);
    CHECK(parts[0] == dense[0]);
    CHECK(parts[1] == dense[1]);
  }
}

TEST_CASE("the overwrite-bug mode writes just the part; a record logs it with its region") {
  // x (2, 4); columns 0:2 times 3 and columns 1:3 times 5: the parts meet in column 1
  auto run = [](bool bug, BackwardRecord* record) {
    Graph g;
    Var x = g.parameter(f64({1, 2, 3, 4, 5, 6, 7, 8}, Shape{2, 4}), "x");
    Var left = ops::sum(ops::slice(x, 1, 0, 2) * 3.0);  // recorded first, so its backward runs last
    Var loss = left + ops::sum(ops::slice(x, 1, 1, 3) * 5.0);
    g.backward(loss, {.overwrite_bug = bug, .record = record});
    return x.grad().to_doubles();
  };
  CHECK(run(false, nullptr) == std::vector<double>{3, 8, 5, 0, 3, 8, 5, 0});
  // The later slice's backward runs first: columns 1:3 get 5 on zeros; then columns 0:2 are written
  // with 3, and column 3 and the rest of column 2 keep what they held (the dense path's overwrite
  // would have zeroed column 2 too).
  BackwardRecord record;
  CHECK(run(true, &record) == std::vector<double>{3, 3, 5, 0, 3, 3, 5, 0});
  std::vector<const GradEvent*> parts;
  for (const GradEvent& ev : record.events)
    if (ev.to_value == -1) parts.push_back(&ev);
  REQUIRE(parts.size() == 2);
  REQUIRE(parts[0]->region.has_value());
  REQUIRE(parts[1]->region.has_value());
  CHECK(parts[0]->kind == GradEvent::Kind::set);
  CHECK(region_str(Shape{2, 4}, *parts[0]->region) == "[:, 1:3]");
  CHECK(parts[0]->contribution.to_doubles() == std::vector<double>{5, 5, 5, 5});
  CHECK(parts[1]->kind == GradEvent::Kind::overwritten);
  CHECK(region_str(Shape{2, 4}, *parts[1]->region) == "[:, 0:2]");
  CHECK(parts[1]->discarded.to_doubles() == std::vector<double>{0, 5, 0, 5});  // what columns 0:2 held
  CHECK(parts[1]->contribution.to_doubles() == std::vector<double>{3, 3, 3, 3});
}

TEST_CASE("a tape dump writes a part's region and replays the gradient after it") {
  Graph g;
  Var x = g.parameter(f64({1, 2, 3, 4, 5, 6, 7, 8}, Shape{2, 4}), "x");
  Var left = ops::sum(ops::slice(x, 1, 0, 2) * 3.0);
  Var loss = left + ops::sum(ops::slice(x, 1, 1, 3) * 5.0);
  BackwardRecord record;
  g.backward(loss, {.record = &record});
  const json::Value dump = tape_dump(g, &record);
  std::vector<const json::Value*> parts;
  const json::Value::Array& events = at(at(dump, "backward"), "events").as_array();
  for (const json::Value& ev : events)
    if (at(ev, "to").as_int() == -1) parts.push_back(&ev);
  REQUIRE(parts.size() == 2);
  CHECK(json::dumps(at(*parts[0], "region"), -1) ==
        R"({"offset": 1, "shape": [2, 2], "strides": [4, 1], "index": "[:, 1:3]"})");
  CHECK(at(*parts[0], "kind").as_string() == "set");
  CHECK(json::dumps(at(*parts[1], "region"), -1) ==
        R"({"offset": 0, "shape": [2, 2], "strides": [4, 1], "index": "[:, 0:2]"})");
  CHECK(at(*parts[1], "kind").as_string() == "added");
  CHECK(json::dumps(at(at(*parts[1], "after"), "values"), -1) == "[3.0, 8.0, 3.0, 8.0]");  // columns 0:2 after both
  for (const json::Value& ev : events)  // a whole contribution has no region
    if (at(ev, "to").as_int() != -1) CHECK(ev.find("region") == nullptr);
}

TEST_CASE("a region that does not fit its input is refused by name") {
  auto refusal = [](kernels::View region, Shape part) {
    Graph g;
    Var x = g.parameter(f64({1, 2, 3, 4, 5, 6}, Shape{2, 3}));
    static kernels::View chosen;  // what the backward hands over: a part of shape `part` for it
    chosen = region;
    Var y = g.record("broken_part", f64({0}, Shape{}), {x}, [](BackwardContext& ctx) {
      ctx.accumulate(0, ctx.saved(0), chosen);
    }, {Tensor::zeros(part, DType::f64)});
    return message_of([&] { g.backward(y); });
  };
  kernels::View column = kernels::sliced_view(Shape{2, 3}, 1, 2, 3);  // (2, 1) at offset 2, strides (3, 1)
  CHECK(refusal(column, Shape{2, 1}) == "(no error)");
  CHECK(refusal(column, Shape{2}) ==
        "[engine] the backward of broken_part gave input 0 a part of shape (2,) f64 on cpu for a region of shape "
        "(2, 1) of that input, which is (2, 3) f64 on cpu");
  kernels::View past = column;
  past.offset = 3;
  CHECK(refusal(past, Shape{2, 1}) ==
        "[engine] the backward of broken_part gave input 0 a region (offset 3, shape (2, 1), strides (3, 1)) that "
        "reaches past the input's 6 elements; that input is (2, 3)");
  kernels::View twice = kernels::sliced_view(Shape{2, 3}, 1, 0, 2);
  twice.stride[0] = 1;  // rows one element apart: element 1 is named by (0, 1) and (1, 0)
  CHECK(refusal(twice, Shape{2, 2}) ==
        "[engine] the backward of broken_part gave input 0 a region (offset 0, shape (2, 2), strides (1, 1)) that "
        "names an element twice; that input is (2, 3)");
}

TEST_CASE("region_str reads a box as Python's indexing and anything else as its walk") {
  CHECK(region_str(Shape{2, 5, 8}, kernels::sliced_view(Shape{2, 5, 8}, 1, 3, 4)) == "[:, 3:4, :]");
  CHECK(region_str(Shape{6}, kernels::sliced_view(Shape{6}, 0, 0, 6)) == "[:]");
  kernels::View diagonal;
  diagonal.shape = Shape{3};
  diagonal.stride[0] = 4;
  CHECK(region_str(Shape{3, 3}, diagonal) == "offset 0, shape (3,), strides (4,)");
}

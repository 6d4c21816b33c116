// Tests for the gradient transforms (src/optim/clip.*), their sum-of-squares kernel on the CPU,
// and the learning-rate schedules (src/optim/schedule.*).
//
// Rule: values from torch 1.13 (torch.nn.utils.clip_grad_norm_, clip_grad_value_,
// torch.optim.lr_scheduler.StepLR) and the schedules' formulas in Python, written as literals; a
// row-sparse gradient's results against the same transform written out on its rows.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "gradients.hpp"
#include "messages.hpp"
#include "tapegrad/kernels/cpu/exact_sum.hpp"
#include "tapegrad/kernels/kernels.hpp"
#include "tapegrad/ops/fused/embedding_cross_entropy.hpp"
#include "tapegrad/optim/adamw.hpp"
#include "tapegrad/optim/clip.hpp"
#include "tapegrad/optim/schedule.hpp"
#include "tapegrad/tensor/parallel.hpp"

using namespace tapegrad;
using testing::give_gradients;
using testing::message_of;

namespace {

const std::vector<double> kGW = {0.1, -0.2, 0.3, 0.4, -0.5, 0.6};
const std::vector<double> kGB = {0.5, -0.25, 0.125};

void check_near(const std::vector<double>& got, const std::vector<double>& want, double eps) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    CAPTURE(i);
    CHECK(got[i] == doctest::Approx(want[i]).epsilon(eps));
  }
}

// A (6, 5) table whose gradient from embedding_cross_entropy is row-sparse: rows 1, 4 and 2 only.
struct SparseTable {
  Graph g;
  Var table, bias;
  explicit SparseTable(DType dtype) {
    std::vector<double> init(30);
    for (size_t i = 0; i < init.size(); ++i) init[i] = std::sin(0.7 * static_cast<double>(i));
    table = g.parameter(Tensor::from_doubles(init, Shape{6, 5}, dtype), "table");
    bias = g.parameter(Tensor::from_doubles({0.5, -1.5}, Shape{2}, dtype), "bias");
    Var ids = g.input(Tensor::from_vector(std::vector<int32_t>{1, 4, 1, 2}, Shape{4}));
    Var targets = g.input(Tensor::from_vector(std::vector<int32_t>{0, 3, 2, 4}, Shape{4}));
    g.backward(ops::add(ops::embedding_cross_entropy(table, ids, targets), ops::sum(ops::mul(bias, bias))));
  }
};

}  // namespace

// torch.nn.utils.clip_grad_norm_([W, b], 0.5) with W.grad (2, 3) = kGW, b.grad (3,) = kGB.
TEST_CASE("clip_grad_norm matches torch's clip_grad_norm_: the norm it returns and the clipped gradients") {
  for (DType dtype : {DType::f64, DType::f32}) {
    CAPTURE(dtype_name(dtype));
    const bool f64 = dtype == DType::f64;
    Graph g;
    Var w = g.parameter(Tensor::zeros(Shape{2, 3}, dtype), "W");
    Var b = g.parameter(Tensor::zeros(Shape{3}, dtype), "b");
    give_gradients(g, {{w, kGW}, {b, kGB}});
    const double norm = optim::clip_grad_norm({w, b}, 0.5);
    CHECK(norm == doctest::Approx(f64 ? 1.1127106542133942 : 1.1127105951309204).epsilon(f64 ? 1e-15 : 1e-7));
    const double eps = f64 ? 1e-15 : 1e-6;
    check_near(w.grad().to_doubles(),
               f64 ? std::vector<double>{0.04493527124540306, -0.08987054249080612, 0.13480581373620917,
                                         0.17974108498161223, -0.2246763562270153, 0.26961162747241835}
                   : std::vector<double>{0.04493527486920357, -0.08987054973840714, 0.134805828332901,
                                         0.17974109947681427, -0.22467637062072754, 0.269611656665802},
               eps);
    check_near(b.grad().to_doubles(),
               f64 ? std::vector<double>{0.2246763562270153, -0.11233817811350764, 0.05616908905675382}
                   : std::vector<double>{0.22467637062072754, -0.11233818531036377, 0.056169092655181885},
               eps);
    // The clipped gradients have norm max_norm (less the 1e-6, and rounding), and a clip to a
    // larger norm leaves them as they are.
    const std::vector<double> clipped = w.grad().to_doubles();
    CHECK(optim::clip_grad_norm({w, b}, 0.6) == doctest::Approx(0.5).epsilon(1e-5));
    CHECK(w.grad().to_doubles() == clipped);
  }
}

// clip_grad_factor_on_device then AdamW::step(factor): the coefficient applied as AdamW reads the
// gradients, which stay as they were; the parameters and moments of clip_grad_norm_on_device then
// step(), dense and row-sparse gradients, clipped or not.
TEST_CASE("AdamW::step(clip_grad_factor_on_device's factor) gives clipping then step()'s bits") {
  for (DType dtype : {DType::f64, DType::f32})
    for (double max_norm : {0.05, 100.0}) {
      CAPTURE(dtype_name(dtype));
      CAPTURE(max_norm);
      SparseTable fused(dtype), plain(dtype);
      REQUIRE(fused.table.sparse_grad() != nullptr);
      const std::vector<double> table_grad = fused.table.sparse_grad()->rows.to_doubles();
      const std::vector<double> bias_grad = fused.bias.grad().to_doubles();
      optim::AdamW a({fused.table, fused.bias}, {.lr = 0.01, .weight_decay = 0.1});
      optim::AdamW b({plain.table, plain.bias}, {.lr = 0.01, .weight_decay = 0.1});
      for (int step = 0; step < 2; ++step) {  // the second step from the first's moments
        const optim::ClipFactor f = optim::clip_grad_factor_on_device({fused.table, fused.bias}, max_norm);
        const Tensor norm = optim::clip_grad_norm_on_device({plain.table, plain.bias}, max_norm);
        CHECK(f.norm.item() == norm.item());
        CHECK((f.factor.item() < 1.0) == (max_norm < 1.0));
        a.step(f.factor);
        b.step();
        CHECK(fused.table.sparse_grad()->rows.to_doubles() == table_grad);  // the gradients as they were
        CHECK(fused.bias.grad().to_doubles() == bias_grad);
        CHECK(fused.table.value().to_doubles() == plain.table.value().to_doubles());
        CHECK(fused.bias.value().to_doubles() == plain.bias.value().to_doubles());
        CHECK(a.m(0).to_doubles() == b.m(0).to_doubles());
        CHECK(a.v(1).to_doubles() == b.v(1).to_doubles());
        plain.table.grad_entries_for_write().copy_from(fused.table.sparse_grad()->rows);  // unclipped again
        plain.bias.grad_entries_for_write().copy_from(fused.bias.grad());
      }
    }
  // no gradient: norm 0, factor 1; a factor that is not a () f64 on the parameters' device is refused
  Graph g;
  Var w = g.parameter(Tensor::zeros(Shape{2}, DType::f32), "w");
  const optim::ClipFactor none = optim::clip_grad_factor_on_device({w}, 1.0);
  CHECK(none.norm.item() == 0.0);
  CHECK(none.factor.item() == 1.0);
  give_gradients(g, {{w, {0.5, -0.5}}});
  optim::AdamW adamw({w}, {});
  CHECK(message_of([&] { adamw.step(Tensor::zeros(Shape{}, DType::f32)); }) ==
        "[adamw] the gradients' scale must be a () f64 tensor on cpu, got () f32 on cpu");
}

TEST_CASE("clip_grad_norm_on_device gives clip_grad_norm's norm and gradients, clipped or not, NaN included") {
  for (DType dtype : {DType::f64, DType::f32})
    for (double max_norm : {0.5, 2.0}) {
      for (bool nan : {false, true}) {
        CAPTURE(dtype_name(dtype));
        CAPTURE(max_norm);
        CAPTURE(nan);
        std::vector<double> gw = kGW;
        if (nan) gw[2] = std::nan("");
        auto run = [&](bool on_device) {
          Graph g;
          Var w = g.parameter(Tensor::zeros(Shape{2, 3}, dtype), "W");
          Var b = g.parameter(Tensor::zeros(Shape{3}, dtype), "b");
          give_gradients(g, {{w, gw}, {b, kGB}});
          double norm = 0;
          if (on_device) {
            const Tensor t = optim::clip_grad_norm_on_device({w, b}, max_norm);
            CHECK(t.dtype() == DType::f64);
            CHECK(t.ndim() == 0);
            norm = t.item();
          } else {
            norm = optim::clip_grad_norm({w, b}, max_norm);
          }
          std::vector<double> out = w.grad().to_doubles();
          for (double v : b.grad().to_doubles()) out.push_back(v);
          out.push_back(norm);
          return out;
        };
        const std::vector<double> host = run(false), device = run(true);
        REQUIRE(host.size() == device.size());
        for (size_t i = 0; i < host.size(); ++i) {
          CAPTURE(i);
          CHECK(std::memcmp(&host[i], &device[i], sizeof(double)) == 0);  // the same bits (NaNs too)
        }
      }
    }
  Graph g;
  Var w = g.parameter(Tensor::zeros(Shape{2}, DType::f64), "w");
  CHECK(optim::clip_grad_norm_on_device({w}, 1.0).item() == 0.0);  // no gradient: a zero norm
  CHECK(message_of([&] { (void)optim::clip_grad_norm_on_device({w}, -1.0); }) ==
        "[clip_grad_norm_on_device] max_norm must be a finite number >= 0, got -1");
  // the device-scalar kernels refuse factors and sums that are not () f64, and a tensor listed twice
  Tensor x = Tensor::zeros(Shape{3}, DType::f32), f64 = Tensor::zeros(Shape{}, DType::f64);
  const Tensor wide = Tensor::zeros(Shape{2}, DType::f64), f32 = Tensor::zeros(Shape{}, DType::f32);
  CHECK(message_of([&] { kernels::scale_many_by({&x}, wide); }) ==
        "[scale_many_by] factor must be a () f64 tensor, got (2,) f64");
  CHECK(message_of([&] { kernels::scale_many_by({&x, &x}, f64); }) ==
        "[scale_many_by] tensors 0 and 1 share their bytes; list each tensor once");
  Tensor norm = Tensor::zeros(Shape{}, DType::f64), factor = Tensor::zeros(Shape{}, DType::f64);
  CHECK(message_of([&] { kernels::clip_factor(f32, 1.0, norm, factor); }) ==
        "[clip_factor] sumsq must be a () f64 tensor, got () f32");
  CHECK(message_of([&] { kernels::clip_factor(f64, 1.0, norm, x); }) ==
        "[clip_factor] factor must be a () f64 tensor, got (3,) f32");
  // and compute clip_grad_norm's factor: 1 within the limit, max_norm / (norm + 1e-6) past it
  Tensor sumsq = Tensor::from_doubles({16.0}, Shape{}, DType::f64);
  kernels::clip_factor(sumsq, 8.0, norm, factor);
  CHECK(norm.item() == 4.0);
  CHECK(factor.item() == 1.0);
  kernels::clip_factor(sumsq, 2.0, norm, factor);
  CHECK(factor.item() == 2.0 / (4.0 + 1e-6));
}

TEST_CASE("clip_grad_norm below the limit, without gradients, and with a parameter twice") {
  Graph g;
  Var w = g.parameter(Tensor::zeros(Shape{2, 3}, DType::f64), "W");
  Var unused = g.parameter(Tensor::zeros(Shape{4}, DType::f64), "unused");
  CHECK(optim::clip_grad_norm({w, unused}, 1.0) == 0.0);  // no gradient anywhere: nothing to do
  give_gradients(g, {{w, kGW}});
  const uint32_t version = w.grad().version();
  CHECK(optim::grad_norm({w, w, unused}) == optim::grad_norm({w}));  // counted once
  CHECK(optim::clip_grad_norm({w, unused}, 10.0) == doctest::Approx(std::sqrt(0.91)).epsilon(1e-15));
  CHECK(w.grad().to_doubles() == kGW);  // not clipped: not written
  CHECK(w.grad().version() == version);
  CHECK_FALSE(unused.grad().defined());
  // Twice in the list, scaled once: the result is the clip of the single listing.
  optim::clip_grad_norm({w, w}, 0.5);
  check_near(w.grad().to_doubles(), {0.05241418689109857, -0.10482837378219714, 0.1572425606732957,
                                     0.20965674756439429, -0.26207093445549284, 0.3144851213465914},
             1e-15);
}

TEST_CASE("a row-sparse gradient is clipped and scaled on its rows and stays row-sparse") {
  for (DType dtype : {DType::f64, DType::f32}) {
    CAPTURE(dtype_name(dtype));
    SparseTable m(dtype);
    REQUIRE(m.table.sparse_grad() != nullptr);
    const std::vector<double> rows = m.table.sparse_grad()->rows.to_doubles();
    const std::vector<double> ids = m.table.sparse_grad()->ids.to_doubles();
    const std::vector<double> bias = m.bias.grad().to_doubles();
    std::vector<double> squares;
    for (double x : rows) squares.push_back(x * x);
    for (double x : bias) squares.push_back(x * x);
    const double want = std::sqrt(cpu::exact_sum(squares.data(), squares.size()));
    CHECK(optim::grad_norm({m.table, m.bias}) == doctest::Approx(want).epsilon(1e-15));
    const double norm = optim::clip_grad_norm({m.table, m.bias}, 0.1);
    CHECK(norm == doctest::Approx(want).epsilon(1e-15));
    REQUIRE(m.table.sparse_grad() != nullptr);  // never made dense
    CHECK(m.table.sparse_grad()->ids.to_doubles() == ids);
    const double coefficient = 0.1 / (norm + 1e-6);
    std::vector<double> scaled = rows;
    for (double& x : scaled)
      x = dtype == DType::f64 ? x * coefficient
                              : static_cast<double>(static_cast<float>(x) * static_cast<float>(coefficient));
    CHECK(m.table.sparse_grad()->rows.to_doubles() == scaled);
    // scale_grads and clip_grad_value on the rows too
    optim::scale_grads({m.table}, 4.0);
    for (double& x : scaled) x *= 4.0;
    CHECK(m.table.sparse_grad()->rows.to_doubles() == scaled);
    optim::clip_grad_value({m.table}, 0.01);
    for (double& x : scaled) x = std::min(0.01, std::max(-0.01, x));
    if (dtype == DType::f32)
      for (double& x : scaled) x = static_cast<double>(static_cast<float>(x));  // the bound 0.01 as an f32
    CHECK(m.table.sparse_grad()->rows.to_doubles() == scaled);
    REQUIRE(m.table.sparse_grad() != nullptr);
  }
}

// torch.nn.utils.clip_grad_value_([W, b], 0.3)
TEST_CASE("clip_grad_value matches torch's clip_grad_value_; scale_grads multiplies") {
  for (DType dtype : {DType::f64, DType::f32}) {
    CAPTURE(dtype_name(dtype));
    Graph g;
    Var w = g.parameter(Tensor::zeros(Shape{2, 3}, dtype), "W");
    Var b = g.parameter(Tensor::zeros(Shape{3}, dtype), "b");
    give_gradients(g, {{w, kGW}, {b, kGB}});
    optim::clip_grad_value({w, b}, 0.3);
    const auto as_dtype = [&](std::vector<double> v) {
      return Tensor::from_doubles(v, Shape{static_cast<int64_t>(v.size())}, dtype).to_doubles();
    };
    CHECK(w.grad().to_doubles() == as_dtype({0.1, -0.2, 0.3, 0.3, -0.3, 0.3}));
    CHECK(b.grad().to_doubles() == as_dtype({0.3, -0.25, 0.125}));
    optim::scale_grads({w, b}, -2.0);
    CHECK(b.grad().to_doubles() == as_dtype({-0.6, 0.5, -0.25}));
  }
}

TEST_CASE("grad_entries_for_write: the gradient's own bytes, its version moved; a held handle keeps the old ones") {
  Graph g;
  Var w = g.parameter(Tensor::zeros(Shape{3}, DType::f64), "w");
  CHECK_FALSE(w.grad_entries_for_write().defined());
  give_gradients(g, {{w, {1.0, 2.0, 3.0}}});
  const Tensor held = w.grad();  // shares the bytes: the write goes to a copy
  const uint32_t before = held.version();
  optim::scale_grads({w}, 0.5);
  CHECK(held.to_doubles() == std::vector<double>{1.0, 2.0, 3.0});
  CHECK(w.grad().to_doubles() == std::vector<double>{0.5, 1.0, 1.5});
  const uint32_t after = w.grad().version();
  optim::scale_grads({w}, 2.0);  // now unique: written in place, the version moves
  CHECK(w.grad().version() > after);
  CHECK(w.grad().to_doubles() == std::vector<double>{1.0, 2.0, 3.0});
  CHECK(held.version() == before);
}

TEST_CASE("the transforms refuse bad limits by name") {
  Graph g;
  Var w = g.parameter(Tensor::zeros(Shape{2}, DType::f64), "w");
  CHECK(message_of([&] { optim::clip_grad_norm({w}, -1.0); }) ==
        "[clip_grad_norm] max_norm must be a finite number >= 0, got -1");
  CHECK(message_of([&] { optim::clip_grad_norm({w}, INFINITY); }) ==
        "[clip_grad_norm] max_norm must be a finite number >= 0, got inf");
  CHECK(message_of([&] { optim::clip_grad_value({w}, std::nan("")); }) ==
        "[clip_grad_value] clip_value must be a finite number >= 0, got nan");
  CHECK(message_of([&] { optim::scale_grads({w}, INFINITY); }) == "[scale_grads] factor must be a finite number, got inf");
}

TEST_CASE("a non-finite norm makes the clipped gradients NaN, as PyTorch's does") {
  Graph g;
  Var w = g.parameter(Tensor::zeros(Shape{2}, DType::f64), "w");
  give_gradients(g, {{w, {std::nan(""), 1.0}}});
  CHECK(std::isnan(optim::clip_grad_norm({w}, 1.0)));
  CHECK(std::isnan(w.grad().to_doubles()[1]));
}

// Note [sum of squares order], written out: chunks of 4096, each by 32 lanes of squares in double
// and a pairwise tree; the chunks' sums appended to `sums`.
void reference_chunk_sums(const std::vector<double>& v, std::vector<double>& sums) {
  const int64_t n = static_cast<int64_t>(v.size());
  for (int64_t begin = 0; begin < n; begin += 4096) {
    double acc[32] = {};
    for (int64_t i = begin; i < std::min(n, begin + 4096); ++i)
      acc[(i - begin) % 32] += v[static_cast<size_t>(i)] * v[static_cast<size_t>(i)];
    for (int width = 32; width > 1; width /= 2)
      for (int l = 0; l < width / 2; ++l) acc[l] = acc[2 * l] + acc[2 * l + 1];
    sums.push_back(acc[0]);
  }
}

TEST_CASE("sum_squares follows Note [sum of squares order] on any thread count") {
  for (const int64_t n : {int64_t{0}, int64_t{1}, int64_t{33}, int64_t{4096}, int64_t{4097}, int64_t{70001},
                          int64_t{9000001}}) {
    for (DType dtype : {DType::f32, DType::f64}) {
      CAPTURE(n);
      CAPTURE(dtype_name(dtype));
      std::vector<double> x(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) x[static_cast<size_t>(i)] = std::sin(0.37 * static_cast<double>(i)) * 1e3;
      const Tensor t = Tensor::from_doubles(x, Shape{n}, dtype);
      std::vector<double> sums;
      reference_chunk_sums(t.to_doubles(), sums);  // the elements as the tensor holds them
      CHECK(static_cast<int64_t>(sums.size()) == kernels::sum_squares_chunk_count(n));
      const double want = cpu::exact_sum(sums.data(), sums.size());
      const int before = num_threads();
      for (int threads : {1, 2, 5}) {
        CAPTURE(threads);
        set_num_threads(threads);
        Tensor out = Tensor::zeros(Shape{3}, DType::f64);
        kernels::sum_squares(t, out, 1);
        CHECK(out.to_doubles() == std::vector<double>{0.0, want, 0.0});
        Tensor chunks = Tensor::zeros(Shape{kernels::sum_squares_chunk_count(n)}, DType::f64);
        kernels::sum_squares_chunks({&t}, chunks);
        CHECK(chunks.to_doubles() == sums);
      }
      set_num_threads(before);
    }
  }
  Tensor out = Tensor::zeros(Shape{2}, DType::f32);
  CHECK(message_of([&] { kernels::sum_squares(Tensor::zeros(Shape{4}, DType::f64), out, 2); }) ==
        "[sum_squares] slot 2 of (2,) f32: the sums go into a 1-D f64 tensor with that slot");
}

TEST_CASE("the norm's chunk sums are the same however the elements are cut at chunk boundaries") {
  // One gradient of 3 chunks and a bit, against its pieces at chunk boundaries and a flat buffer
  // holding them apart with zeros between: the same chunk sums, apart from +0 ones, and so the same
  // correctly rounded total (what dist's ZeRO-1 pieces rely on).
  const int64_t n = 3 * 4096 + 100;
  std::vector<double> x(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) x[static_cast<size_t>(i)] = std::cos(1.3 * static_cast<double>(i)) * 7.0;
  const Tensor whole = Tensor::from_doubles(x, Shape{n}, DType::f32);
  Tensor flat = Tensor::zeros(Shape{6 * 4096}, DType::f32);
  flat.flat_view(4096, Shape{n}).copy_from(whole);
  const Tensor a = flat.flat_view(0, Shape{3 * 4096}), b = flat.flat_view(3 * 4096, Shape{3 * 4096});
  auto total = [](const std::vector<const Tensor*>& xs) {
    int64_t c = 0;
    for (const Tensor* t : xs) c += kernels::sum_squares_chunk_count(t->numel());
    Tensor sums = Tensor::zeros(Shape{c}, DType::f64), out = Tensor::zeros(Shape{}, DType::f64);
    kernels::sum_squares_chunks(xs, sums);
    kernels::sum_all(sums, out);
    return out.item();
  };
  const double one = total({&whole});
  CHECK(one == total({&flat}));
  CHECK(one == total({&b, &a}));
  CHECK(one > 0);
}

// The multi-tensor forms clip_grad_norm calls: each tensor's bits as the single-tensor kernel's.
std::vector<Tensor> assorted_tensors() {
  std::vector<Tensor> xs;
  for (const int64_t n : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{1000}, (int64_t{1} << 17) + 3})
    for (DType dtype : {DType::f32, DType::f64}) {
      std::vector<double> x(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i)
        x[static_cast<size_t>(i)] = std::sin(0.37 * static_cast<double>(i + n)) * (dtype == DType::f32 ? 3e2 : 1e-3);
      xs.push_back(Tensor::from_doubles(x, Shape{n}, dtype));
    }
  return xs;
}

TEST_CASE("sum_squares_chunks and scale_many give the single-tensor kernels' bits") {
  const std::vector<Tensor> xs = assorted_tensors();
  std::vector<const Tensor*> in;
  std::vector<double> chunk_sums;
  for (const Tensor& x : xs) {
    in.push_back(&x);
    reference_chunk_sums(x.to_doubles(), chunk_sums);
  }
  const int64_t k = static_cast<int64_t>(chunk_sums.size());
  const int before = num_threads();
  for (int threads : {1, 3}) {
    CAPTURE(threads);
    set_num_threads(threads);
    Tensor many = Tensor::from_doubles(std::vector<double>(static_cast<size_t>(k), std::nan("")), Shape{k}, DType::f64);
    kernels::sum_squares_chunks(in, many);
    CHECK(many.to_doubles() == chunk_sums);
  }
  set_num_threads(before);
  Tensor one = Tensor::zeros(Shape{1}, DType::f64);
  kernels::sum_squares(xs[0], one, 0);
  CHECK(one.to_doubles()[0] == 0.0);  // an empty tensor's sum is +0
  kernels::sum_squares(xs[2], one, 0);
  CHECK(one.to_doubles()[0] == doctest::Approx(std::pow(std::sin(0.37) * 3e2, 2)));

  // 0.1 is rounded to each tensor's dtype first, as scale does.
  std::vector<Tensor> scaled, want;
  std::vector<Tensor*> out;
  for (const Tensor& x : xs) {
    scaled.push_back(x.clone());
    want.push_back(Tensor::empty(x.shape(), x.dtype()));
    kernels::scale(x, 0.1, want.back());
  }
  for (Tensor& x : scaled) out.push_back(&x);
  kernels::scale_many(out, 0.1);
  for (size_t i = 0; i < xs.size(); ++i) {
    CAPTURE(i);
    CHECK(std::memcmp(scaled[i].raw_data(), want[i].raw_data(), want[i].nbytes()) == 0);
  }
  CHECK(scaled[2].to_doubles()[0] == static_cast<double>(static_cast<float>(std::sin(0.37) * 3e2f) * 0.1f));
  kernels::scale_many({}, 2.0);  // nothing to do
  Tensor none = Tensor::zeros(Shape{0}, DType::f64);
  kernels::sum_squares_chunks({}, none);
}

TEST_CASE("sum_squares_chunks and scale_many refuse what they cannot take, naming the tensor") {
  const Tensor a = Tensor::zeros(Shape{3}, DType::f32), b = Tensor::zeros(Shape{2, 2}, DType::f64);
  const Tensor c = Tensor::zeros(Shape{4097}, DType::f64), ids = Tensor::zeros(Shape{4}, DType::i32);
  Tensor out = Tensor::zeros(Shape{3}, DType::f64), wrong = Tensor::zeros(Shape{2}, DType::f64);
  CHECK(message_of([&] { kernels::sum_squares_chunks({&a, &c}, wrong); }) ==
        "[sum_squares_chunks] out is (2,) f64: the 2 tensors' chunks of 4096 go into a (3,) f64 tensor");
  Tensor f32_out = Tensor::zeros(Shape{3}, DType::f32);
  CHECK(message_of([&] { kernels::sum_squares_chunks({&a, &c}, f32_out); }) ==
        "[sum_squares_chunks] out is (3,) f32: the 2 tensors' chunks of 4096 go into a (3,) f64 tensor");
  CHECK(message_of([&] { kernels::sum_squares_chunks({&a, &ids}, out); }) ==
        "[sum_squares_chunks] tensor 1 of 2 is i32; sum_squares_chunks takes f32 and f64 tensors");
  Tensor x = a.clone(), y = b.clone(), same = y.reshape(Shape{4}), i = ids.clone(), undefined;
  CHECK(message_of([&] { kernels::scale_many({&x, &y, &same}, 2.0); }) ==
        "[scale_many] tensors 1 and 2 share their bytes; list each tensor once");
  CHECK(message_of([&] { kernels::scale_many({&x, &i}, 2.0); }) ==
        "[scale_many] tensor 1 of 2 is i32; scale_many takes f32 and f64 tensors");
  CHECK(message_of([&] { kernels::scale_many({&undefined}, 2.0); }) == "[scale_many] tensor 0 of 1 is undefined");
  CHECK(x.to_doubles() == std::vector<double>{0.0, 0.0, 0.0});  // nothing written by a refused call
}

// ---- schedules

TEST_CASE("WarmupCosine gives its formula's values at known steps") {
  // Python: peak 6e-4, warmup 10, total 100, min 6e-5, the formula in schedule.hpp
  const optim::WarmupCosine s(6e-4, 10, 100, 6e-5);
  CHECK(s.lr(0) == 5.9999999999999995e-05);  // peak / warmup: never 0
  CHECK(s.lr(4) == 0.0003);
  CHECK(s.lr(9) == 0.0006);
  CHECK(s.lr(10) == 0.0006);
  CHECK(s.lr(40) == 0.0004649999999999999);
  CHECK(s.lr(55) == 0.00032999999999999994);  // torch's CosineAnnealingLR closed form gives the same
  CHECK(s.lr(99) == 6.0164476704844146e-05);
  CHECK(s.lr(100) == 6e-05);
  CHECK(s.lr(150) == 6e-05);
  const optim::WarmupCosine no_warmup(1.0, 0, 4);
  CHECK(no_warmup.lr(0) == 1.0);
  CHECK(no_warmup.lr(2) == doctest::Approx(0.5).epsilon(1e-15));
  CHECK(no_warmup.lr(4) == 0.0);
}

// torch.optim.lr_scheduler.StepLR: get_last_lr() after k scheduler steps.
TEST_CASE("StepLR matches torch's StepLR; Constant is constant") {
  const optim::StepLR halves(0.1, 3, 0.5);
  const std::vector<double> torch_values = {0.1, 0.1, 0.1, 0.05, 0.05, 0.05, 0.025, 0.025, 0.025, 0.0125, 0.0125};
  for (size_t k = 0; k < torch_values.size(); ++k) CHECK(halves.lr(static_cast<int64_t>(k)) == torch_values[k]);
  // gamma 0.1: the closed form (torch's _get_closed_form_lr), which its chained steps may miss by an ulp
  const optim::StepLR tenths(1.0, 2, 0.1);
  CHECK(tenths.lr(5) == 0.010000000000000002);
  CHECK(tenths.lr(8) == 0.00010000000000000002);  // chained: 0.00010000000000000003
  CHECK(optim::Constant(0.25).lr(12345) == 0.25);
}

TEST_CASE("schedules refuse bad arguments by name") {
  CHECK(message_of([] { optim::WarmupCosine(0.0, 1, 2); }) ==
        "[warmup_cosine] peak_lr must be a positive finite number, got 0");
  CHECK(message_of([] { optim::WarmupCosine(1.0, 1, 2, 2.0); }) ==
        "[warmup_cosine] min_lr must be in [0, peak_lr] = [0, 1], got 2");
  CHECK(message_of([] { optim::WarmupCosine(1.0, 5, 2); }) ==
        "[warmup_cosine] the steps need 0 <= warmup_steps <= total_steps, got warmup_steps 5 and total_steps 2");
  CHECK(message_of([] { optim::StepLR(0.1, 0); }) == "[step_lr] step_size must be >= 1, got 0");
  CHECK(message_of([] { optim::StepLR(0.1, 1, -0.5); }) == "[step_lr] gamma must be a positive finite number, got -0.5");
  CHECK(message_of([] { optim::Constant(1.0).lr(-1); }) == "[constant] step must be >= 0, got -1");
}

// Tensor: handles and storage, dtypes and conversions, versions, and the host block cache.
#include <doctest/doctest.h>

#include <set>

#include "messages.hpp"
#include "tapegrad/tensor/tensor.hpp"

using namespace tapegrad;
using tapegrad::testing::host_memory;
using tapegrad::testing::message_of;

TEST_CASE("a Tensor is a handle: copies share bytes, clone() copies them, reshape shares them") {
  Tensor a = Tensor::from_doubles({1, 2, 3, 4, 5, 6}, Shape{2, 3}, DType::f64);
  Tensor b = a;
  CHECK(b.raw_data() == a.raw_data());
  CHECK_FALSE(a.unique());
  Tensor c = a.clone();
  CHECK(c.raw_data() != a.raw_data());
  c.mutable_data<double>()[0] = 10;
  CHECK(a.to_doubles()[0] == 1);
  Tensor r = a.reshape(Shape{3, 2});
  CHECK(r.raw_data() == a.raw_data());
  CHECK(r.shape() == Shape{3, 2});
  CHECK(message_of([&] { a.reshape(Shape{4}); }) == "[reshape] cannot reshape (2, 3) (6 elements) to (4,) (4 elements)");
  CHECK(a.nbytes() == 48);
  CHECK(Tensor::zeros(Shape{0, 5}, DType::f32).numel() == 0);
}

TEST_CASE("a Shape's element count is checked where the Shape is made or changed") {
  CHECK(message_of([] { Shape{4611686018427387905, 4}; }) ==
        "[shape] (4611686018427387905, 4) has more elements than fit in 64 bits");
  const std::vector<int64_t> dims{3037000500, 3037000500};  // the square just above INT64_MAX
  CHECK(message_of([&] { Shape(dims.begin(), dims.end()); }) ==
        "[shape] (3037000500, 3037000500) has more elements than fit in 64 bits");
  CHECK(Shape{3037000499, 3037000499}.numel() == int64_t{3037000499} * 3037000499);

  Shape s{1 << 20, 1 << 20};
  CHECK(message_of([&] { s.push_back(int64_t{1} << 23); }) ==
        "[shape] (1048576, 1048576, 8388608) has more elements than fit in 64 bits");
  CHECK(s == Shape{1 << 20, 1 << 20});  // a refused push_back leaves the Shape as it was
  CHECK(s.numel() == int64_t{1} << 40);
  CHECK(message_of([&] { s.push_back(-1); }) == "[shape] negative extent -1");
  CHECK(message_of([] { Shape{1, 1, 1, 1, 1, 1, 1}; }) == "[shape] tensors have at most 6 dimensions");

  s.set(1, 3);
  CHECK(s == Shape{1 << 20, 3});
  CHECK(s.numel() == 3 << 20);
  CHECK(message_of([&] { s.set(1, INT64_MAX); }) ==
        "[shape] (1048576, 9223372036854775807) has more elements than fit in 64 bits");
  CHECK(message_of([&] { s.set(0, -2); }) == "[shape] negative extent -2");
  CHECK(message_of([&] { s.set(2, 1); }) == "[shape] set(2, 1) on (1048576, 3), which has 2 dimensions");
  CHECK(s == Shape{1 << 20, 3});
  CHECK(s.numel() == 3 << 20);
  s.set(0, 0);
  CHECK(s.numel() == 0);

  // An extent of 0 gives 0 elements, but the other extents' product (the strides) must still fit.
  CHECK(Shape{0, INT64_MAX}.numel() == 0);
  CHECK(message_of([] { Shape{INT64_MAX, 0, 2}; }) ==
        "[shape] (9223372036854775807, 0, 2) has more elements than fit in 64 bits");
}

TEST_CASE("Tensor::empty refuses a byte count that does not fit a size_t") {
  CHECK(message_of([] { Tensor::empty(Shape{int64_t{1} << 61}, DType::f64); }) ==
        "[empty] a f64 tensor of shape (2305843009213693952,) (2305843009213693952 elements of 8 bytes) needs more "
        "bytes than fit in 64 bits");
  CHECK(message_of([] { Tensor::zeros(Shape{int64_t{1} << 31, int64_t{1} << 31}, DType::f32); }) ==
        "[zeros] a f32 tensor of shape (2147483648, 2147483648) (4611686018427387904 elements of 4 bytes) needs more "
        "bytes than fit in 64 bits");
}

TEST_CASE("a tensor larger than the host's memory is refused by name, shape and bytes, not a bare bad_alloc") {
  // 64 TiB: more than any host (the (200000, 200000) is 149 GiB, which a large host has)
  const auto refused = [] { Tensor::zeros(Shape{int64_t{1} << 22, int64_t{1} << 22}, DType::f32); };
  CHECK_THROWS_AS(refused(), OutOfMemory);
  CHECK(message_of(refused) == "[zeros] a f32 tensor of shape (4194304, 4194304) needs 70368744177664 bytes "
                               "(64.0 TiB), more than this host's memory and swap (" + host_memory() + ")");
  CHECK(message_of([] { Tensor::empty(Shape{(int64_t{1} << 61) - 1}, DType::f64); }) ==
        "[empty] a f64 tensor of shape (2305843009213693951,) needs 18446744073709551608 bytes (16.0 EiB), more than "
        "this host's memory and swap (" + host_memory() + ")");
}

TEST_CASE("every dtype converts through from_doubles and to_doubles") {
  const std::vector<double> v{-2.5, 0, 1, 3.25};
  for (DType t : {DType::f64, DType::f32, DType::bf16, DType::f16}) {
    CAPTURE(dtype_name(t));
    CHECK(Tensor::from_doubles(v, Shape{4}, t).to_doubles() == v);
  }
  CHECK(Tensor::from_doubles({-3, 7}, Shape{2}, DType::i32).to_doubles() == std::vector<double>{-3, 7});
  CHECK(Tensor::from_doubles({-3, 7}, Shape{2}, DType::i64).to_doubles() == std::vector<double>{-3, 7});
  CHECK(Tensor::scalar(2.5, DType::f32).item() == 2.5);
  CHECK(message_of([] { Tensor::from_doubles({1, 2, 3}, Shape{2}, DType::f32); }) ==
        "[tensor] 3 values do not fill shape (2,) (2 elements)");
  CHECK(message_of([] { Tensor::from_doubles({1, 2}, Shape{2}, DType::f32).item(); }) ==
        "[item] needs a tensor of one element, got shape (2,)");
  Tensor f = Tensor::zeros(Shape{2}, DType::f32);
  CHECK(message_of([&] { f.data<double>(); }) == "[tensor] data<f64>() on a f32 tensor");
  CHECK(message_of([&] { f.mutable_data<int32_t>(); }) == "[tensor] mutable_data<i32>() on a f32 tensor");
}

TEST_CASE("an undefined tensor has no elements, and every accessor says what to do") {
  const Tensor none;
  CHECK_FALSE(none.defined());
  CHECK(none.numel() == 0);
  CHECK(none.nbytes() == 0);
  CHECK(none.raw_data() == nullptr);  // a kernel's optional operand
  const std::string hint =
      " of an undefined tensor: it holds no value (a default-constructed Tensor, or the gradient of a value no "
      "gradient reached, such as a parameter the loss did not use or one after zero_grad()); check defined() first";
  CHECK(message_of([&] { (void)none.shape(); }) == "[tensor] shape()" + hint);
  CHECK(message_of([&] { (void)none.ndim(); }) == "[tensor] shape()" + hint);
  CHECK(message_of([&] { (void)none.dim(0); }) == "[tensor] shape()" + hint);
  CHECK(message_of([&] { (void)none.dtype(); }) == "[tensor] dtype()" + hint);
  CHECK(message_of([&] { (void)none.device(); }) == "[tensor] device()" + hint);
  CHECK(message_of([&] { (void)none.item(); }) == "[tensor] item()" + hint);
  CHECK(message_of([&] { (void)none.to_doubles(); }) == "[tensor] to_doubles()" + hint);
  CHECK(message_of([&] { (void)none.data<float>(); }) == "[tensor] data" + hint);
  CHECK(message_of([&] { (void)none.reshape(Shape{1}); }) == "[tensor] reshape()" + hint);
  Tensor target;
  CHECK(message_of([&] { (void)target.mutable_data<float>(); }) == "[tensor] mutable_data" + hint);
  CHECK(message_of([&] { target.copy_from(Tensor::zeros(Shape{1}, DType::f32)); }) == "[tensor] copy_from()" + hint);
  Tensor one = Tensor::zeros(Shape{1}, DType::f32);
  CHECK(message_of([&] { one.copy_from(none); }) == "[tensor] copy_from() from" + hint);
}

TEST_CASE("in-place writes move the storage's version; reads do not") {
  Tensor a = Tensor::zeros(Shape{3}, DType::f32);
  const uint32_t v0 = a.version();
  Tensor view = a.reshape(Shape{3, 1});
  (void)a.data<float>();
  (void)a.to_doubles();
  CHECK(a.version() == v0);
  a.copy_from(Tensor::from_doubles({1, 2, 3}, Shape{3}, DType::f32));
  CHECK(a.version() == v0 + 1);
  view.zero_();  // one storage, one count
  CHECK(a.version() == v0 + 2);
  a.mutable_data<float>()[1] = 5;
  CHECK(a.version() == v0 + 3);
  CHECK(a.clone().version() != a.version() + 100);  // a clone counts on its own
  CHECK(message_of([&] { a.copy_from(Tensor::zeros(Shape{2}, DType::f32)); }) ==
        "[copy] cannot copy a f32 (2,) tensor into a f32 (3,) one");
}

TEST_CASE("the host block cache: freed blocks are reused by size class, data is 64-byte aligned") {
  std::set<const void*> seen;
  for (size_t bytes : {1, 60, 64, 100, 4096, 70000, 300000}) {
    CAPTURE(bytes);
    const Shape s{static_cast<int64_t>(bytes)};
    const void* first;
    {
      Tensor t = Tensor::empty(s, DType::i32);
      first = t.raw_data();
      CHECK(reinterpret_cast<uintptr_t>(first) % 64 == 0);
      t.mutable_data<int32_t>()[0] = 7;  // the whole block is ours to write
      t.mutable_data<int32_t>()[bytes - 1] = 7;
    }
#if !defined(__SANITIZE_ADDRESS__)  // AddressSanitizer builds give every block back to malloc
    Tensor again = Tensor::empty(s, DType::i32);  // the block just freed, from this thread's cache
    CHECK(again.raw_data() == first);
#endif
  }
  // blocks held at once are distinct
  std::vector<Tensor> live;
  for (int k = 0; k < 50; ++k) {
    live.push_back(Tensor::empty(Shape{16}, DType::f32));
    CHECK(seen.insert(live.back().raw_data()).second);
  }
}

TEST_CASE("devices: a CUDA tensor in a build or on a machine without one is a clear error") {
  CHECK(parse_device("cpu") == Device::cpu());
  CHECK(parse_device("cuda:3") == Device::cuda(3));
  CHECK(message_of([] { parse_device("gpu"); }) == "[device] unknown device 'gpu': expected cpu, cuda or cuda:N");
}

TEST_CASE("flat_view shares a range of the bytes and their version count") {
  Tensor base = Tensor::from_doubles({0, 1, 2, 3, 4, 5}, Shape{2, 3}, DType::f64);
  Tensor row = base.flat_view(3, Shape{3});  // row 1
  CHECK(row.to_doubles() == std::vector<double>{3, 4, 5});
  CHECK(row.raw_data() == static_cast<double*>(base.raw_data()) + 3);
  const uint32_t version = base.version();
  row.zero_();
  CHECK(base.to_doubles() == std::vector<double>{0, 1, 2, 0, 0, 0});
  CHECK(base.version() == version + 1);  // a write through the view is a write to the base
  Tensor tail = row.flat_view(1, Shape{2, 1});  // a view of a view: of the base
  tail.copy_from(Tensor::from_doubles({7, 8}, Shape{2, 1}, DType::f64));
  CHECK(base.to_doubles() == std::vector<double>{0, 1, 2, 0, 7, 8});
  CHECK_FALSE(row.unique());  // the base is held elsewhere: its bytes are not the view's alone
  Tensor alone = Tensor::zeros(Shape{4}, DType::f32).flat_view(2, Shape{2});
  CHECK(alone.unique());  // the view holds its base alone
  alone.copy_from(Tensor::from_doubles({1, 2}, Shape{2}, DType::f32));
  CHECK(alone.to_doubles() == std::vector<double>{1, 2});
  CHECK(message_of([&] { (void)base.flat_view(4, Shape{3}); }) ==
        "[flat_view] elements 4 to 7 (shape (3,)) are not inside a tensor of 6 elements (shape (2, 3))");
  CHECK(message_of([&] { (void)base.flat_view(-1, Shape{1}); }) ==
        "[flat_view] elements -1 to 0 (shape (1,)) are not inside a tensor of 6 elements (shape (2, 3))");
  CHECK(base.flat_view(6, Shape{0}).numel() == 0);
}

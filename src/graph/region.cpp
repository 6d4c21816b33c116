// Regions of a gradient (see region.hpp).
//
// Note [regions]
// A slice's backward once made a dense gradient of its whole input, zeros but for its part, and
// handed it to accumulate, which added all of it. An RNN that slices a precomputed (B, T, 4H)
// projection once a time step then paid T passes over the whole projection: a backward of order
// T^2. The door for parts takes the part alone and where it lies (a region: a strided view of the
// input's elements), and adds it there: the first contribution to a value starts its gradient from
// zeros, once, and each part costs its own size after that. Everything else is the door's as for
// a whole contribution: the shape, dtype and device are checked (and the region's bounds); the
// overwrite-bug mode writes the region and leaves the rest of the gradient as it was, so parts
// that do not overlap (a split's, one time step's) do not clobber each other, and parts that meet
// lose all but the last; a record logs the part with its region (docs/tape-format.md).
//
// The sums are the dense path's in every element the part covers (the same additions, in the same
// order of contributions, each rounded once as binary's add rounds it). Outside it the dense path
// added +0, which changes nothing but the sign of a zero: an element whose every contribution so
// far was -0 stays -0 here, where the dense path made it +0.
#include "tapegrad/graph/region.hpp"

#include <array>
#include <utility>

#include "tapegrad/graph/graph.hpp"
#include "tapegrad/kernels/kernels.hpp"

namespace tapegrad {

namespace {

std::string strides_str(const kernels::View& r) {
  std::string s = "(";
  for (int d = 0; d < r.shape.ndim(); ++d) s += (d ? ", " : "") + std::to_string(r.stride[static_cast<size_t>(d)]);
  return s + (r.shape.ndim() == 1 ? ",)" : ")");
}

std::string walk_str(const kernels::View& r) {
  return "offset " + std::to_string(r.offset) + ", shape " + r.shape.str() + ", strides " + strides_str(r);
}

// What is wrong with a region of an input of numel elements (nullptr when each element it names is
// inside the input and named once: see check_region).
constexpr const char* kPast = "reaches past the input's elements";
const char* region_fault(const kernels::View& r, int64_t numel) {
  if (r.shape.numel() == 0) return nullptr;
  int64_t last = r.offset;  // the largest element named
  std::array<std::pair<int64_t, int64_t>, kernels::kMaxDims> axes;  // (stride, extent) of the axes that step
  int stepping = 0;
  for (int d = 0; d < r.shape.ndim(); ++d) {
    const int64_t n = r.shape[d], s = r.stride[static_cast<size_t>(d)];
    if (n == 1) continue;
    if (s < 0) return "steps backwards";
    int64_t span = 0;
    if (__builtin_mul_overflow(n - 1, s, &span) || __builtin_add_overflow(last, span, &last)) return kPast;
    axes[static_cast<size_t>(stepping++)] = {s, n};
  }
  if (r.offset < 0 || last >= numel) return kPast;
  for (int a = 1; a < stepping; ++a)  // by stride (an insertion sort: std::sort's trips GCC 12's -Warray-bounds)
    for (int b = a; b > 0 && axes[static_cast<size_t>(b)] < axes[static_cast<size_t>(b - 1)]; --b)
      std::swap(axes[static_cast<size_t>(b)], axes[static_cast<size_t>(b - 1)]);
  int64_t reach = 0;  // the largest step the axes so far take together
  for (int a = 0; a < stepping; ++a) {
    const auto [s, n] = axes[static_cast<size_t>(a)];
    if (s <= reach) return "names an element twice";
    reach += (n - 1) * s;
  }
  return nullptr;
}

}  // namespace

void check_region(const char* op, int k, const Tensor& target, const Tensor& c, const kernels::View& region) {
  auto head = [&] { return std::string("[engine] the backward of ") + op + " gave input " + std::to_string(k); };
  if (!(c.shape() == region.shape) || c.dtype() != target.dtype() || !(c.device() == target.device()))
    throw Error(head() + " a part of shape " + c.shape().str() + " " + dtype_name(c.dtype()) + " on " + c.device().str() +
                " for a region of shape " + region.shape.str() + " of that input, which is " + target.shape().str() +
                " " + dtype_name(target.dtype()) + " on " + target.device().str());
  if (const char* fault = region_fault(region, target.numel()))
    throw Error(head() + " a region (" + walk_str(region) + ") that " +
                (fault == kPast ? "reaches past the input's " + std::to_string(target.numel()) + " elements" : fault) +
                "; that input is " + target.shape().str());
}

// The door for parts (declared with the others in graph.hpp; it lives here to keep the engine
// small): zeros first when the gradient has none; then the region's elements added to, or in the
// overwrite-bug mode written, and the rest left as it is.
void BackwardContext::accumulate(int k, const Tensor& contribution, const kernels::View& region) {
  Value& target = g_.mutable_value(node_->inputs[k]);
  if (!target.requires_grad) return;
  check_region(node_->op, k, target.data, contribution, region);
  if (anomaly_) check_anomaly(k, contribution, "a part");
  if (target.sparse_grad.defined())  // a row-sparse gradient meets a part as bytes
    target.grad = std::exchange(target.sparse_grad, RowSparse()).to_dense(target.data.shape());
  const bool fresh = !target.grad.defined();
  if (fresh) target.grad = Tensor::zeros(target.data.shape(), target.data.dtype(), target.data.device());
  else if (!target.grad.unique()) target.grad = target.grad.clone();  // never write bytes another handle holds
  Tensor discarded = !fresh && options_.overwrite_bug && options_.record ? copy_region(target.grad, region) : Tensor();
  const kernels::View whole = kernels::contiguous_view(contribution.shape());
  if (fresh || options_.overwrite_bug) kernels::copy_strided(contribution, whole, target.grad, region);
  else kernels::add_strided(contribution, whole, target.grad, region);
  target.grad.mark_modified();
  if (!options_.record) return;
  log(k, fresh ? GradEvent::Kind::set : options_.overwrite_bug ? GradEvent::Kind::overwritten : GradEvent::Kind::added,
      contribution, std::move(discarded));
  options_.record->events.back().region = region;
}

Tensor copy_region(const Tensor& t, const kernels::View& region) {
  Tensor out = Tensor::empty(region.shape, t.dtype(), t.device());
  kernels::copy_strided(t, region, out, kernels::contiguous_view(region.shape));
  return out;
}

std::string region_str(const Shape& shape, const kernels::View& region) {
  const kernels::View whole = kernels::contiguous_view(shape);
  bool box = region.shape.ndim() == shape.ndim() && region.offset >= 0;
  std::string s = "[";
  int64_t rest = region.offset;
  for (int d = 0; box && d < shape.ndim(); ++d) {
    const int64_t R = whole.stride[static_cast<size_t>(d)], n = region.shape[d];
    const int64_t start = R == 0 ? 0 : rest / R;
    rest -= start * R;
    box = (n == 1 || region.stride[static_cast<size_t>(d)] == R) && start + n <= shape[d];
    s += (d ? ", " : "") + (start == 0 && n == shape[d] ? std::string(":") : std::to_string(start) + ":" + std::to_string(start + n));
  }
  if (box && rest == 0) return s + "]";
  return walk_str(region);
}

}  // namespace tapegrad

// Regions: the part of a value's elements that a gradient contribution covers, for the engine's
// door for parts (BackwardContext::accumulate(k, contribution, region); Note [regions] in
// region.cpp). A region is a kernels::View of the value's contiguous elements: element i of the
// contribution (row-major over region.shape) lands on element offset + sum_d i_d * stride[d].
#pragma once

#include <string>

#include "tapegrad/kernels/strided.hpp"
#include "tapegrad/tensor/tensor.hpp"

namespace tapegrad {

// Throws "[engine] the backward of OP gave input K ..." naming both shapes unless the contribution
// has the region's shape and the target's dtype and device, and the region names elements of the
// target, each at most once (strides >= 0; sorted by stride, each axis steps past every element of
// the axes below it: a slice, a box, a column, a diagonal).
void check_region(const char* op, int k, const Tensor& target, const Tensor& contribution, const kernels::View& region);

// The elements of t that region names, as a contiguous tensor of region.shape.
Tensor copy_region(const Tensor& t, const kernels::View& region);

// How a person reads a region of a contiguous `shape`: Python's indexing where it is a box (each
// axis a range of the value's own axis: a slice's region is "[:, 3:4, :]"), else its walk
// ("offset 40, shape (2, 4), strides (12, 1)").
std::string region_str(const Shape& shape, const kernels::View& region);

}  // namespace tapegrad

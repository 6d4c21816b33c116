// Plain-text building blocks shared by `tape show`, `tape step` and `tape dot`: numbers, tensors
// and aligned tables.
//
// Rule: numbers are shown with 4 significant digits (the dump keeps every digit); a tensor is
// shown by its elements when it has few enough, and a cut is always said ("…", "first 8 of 120").
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "tape_file.hpp"

namespace tape {

// 4 significant digits, integers exact, "nan"/"inf" for non-finite values: -0.02365, 1.002e-11.
std::string number(double x);

// One line: "1.295", "[0.2484, -0.3892]", "[[-0.18, -0.35], [0.15, -0.43], …]"; at most
// `max_elements` elements, then "…". A truncated dump shows its first elements and its statistics.
std::string inline_tensor(const TensorData& t, size_t max_elements = 8);

// Several lines, one per row, each prefixed by the row's name when there are names:
//   red    [-0.18, -0.35]
//   green  [0.15, -0.43]
// A 1-D tensor with names is one line "red: 0, green: 1, red: 0"; a tensor too large to list is its
// inline form. `highlight_row` marks one row with "<-".
std::vector<std::string> tensor_lines(const TensorData& t, const std::vector<std::string>& rows,
                                      int64_t highlight_row = -1);

// "#5": a value's place in record order, as every view writes it.
std::string index_tag(int index);

// "row 0 (red)" or "row 0" (a row without a name: none given, or "" for a vocabulary's padding).
std::string row_name(const Entry& e, int64_t row);

// A row or token name as it can be seen on a line: control characters escaped ("\n", "\x1b"),
// spaces at either end shown as "␣" (" the" -> "␣the", " " -> "␣"), as the page shows them.
std::string visible(const std::string& name);

// A value's elements as text: its tokens when it holds token ids (Entry::tokens: "[h, e, l, l, o,
// ␣, …] (first 8 of 1024)", an id outside the vocabulary as its number), else inline_tensor's.
std::string inline_value(const Tape& t, const Entry& e, const TensorData& data, size_t max_elements = 8);

// The part of `to` an event went to: "row 0 (red)", a region "[:, 3:4, :]", or "" for all of it.
std::string part_name(const Entry& to, const Event& ev);

// Element-wise a + b when both are whole and the same size, else an empty optional.
std::optional<std::vector<double>> sum_of(const TensorData& a, const TensorData& b);
// `values` shaped like `like` (for showing a computed tensor).
TensorData with_values(const TensorData& like, std::vector<double> values);

// Shape as Python prints a tuple: (3, 2), (4,), ().
std::string shape_str(const std::vector<int64_t>& shape);

// Display width of UTF-8 text (code points; the tool only uses one-column characters).
size_t display_width(const std::string& s);

// Columns padded to their widest cell, separated by two spaces, no trailing spaces.
class Table {
 public:
  explicit Table(std::vector<std::string> header) { rows_.push_back(std::move(header)); }
  void add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  std::string str(const std::string& indent = "") const;

 private:
  std::vector<std::vector<std::string>> rows_;
};

}  // namespace tape

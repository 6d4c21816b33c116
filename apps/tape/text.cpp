// Plain-text building blocks (see text.hpp for the rule they keep).
#include "text.hpp"

#include <cmath>
#include <cstdio>

namespace tape {

std::string number(double x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4g", x == 0 ? 0.0 : x);  // no "-0"
  return buf;
}

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + (shape.size() == 1 ? ",)" : ")");
}

size_t display_width(const std::string& s) {
  size_t w = 0;
  for (unsigned char c : s) w += (c & 0xC0) != 0x80;  // count lead bytes only
  return w;
}

namespace {

std::string list(const std::vector<double>& v, size_t begin, size_t end, bool more) {
  std::string s = "[";
  for (size_t i = begin; i < end; ++i) s += (i > begin ? ", " : "") + number(v[i]);
  return s + (more ? (end > begin ? ", …]" : "…]") : "]");
}

std::string stats(const TensorData& t) {
  return "min " + number(t.min) + ", max " + number(t.max) + ", mean " + number(t.mean) + ", std " + number(t.std);
}

}  // namespace

std::string inline_tensor(const TensorData& t, size_t max_elements) {
  if (t.truncated)
    return list(t.values, 0, std::min(t.values.size(), max_elements), true) + " (first " +
           std::to_string(std::min(t.values.size(), max_elements)) + " of " + std::to_string(t.count) + "; " +
           stats(t) + ")";
  if (t.shape.empty()) return number(t.values.at(0));
  if (t.values.empty()) return "[]";
  const size_t shown = std::min(t.values.size(), max_elements);
  if (t.shape.size() != 2) return list(t.values, 0, shown, shown < t.values.size());
  const size_t cols = static_cast<size_t>(t.shape[1]);
  std::string s = "[";
  size_t row = 0;
  for (; row * cols < shown; ++row) {
    const size_t begin = row * cols, end = std::min(begin + cols, shown);
    s += (row ? ", " : "") + list(t.values, begin, end, end < begin + cols);
  }
  return s + (row * cols < t.values.size() ? ", …]" : "]");
}

std::vector<std::string> tensor_lines(const TensorData& t, const std::vector<std::string>& rows, int64_t highlight_row) {
  constexpr size_t kMaxRows = 12;
  if (t.truncated || t.shape.empty() || t.shape.size() > 2) return {inline_tensor(t)};
  if (t.shape.size() == 1) {
    if (rows.empty()) return {inline_tensor(t, 16)};
    std::string s;
    for (size_t i = 0; i < t.values.size() && i < 16; ++i) s += (i ? ", " : "") + visible(rows[i]) + ": " + number(t.values[i]);
    return {s + (t.values.size() > 16 ? ", …" : "")};
  }
  const size_t n_rows = static_cast<size_t>(t.shape[0]), cols = static_cast<size_t>(t.shape[1]);
  size_t name_width = 0;
  for (const std::string& r : rows) name_width = std::max(name_width, display_width(visible(r)));
  std::vector<std::string> out;
  for (size_t r = 0; r < n_rows && r < kMaxRows; ++r) {
    std::string line;
    if (!rows.empty()) line = visible(rows[r]) + std::string(name_width - display_width(visible(rows[r])) + 2, ' ');
    line += list(t.values, r * cols, r * cols + std::min(cols, size_t{8}), cols > 8);
    if (static_cast<int64_t>(r) == highlight_row) line += "  <-";
    out.push_back(line);
  }
  if (n_rows > kMaxRows) out.push_back("… " + std::to_string(n_rows - kMaxRows) + " more rows");
  return out;
}

std::string index_tag(int index) {
  std::string s = "#";  // appended, not "#" + ...: GCC 12 warns falsely (-Wrestrict) on that form
  return s.append(std::to_string(index));
}

std::string row_name(const Entry& e, int64_t row) {
  std::string s = "row " + std::to_string(row);
  if (row >= 0 && static_cast<size_t>(row) < e.rows.size() && !e.rows[static_cast<size_t>(row)].empty())
    s += " (" + visible(e.rows[static_cast<size_t>(row)]) + ")";
  return s;
}

std::string visible(const std::string& name) {
  std::string s;
  for (const char c : name) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '\n') s += "\\n";
    else if (c == '\t') s += "\\t";
    else if (c == '\r') s += "\\r";
    else if (u < 0x20 || u == 0x7f) {
      const char hex[] = "0123456789abcdef";
      s += std::string("\\x") + hex[u >> 4] + hex[u & 15];
    } else {
      s += c;
    }
  }
  const size_t first = s.find_first_not_of(' '), last = s.find_last_not_of(' ');
  if (first == std::string::npos) {  // spaces only
    std::string out;
    for (size_t i = 0; i < s.size(); ++i) out += "␣";
    return out;
  }
  std::string out;
  for (size_t i = 0; i < first; ++i) out += "␣";
  out += s.substr(first, last - first + 1);
  for (size_t i = last + 1; i < s.size(); ++i) out += "␣";
  return out;
}

std::string inline_value(const Tape& t, const Entry& e, const TensorData& data, size_t max_elements) {
  if (!e.tokens || t.vocabulary.empty()) return inline_tensor(data, max_elements);
  std::string s = "[";
  const size_t shown = std::min(max_elements, data.values.size());
  for (size_t i = 0; i < shown; ++i) {
    const double id = data.values[i];
    const bool known = id >= 0 && id < static_cast<double>(t.vocabulary.size()) && id == static_cast<double>(static_cast<int64_t>(id));
    s += (i ? ", " : "") + (known ? visible(t.vocabulary[static_cast<size_t>(id)]) : number(id));
  }
  s += shown < data.values.size() || data.truncated ? ", …]" : "]";
  if (data.truncated || shown < static_cast<size_t>(data.count))
    s += " (first " + std::to_string(shown) + " of " + std::to_string(data.count) + ")";
  return s;
}

std::string part_name(const Entry& to, const Event& ev) {
  if (ev.row >= 0) return row_name(to, ev.row);
  return ev.region ? ev.region->index : "";
}

std::optional<std::vector<double>> sum_of(const TensorData& a, const TensorData& b) {
  if (a.truncated || b.truncated || a.values.size() != b.values.size()) return std::nullopt;
  std::vector<double> s(a.values.size());
  for (size_t i = 0; i < s.size(); ++i) s[i] = a.values[i] + b.values[i];
  return s;
}

TensorData with_values(const TensorData& like, std::vector<double> values) {
  TensorData t = like;
  t.values = std::move(values);
  return t;
}

std::string Table::str(const std::string& indent) const {
  std::vector<size_t> width;
  for (const auto& row : rows_)
    for (size_t c = 0; c < row.size(); ++c) {
      if (width.size() <= c) width.push_back(0);
      width[c] = std::max(width[c], display_width(row[c]));
    }
  std::string out;
  for (const auto& row : rows_) {
    std::string line = indent;
    for (size_t c = 0; c < row.size(); ++c) {
      line += row[c];
      if (c + 1 < row.size()) line += std::string(width[c] - display_width(row[c]) + 2, ' ');
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line + "\n";
  }
  return out;
}

}  // namespace tape

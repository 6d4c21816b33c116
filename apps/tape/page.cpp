// `tape html`: the page (see views.hpp). The page's HTML, CSS and JavaScript live in
// apps/tape/page/ and are embedded at build time; this file fills in the title and the dumps.
//
// Rule: the page is one file that needs nothing else: the dumps go in as JSON inside a
// <script type="application/json"> element, with every "<" written as \u003c so no text in a dump
// (a label, a title) can close that element. Beside each dump go its values grouped by scope
// (tape_file.hpp's Group), so the page and `tape show` group by one rule.
#include <algorithm>

#include "tapegrad/io/text.hpp"
#include "tapegrad/tensor/error.hpp"
#include "page_assets.hpp"
#include "views.hpp"

namespace tape {

namespace {

std::string script_safe_json(const json::Value& v) {
  std::string out;
  for (char c : json::dumps(v, -1)) out += c == '<' ? std::string("\\u003c") : std::string(1, c);
  return out;
}

// The tape's values grouped by scope (tape_file.hpp's Group), for the page's outline.
json::Value groups_json(const Tape& t) {
  auto ints = [](const std::vector<int>& v) {
    json::Value::Array out;
    for (int x : v) out.emplace_back(static_cast<int64_t>(x));
    return out;
  };
  json::Value::Array list;
  for (const Group& g : t.groups) {
    json::Value item = json::Value::Object{};
    item.set("name", g.name);
    item.set("parent", static_cast<int64_t>(g.parent));
    item.set("depth", static_cast<int64_t>(g.depth));
    item.set("children", ints(g.children));
    item.set("entries", ints(g.entries));
    item.set("first", static_cast<int64_t>(g.first));
    item.set("values", static_cast<int64_t>(g.values));
    item.set("nodes", static_cast<int64_t>(g.nodes));
    list.push_back(std::move(item));
  }
  return list;
}

std::string base_name(const std::string& path) { return path.substr(path.find_last_of('/') + 1); }

}  // namespace

std::string to_html(const std::vector<Tape>& tapes) {
  TG_CHECK(!tapes.empty(), "to_html needs at least one tape");
  json::Value::Array list;
  for (const Tape& t : tapes) {
    json::Value item = json::Value::Object{};
    item.set("file", base_name(t.path));
    item.set("dump", t.document);
    item.set("groups", groups_json(t));
    list.push_back(std::move(item));
  }
  const std::string title = tapes[0].title.empty() ? base_name(tapes[0].path) : tapes[0].title;
  const std::pair<std::string_view, std::string> fills[] = {
      {"title", tapegrad::io::xml_text(title)},
      {"style", std::string(assets::page_css)},
      {"script", std::string(assets::page_js)},
      {"tapes", script_safe_json(list)},
  };
  // One pass over the skeleton: what is filled in is never scanned again.
  const std::string_view skeleton = assets::page_html;
  std::string page;
  size_t at = 0;
  for (size_t open; (open = skeleton.find("{{", at)) != std::string_view::npos;) {
    const size_t close = skeleton.find("}}", open);
    TG_CHECK(close != std::string_view::npos, "page.html has an unclosed {{");
    const std::string_view name = skeleton.substr(open + 2, close - open - 2);
    const auto* fill = std::find_if(std::begin(fills), std::end(fills), [&](const auto& f) { return f.first == name; });
    TG_CHECK(fill != std::end(fills), "page.html names a placeholder page.cpp does not fill");
    page.append(skeleton.substr(at, open - at));
    page += fill->second;
    at = close + 2;
  }
  page.append(skeleton.substr(at));
  return page;
}

}  // namespace tape

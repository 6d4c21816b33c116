// nn::Module: a tree of layers whose parameters have PyTorch's dotted names.
//
// Rules:
// - A module owns no gradient code. Its forward calls ops:: and the engine differentiates it; its
//   parameters are ordinary graph parameters (Graph::parameter), so they persist across g.clear().
// - Names are PyTorch's: a parameter registered as "weight" in a child registered as "c_attn" of a
//   child "attn" of the third element of a list "blocks" is "blocks.3.attn.c_attn.weight". The
//   order is PyTorch's named_parameters() order: a module's own parameters in registration order,
//   then each child's, in registration order, depth first. Each parameter's graph label is its full
//   name, so tape dumps and errors say which layer a value belongs to.
// - Each forward opens its module's name scope (Graph::Scope, named by its path), so every node it
//   records says which layer made it; a child's nodes are in the child's scope ("h.0.attn.c_attn",
//   which the tape tools show inside "h.0.attn", inside "h.0").
// - A module is neither copied nor moved: a parent keeps pointers to its children. Children are
//   members (registered in the parent's constructor) or the elements of a ModuleList.
// - train(bool) and eval() set the mode of the module and of every descendant; dropout reads it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tapegrad/graph/graph.hpp"
#include "tapegrad/ops/fused/dropout.hpp"  // Generator

namespace tapegrad::nn {

// Where new parameters go and how they are drawn: each layer's constructor takes one. The
// generator initialises parameters (src/nn/init.hpp) and draws dropout masks; it must outlive the
// modules built with it. A model built twice from generators of one seed has the same bits.
struct Factory {
  Graph& graph;
  Generator& generator;
  DType dtype = DType::f32;  // f32 or f64
  Device device = Device::cpu();
};

class Module {
 public:
  Module() = default;
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // Every parameter of this module and its descendants with its dotted name, in PyTorch's order.
  std::vector<std::pair<std::string, Var>> named_parameters() const;
  std::vector<Var> parameters() const;
  int64_t parameter_count() const;  // elements, over every parameter
  // The direct children with their names, in registration order.
  const std::vector<std::pair<std::string, Module*>>& children() const { return children_; }
  // This module's full name in its tree ("blocks.3.attn"); "" for a root.
  const std::string& path() const { return path_; }
  // What the module is ("Linear", "Block"): for messages. A model class may name itself too.
  virtual const char* kind() const { return "Module"; }

  // The mode of this module and every descendant (PyTorch's train() and eval()).
  void train(bool on = true);
  void eval() { train(false); }
  bool training() const { return training_; }

 protected:
  // A new parameter `name` of this module, holding `value`, in `g`. Throws if the name is empty,
  // holds a '.' or white space, or is already a parameter or child of this module.
  Var register_parameter(const std::string& name, Tensor value, Graph& g);
  // `child` (a member of this module, or owned by it) becomes the child `name`; its parameters are
  // renamed under this module's path. Same name rules as register_parameter.
  template <class M> M& register_module(const std::string& name, M& child) {
    adopt(name, child);
    return child;
  }
  // "[Linear blocks.0.attn.c_attn] ": how this module's errors begin.
  std::string where() const;
  // y labelled with this module's path (when it has one): what a forward returns, so that tape
  // dumps show which layer made each value.
  Var labelled(Var y) const;
  // This module's name scope in `g`, for a forward to open first: `const auto s = scope(x.graph());`.
  // A root module (no path) keeps the scope its caller opened.
  Graph::Scope scope(Graph& g) const { return g.scope(path_); }

 private:
  void adopt(const std::string& name, Module& child);
  void check_name(const std::string& name) const;
  void set_path(const std::string& path);  // renames this module's parameters, then its children's
  void collect(const std::string& prefix, std::vector<std::pair<std::string, Var>>& out) const;

  std::vector<std::pair<std::string, Var>> params_;
  std::vector<std::pair<std::string, Module*>> children_;
  std::string path_;
  Module* parent_ = nullptr;
  bool training_ = true;
};

// An ordered list of modules of one kind, named "0", "1", ... (PyTorch's nn.ModuleList).
template <class M> class ModuleList : public Module {
 public:
  const char* kind() const override { return "ModuleList"; }
  // Builds M(args...) at the end of the list.
  template <class... Args> M& emplace_back(Args&&... args) {
    items_.push_back(std::make_unique<M>(std::forward<Args>(args)...));
    return register_module(std::to_string(items_.size() - 1), *items_.back());
  }
  size_t size() const { return items_.size(); }
  M& operator[](size_t i) { return *items_.at(i); }
  const M& operator[](size_t i) const { return *items_.at(i); }
  // for (M& block : blocks)
  struct iterator {
    typename std::vector<std::unique_ptr<M>>::const_iterator at;
    M& operator*() const { return **at; }
    iterator& operator++() { ++at; return *this; }
    bool operator!=(const iterator& o) const { return at != o.at; }
  };
  iterator begin() const { return {items_.begin()}; }
  iterator end() const { return {items_.end()}; }

 private:
  std::vector<std::unique_ptr<M>> items_;
};

}  // namespace tapegrad::nn

// State dicts: a module's parameters as named tensors, saved and loaded through the checkpoint
// envelope (src/io/envelope.hpp), and exported as safetensors for Python.
//
// Rules:
// - A state dict lists every parameter under its dotted name (Module::named_parameters order),
//   with its dtype, shape and bytes: host copies, so it is a snapshot that later steps do not move.
// - Loading checks everything before it writes anything: a tensor the model has and the state dict
//   lacks, one the state dict has and the model lacks, a shape or a dtype that differs, each is
//   named ("[state_dict] model.pt: missing tensor 'blocks.1.attn.c_attn.weight'"; all problems
//   are listed, separated by "; "), and the model is left exactly as it was. Only then does every
//   parameter take its tensor's bytes (on the parameter's device), bit for bit.
// - A file is one envelope of format 1 whose schema identity is the layout (Note [state dict
//   files] in state_dict.cpp) and whose single plane holds every tensor's bytes, so any dtype
//   round-trips bit for bit. Writes are atomic (io::write_file_atomic); a damaged file is refused
//   by the envelope's CRC, and a refused file is never written.
#pragma once

#include <string>
#include <vector>

#include "tapegrad/io/atomic_file.hpp"
#include "tapegrad/nn/module.hpp"
#include "tapegrad/optim/state.hpp"

namespace tapegrad::nn {

// (name, tensor) pairs, the type of an optimizer's state_tensors() too (src/optim/state.hpp), so a
// trainer can save a model's and its optimizer's state alike.
using StateDict = optim::NamedTensors;

// Host copies of every parameter of m, named and ordered as m.named_parameters().
StateDict state_dict(const Module& m);

// One file for a model and its optimizer: save_tensors(path, prefixed(state_dict(m), "model.") +
// opt.state_tensors()), then load_state_dict(m, under(tensors, "model.")) and
// opt.load_state(under(tensors, "adamw.", false)).
StateDict prefixed(const StateDict& tensors, const std::string& prefix);  // every name with prefix in front
// The tensors whose names start with `prefix`, in order, with it removed (strip) or kept.
StateDict under(const StateDict& tensors, const std::string& prefix, bool strip = true);

// A generator's place in its stream as two () i64 tensors, "<name>.seed" and "<name>.offset" (the
// u64 values' bits), and back: what a checkpoint of a run with dropout keeps for a bitwise resume.
// The load refuses, by name, a tensor missing or not a () i64, before it changes the generator.
StateDict generator_state(const Generator& gen, const std::string& name = "generator");
void load_generator_state(Generator& gen, const StateDict& tensors, const std::string& name = "generator");

// Every parameter of m takes the bytes of the tensor of its name in `tensors` (any order), after
// the checks of the rules above; messages begin "[state_dict] " and speak of "the state dict".
void load_state_dict(Module& m, const StateDict& tensors);

// What a file carries beside its tensors: the envelope's learner, data and seed identities (free
// text of the caller's choosing: an optimizer's settings, a corpus, how the model was seeded) and
// its step count.
struct StateDictFile {
  std::string learner, data, seed;
  uint64_t step = 0;
};

// Any named tensors (a model's, an optimizer's state, ...) to `path`, atomically. Names must be
// distinct, not empty, and hold no white space or control characters.
void save_tensors(const std::string& path, const StateDict& tensors, const StateDictFile& info = {});
// The tensors of a file written by save_tensors, in its order; `info`, when given, receives the
// rest. Refuses (tapegrad::RefusedFile, "[state_dict] PATH: ...") a damaged or malformed file.
StateDict load_tensors(const std::string& path, StateDictFile* info = nullptr,
                       size_t max_bytes = io::kDefaultMaxReadBytes);

// save_tensors(path, state_dict(m), info), and its inverse: load_tensors, then the checks and
// the copy of load_state_dict, with messages that name the file ("'wte.weight' has shape (65, 128)
// in the file but (50304, 128) in the model"). Returns the file's other fields.
void save_state_dict(const std::string& path, const Module& m, const StateDictFile& info = {});
StateDictFile load_state_dict(const std::string& path, Module& m);

// The safetensors format (Hugging Face's: a u64 little-endian header size, a JSON header naming
// each tensor's dtype, shape and byte range, then the bytes), which Python reads with a few lines
// of numpy or with the safetensors package: how PyTorch scripts get tapegrad's weights
// (docs/nn.md). import_safetensors reads it back, refusing a malformed file by name.
void export_safetensors(const std::string& path, const StateDict& tensors);
StateDict import_safetensors(const std::string& path, size_t max_bytes = io::kDefaultMaxReadBytes);

}  // namespace tapegrad::nn

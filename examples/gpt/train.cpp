// gpt train and gpt sample (train.hpp): the data, the training loop, checkpoints and bitwise
// resume, the CSV log and its SVG plot, and sampling with temperature and top-k.
//
// Note [what a checkpoint holds]
// One file of named tensors (nn::save_tensors, the checkpoint envelope: CRC-checked, written
// atomically):
//   model.*         the state dict (nn::state_dict)
//   adamw.*         AdamW's state (its step, groups, moments)
//   sparse_adamw.*  SparseAdamW's, with sparse value embeddings
//   generator.*     the dropout generator's place after the model was made (each micro-batch
//                   reseeds it: mask_seed)
//   vocab           (V,) u8: the characters in id order (absent for byte-level tokens)
// and, as the envelope's text fields, the run's settings (learner, with micro_batches, the M of
// the step's M micro-batches over all ranks), the data's identity (data), the seed and the step.
// The batch of micro-batch m of step s and its dropout masks are drawn from generators seeded by
// (seed, s, m) alone, and the learning rate is a function of s: so a run resumed at step s takes
// the same batches, rates and dropout masks as one that never stopped, on any number of ranks that
// makes the same M, and ends with the same bits.
#include "train.hpp"

#include <tapegrad/config.hpp>
#if TAPEGRAD_WITH_CUDA
#include <tapegrad/cuda/cuda.hpp>  // installed with the CUDA backend only
#endif
#include <tapegrad/io/atomic_file.hpp>
#include <tapegrad/io/envelope.hpp>
#include <tapegrad/io/text.hpp>
#include <tapegrad/optim/sparse.hpp>
#include <tapegrad/ops/value_embed.hpp>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <random>
#include <sstream>

#include "checks.hpp"
#include "corpus.hpp"
#include "outputs.hpp"
#include "sample.hpp"

namespace gpt {
namespace {

[[noreturn]] void refuse(const std::string& what) { throw Error(what); }

std::string fmt(double x) {
  char b[32];
  std::snprintf(b, sizeof b, "%.10g", x);
  return b;
}

// ---- data: a text as token ids, split 9:1 into train and validation

// The ids of a text, one byte each (its vocabulary has at most 256 tokens), held in the bytes the
// text was read into: the data costs its file's size in memory, once. --tokens random's ids (up to
// 50303) take two bytes each.
class TokenIds {
 public:
  explicit TokenIds(std::string narrow = {}) : narrow_(std::move(narrow)) {}
  explicit TokenIds(std::vector<uint16_t> wide) : wide_(std::move(wide)) {}
  size_t size() const { return wide_.empty() ? narrow_.size() : wide_.size(); }
  int32_t operator[](size_t i) const { return wide_.empty() ? static_cast<unsigned char>(narrow_[i]) : wide_[i]; }
  std::vector<int32_t> first(size_t n) const {  // ids [0, n)
    std::vector<int32_t> out;
    for (size_t i = 0; i < std::min(n, size()); ++i) out.push_back((*this)[i]);
    return out;
  }

 private:
  std::string narrow_;
  std::vector<uint16_t> wide_;
};

struct Data {
  TokenIds ids;
  std::string vocab;  // char-level: the distinct bytes, ascending (id = position); byte-level: empty
  int64_t V = 0;
  size_t split = 0;   // train: ids[0, split), validation: ids[split, n)
  std::string identity;
};

// GPT-2's vocabulary padded to a multiple of 64, for --tokens random
constexpr int64_t kRandomVocab = 50304;

// --tokens random: 2^21 ids drawn uniformly from [0, 50304) by a fixed generator, for timing the
// model at GPT-2's vocabulary (this example has no GPT-2 tokenizer); nothing in them to learn.
Data random_data() {
  Data d;
  d.V = kRandomVocab;
  std::mt19937_64 rng(0x72616e646f6dull);
  std::uniform_int_distribution<int32_t> id(0, static_cast<int32_t>(kRandomVocab - 1));
  std::vector<uint16_t> ids(size_t{1} << 21);
  for (uint16_t& v : ids) v = static_cast<uint16_t>(id(rng));
  d.ids = TokenIds(std::move(ids));
  d.split = d.ids.size() * 9 / 10;
  d.identity = "random vocab=" + std::to_string(d.V) + " length=" + std::to_string(d.ids.size());
  return d;
}

Data load_data(const std::string& path, bool bytes, int64_t block) {
  std::string text = path.empty() ? std::string(kCorpus) : io::read_file(path);
  const std::string name = path.empty() ? "the built-in corpus" : path;
  const size_t length = text.size();
  Data d;
  d.split = length * 9 / 10;
  const size_t need = static_cast<size_t>(block) + 1;  // one block and its next token
  if (d.split < need || length - d.split < need)
    refuse(name + " has " + std::to_string(length) + " bytes: too short for blocks of " + std::to_string(block) +
           " tokens (its train and validation parts, 9:1, need " + std::to_string(need) + " tokens each)");
  const uint32_t crc = io::crc32_of(text);
  if (bytes) {
    d.V = 256;  // a byte is its id
  } else {  // each byte becomes its id, in place: the vocabulary is the distinct bytes, ascending
    bool seen[256] = {};
    for (unsigned char c : text) seen[c] = true;
    unsigned char index[256] = {};
    for (int c = 0; c < 256; ++c)
      if (seen[c]) index[c] = static_cast<unsigned char>(d.vocab.size()), d.vocab.push_back(static_cast<char>(c));
    d.V = static_cast<int64_t>(d.vocab.size());
    for (char& c : text) c = static_cast<char>(index[static_cast<unsigned char>(c)]);
  }
  d.ids = TokenIds(std::move(text));
  d.identity = std::string(bytes ? "bytes" : "chars") + " vocab=" + std::to_string(d.V) +
               " length=" + std::to_string(length) + " crc32=" + std::to_string(crc);
  return d;
}

// B windows of T tokens from ids[begin, end): x and the next tokens y, (B, T) each.
// With `starts`, the windows' first positions too.
void draw_batch(const Data& d, std::mt19937_64& rng, size_t begin, size_t end, int64_t B, int64_t T,
                std::vector<int32_t>& x, std::vector<int32_t>& y, std::vector<size_t>* starts = nullptr) {
  std::uniform_int_distribution<size_t> start(begin, end - static_cast<size_t>(T) - 1);
  x.clear(), y.clear();
  if (starts) starts->clear();
  for (int64_t b = 0; b < B; ++b) {
    const size_t s = start(rng);
    if (starts) starts->push_back(s);
    for (size_t t = s; t < s + static_cast<size_t>(T); ++t) x.push_back(d.ids[t]);
    for (size_t t = s + 1; t < s + static_cast<size_t>(T) + 1; ++t) y.push_back(d.ids[t]);
  }
}

// The seeds of global micro-batch m of step s (0-based): its windows' generator, and its dropout
// masks'. Functions of (seed, s, m) alone, so a micro-batch draws the same whichever rank runs it.
// m = 0 keeps the windows of the runs before micro-batches.
uint64_t batch_seed(uint64_t seed, int64_t s, int64_t m) {
  return seed + 0x9e3779b97f4a7c15ull * static_cast<uint64_t>(s + 1) + 0xbf58476d1ce4e5b9ull * static_cast<uint64_t>(m);
}
uint64_t mask_seed(uint64_t seed, int64_t s, int64_t m) {
  uint64_t z = batch_seed(seed, s, m) ^ 0x6d61736b6d61736bull;  // splitmix64's finaliser
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// ", 2 ranks (mpi) of 4 micro-batches each, ZeRO-1": the job, for the first line
std::string job_text(const dist::Communicator& comm, int64_t A, bool zero) {
  std::string s;
  if (comm.size() > 1 || std::string(comm.backend()) != "single")
    s += "; " + std::to_string(comm.size()) + (comm.size() == 1 ? " rank (" : " ranks (") + comm.backend() + ")";
  if (A > 1 || !s.empty()) s += (s.empty() ? "; " : ", ") + std::to_string(A) + " micro-batch" + (A == 1 ? "" : "es") +
                                (s.empty() ? " a step" : " each");
  if (zero) s += ", ZeRO-1";
  return s;
}

// ---- the run's settings as text (the checkpoint's learner field) and back
std::string settings_text(const std::string& config, const Preset& p, DType dtype, const char* tokens, int64_t micro) {
  const Config& c = p.model;
  std::ostringstream s;
  s << "gpt config=" << config << " layers=" << c.layers << " heads=" << c.heads << " dim=" << c.dim
    << " block=" << c.block << " batch=" << c.batch << " dropout=" << fmt(c.dropout) << " value_embeds=" << c.value_embeds
    << " ve_mode=" << (c.ve_mode == ValueEmbeds::sparse ? "sparse" : "dense") << " dtype=" << dtype_name(dtype)
    << " products=" << dtype_name(c.products) << " gelu=" << (c.gelu_tanh ? "tanh" : "exact")
    << " tokens=" << tokens << " lr=" << fmt(p.lr) << " min_lr=" << fmt(p.min_lr)
    << " warmup=" << p.warmup << " decay_steps=" << p.decay_steps << " weight_decay=0.1 beta2=0.99 clip=1"
    << " micro_batches=" << micro;
  return s.str();
}

std::map<std::string, std::string> fields_of(const std::string& text) {
  std::map<std::string, std::string> out;
  std::istringstream in(text);
  for (std::string word; in >> word;)
    if (const size_t eq = word.find('='); eq != std::string::npos) out[word.substr(0, eq)] = word.substr(eq + 1);
  return out;
}

// The first setting that differs, in the order the run lists them: "layers=2 in the checkpoint,
// 6 in this run".
// micro_batches (M = N A) names the ranks and --accumulate that make it.
void check_same_settings(const std::string& path, const std::string& file, const std::string& run, int ranks,
                         int64_t accumulate) {
  const auto theirs = fields_of(file);
  if (theirs.empty() || file.rfind("gpt ", 0) != 0) refuse(path + " is not a gpt checkpoint (its settings: '" + file + "')");
  std::istringstream in(run);
  for (std::string word; in >> word;) {
    const size_t eq = word.find('=');
    if (eq == std::string::npos) continue;
    const std::string key = word.substr(0, eq), value = word.substr(eq + 1);
    auto it = theirs.find(key);
    // a setting added later reads as what the checkpoints from before it ran with
    const std::string had = it != theirs.end()         ? it->second
                            : key == "products"      ? "f32"
                            : key == "gelu"          ? "exact"
                            : key == "micro_batches" ? "1"
                                                     : "(absent)";
    if (had != value && key == "micro_batches")
      refuse(path + " was trained with " + had + " micro-batches a step, but this run makes " + value + " (" +
             std::to_string(ranks) + (ranks == 1 ? " rank" : " ranks") + " of --accumulate " + std::to_string(accumulate) +
             "): give ranks and --accumulate whose product is " + had + " (the same bits at any number of ranks), "
             "or start a fresh run");
    if (had != value)
      refuse(path + " was trained with " + key + "=" + had + ", but this run asks for " + key + "=" + value +
             " (give the same settings, or start a fresh run)");
  }
}

int64_t field_int(const std::map<std::string, std::string>& f, const std::string& path, const char* key, int64_t lo,
                  int64_t hi) {
  auto it = f.find(key);
  if (it == f.end()) refuse(path + ": the checkpoint's settings lack " + key);
  size_t used = 0;
  long long v = 0;
  try {
    v = std::stoll(it->second, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != it->second.size() || v < lo || v > hi)
    refuse(path + ": the checkpoint's " + key + "=" + it->second + " is not an integer from " + std::to_string(lo) +
           " to " + std::to_string(hi));
  return v;
}

// ---- the log: one row per step, kept in memory, written (with its plot) atomically
struct LogRow {
  int64_t step;
  double loss, val, lr, tokens_per_s;  // val: NaN where not evaluated
};

// Rows of an earlier run's log up to `step` (a resumed run's history), or none if there is no file.
// Their steps must be positive and rise from row to row, as a run writes them.
std::vector<LogRow> read_log(const std::string& path, int64_t step) {
  std::vector<LogRow> rows;
  if (!io::file_exists(path)) return rows;
  std::istringstream in(io::read_file(path));
  std::string line;
  if (!std::getline(in, line) || line != "step,loss,val_loss,lr,tokens_per_s")
    refuse(path + " is not a gpt log (its first line is not 'step,loss,val_loss,lr,tokens_per_s'); "
                  "give another --log");
  long long previous = 0;
  for (int n = 2; std::getline(in, line); ++n) {
    LogRow r{};
    char val[64] = "";
    long long s = 0;
    if (std::sscanf(line.c_str(), "%lld,%lf,%63[^,],%lf,%lf", &s, &r.loss, val, &r.lr, &r.tokens_per_s) != 5 &&
        std::sscanf(line.c_str(), "%lld,%lf,,%lf,%lf", &s, &r.loss, &r.lr, &r.tokens_per_s) != 4)
      refuse(path + ": line " + std::to_string(n) + " is not a log row: '" + line + "'");
    if (s <= previous)
      refuse(path + ": line " + std::to_string(n) + " is the row of step " + std::to_string(s) + ", after step " +
             std::to_string(previous) + ": steps count up from 1 in a log gpt writes; give another --log");
    previous = s;
    r.step = s;
    r.val = val[0] ? std::strtod(val, nullptr) : NAN;
    if (r.step <= step) rows.push_back(r);
  }
  return rows;
}

// An SVG of the train loss (every step) and the validation loss (where evaluated) against the step.
std::string plot_svg(const std::vector<LogRow>& rows, const std::string& title) {
  const double W = 720, H = 420, left = 60, right = 20, top = 40, bottom = 50;
  double lo = INFINITY, hi = -INFINITY;
  const int64_t s0 = rows.empty() ? 0 : rows.front().step, s1 = rows.empty() ? 1 : rows.back().step;
  for (const LogRow& r : rows)
    for (double v : {r.loss, r.val})
      if (std::isfinite(v)) lo = std::min(lo, v), hi = std::max(hi, v);
  if (!(lo < hi)) lo = std::isfinite(lo) ? lo - 1 : 0, hi = lo + 2;
  // the step axis in doubles: any two int64 steps have a finite span (read_log keeps them positive)
  const double first = static_cast<double>(s0), span = s1 > s0 ? static_cast<double>(s1) - first : 1.0;
  auto X = [&](double s) { return left + (s - first) / span * (W - left - right); };
  auto Y = [&](double v) { return top + (hi - v) / (hi - lo) * (H - top - bottom); };
  std::ostringstream o;
  o.setf(std::ios::fixed);
  o.precision(1);
  o << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << W << "\" height=\"" << H << "\" viewBox=\"0 0 " << W << ' '
    << H << "\" font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
    << "<text x=\"" << W / 2 << "\" y=\"22\" text-anchor=\"middle\" font-size=\"14\">" << io::xml_text(title)
    << "</text>\n";
  for (int k = 0; k <= 4; ++k) {  // loss grid lines and labels
    const double v = lo + (hi - lo) * k / 4;
    o << "<line x1=\"" << left << "\" x2=\"" << W - right << "\" y1=\"" << Y(v) << "\" y2=\"" << Y(v)
      << "\" stroke=\"#ddd\"/><text x=\"" << left - 6 << "\" y=\"" << Y(v) + 4 << "\" text-anchor=\"end\">";
    o.precision(2);
    o << v << "</text>\n";
    o.precision(1);
  }
  for (int k = 0; k <= 4; ++k) {
    const double s = first + span * k / 4;
    o << "<text x=\"" << X(s) << "\" y=\"" << H - bottom + 18 << "\" text-anchor=\"middle\">" << std::llround(s)
      << "</text>\n";
  }
  o << "<text x=\"" << W / 2 << "\" y=\"" << H - 12 << "\" text-anchor=\"middle\">step</text>\n"
    << "<text x=\"16\" y=\"" << H / 2 << "\" transform=\"rotate(-90 16 " << H / 2 << ")\" text-anchor=\"middle\">loss</text>\n";
  auto line = [&](const char* id, const char* colour, auto value) {
    o << "<polyline id=\"" << id << "\" fill=\"none\" stroke=\"" << colour << "\" stroke-width=\"1.5\" points=\"";
    for (const LogRow& r : rows)
      if (std::isfinite(value(r))) o << X(static_cast<double>(r.step)) << ',' << Y(value(r)) << ' ';
    o << "\"/>\n";
  };
  line("train", "#1f77b4", [](const LogRow& r) { return r.loss; });
  line("validation", "#d62728", [](const LogRow& r) { return r.val; });
  o << "<text x=\"" << W - right - 150 << "\" y=\"" << top + 4 << "\" fill=\"#1f77b4\">train loss</text>\n"
    << "<text x=\"" << W - right - 150 << "\" y=\"" << top + 20 << "\" fill=\"#d62728\">validation loss</text>\n</svg>\n";
  return o.str();
}

void write_log(const std::string& path, const std::vector<LogRow>& rows, const std::string& title) {
  std::ostringstream csv;
  csv << "step,loss,val_loss,lr,tokens_per_s\n";
  for (const LogRow& r : rows)
    csv << r.step << ',' << fmt(r.loss) << ',' << (std::isfinite(r.val) ? fmt(r.val) : "") << ',' << fmt(r.lr) << ','
        << fmt(r.tokens_per_s) << '\n';
  io::write_file_atomic(path, csv.str());
  io::write_file_atomic(plot_path(path), plot_svg(rows, title));
}

std::string seconds_text(double s) {
  char b[32];
  if (s < 60) std::snprintf(b, sizeof b, "%.0fs", s);
  else if (s < 3600) std::snprintf(b, sizeof b, "%dm%02ds", static_cast<int>(s / 60), static_cast<int>(s) % 60);
  else std::snprintf(b, sizeof b, "%dh%02dm", static_cast<int>(s / 3600), static_cast<int>(s / 60) % 60);
  return b;
}

// The text of ids: vocab[id] for a character-level model, the byte id for a byte-level one.
std::string decode(const std::string& vocab, const std::vector<int32_t>& ids) {
  std::string s;
  for (int32_t id : ids) s.push_back(vocab.empty() ? static_cast<char>(id) : vocab[static_cast<size_t>(id)]);
  return s;
}

}  // namespace

Preset preset(const std::string& name) {
  Preset p;
  if (name == "tiny") {  // L2 H4 C128 T64 B16: seconds on a laptop's CPU
    p.model = {.block = 64, .dim = 128, .heads = 4, .layers = 2, .batch = 16};
    p.warmup = 20, p.decay_steps = 2000, p.eval_every = 50, p.eval_batches = 8;
  } else if (name == "small") {  // nanoGPT's shakespeare_char: L6 H6 C384 T256 B64, dropout 0.2
    p.model = {.block = 256, .dim = 384, .heads = 6, .layers = 6, .batch = 64, .dropout = 0.2};
    p.warmup = 100, p.decay_steps = 5000, p.eval_every = 250, p.eval_batches = 20;
  } else if (name == "gpt2") {  // GPT-2 124M's sizes (nanoGPT's train_gpt2 schedule): L12 H12 C768 T1024 B16
    p.model = {.block = 1024, .dim = 768, .heads = 12, .layers = 12, .batch = 16};
    p.lr = 6e-4, p.min_lr = 6e-5, p.warmup = 2000, p.decay_steps = 600000, p.eval_every = 1000, p.eval_batches = 10;
  } else {
    refuse("unknown --config '" + name + "': tiny (L2 H4 C128 T64 B16), small (L6 H6 C384 T256 B64) or gpt2 "
           "(L12 H12 C768 T1024 B16)");
  }
  return p;
}

// train's body, on every rank of the job `comm` joined on `device`. On rank 0, Outputs
// (outputs.hpp) checked the files and holds their locks, and puts them back when this throws; the
// other ranks write nothing (outputs is null).
static int train_steps(const TrainOptions& o, dist::Communicator& job, Device device, Outputs* outputs) {
  Preset p = o.preset;
  Config& c = p.model;
  if (c.value_embeds > c.layers)
    refuse("--value-embeds " + std::to_string(c.value_embeds) + " is more than the " + std::to_string(c.layers) +
           " layers: plane p feeds layer p");
  if (o.checkpoint.empty() && (o.resume || o.save_every)) refuse("--resume and --save-every need --checkpoint FILE");
  if (!o.trace.empty() && (c.dropout > 0 || (c.value_embeds > 0 && c.ve_mode != ValueEmbeds::dense)))
    refuse("--trace is for the PyTorch parity test (tests/gpt/parity.py): it needs --dropout 0, and value embeddings "
           "only with --value-embeds-dense (PyTorch's AdamW is the dense one)");
  if (c.products == DType::bf16 && o.dtype != DType::f32)
    refuse("--autocast bf16 casts f32 products; it needs --dtype f32, not " + std::string(dtype_name(o.dtype)));
  if (o.cast_weights && c.products != DType::bf16)
    refuse("--cast-weights chooses how --autocast bf16 makes its bf16 weights; without it nothing is cast");
  if (o.graph && (!device.is_cuda() || c.dropout > 0 || !o.dump_tape.empty() || !o.trace.empty()))
    refuse("--graph replays one captured step: it needs --device cuda, --dropout 0 (a replay would repeat the "
           "mask), and neither --dump-tape nor --trace");
  if (o.random_tokens && (!o.data.empty() || o.bytes)) refuse("--tokens random takes no --data");

  // The job (docs/distributed.md): this process is rank r of N; each of the N ranks runs A
  // micro-batches a step.
  dist::Communicator* comm = &job;
  const bool sparse_ve = c.value_embeds > 0 && c.ve_mode == ValueEmbeds::sparse;
  const int64_t A = o.accumulate;
  if (sparse_ve && (A > 1 || comm->size() > 1 || o.dist))
    refuse("sparse value embeddings add into a buffer of their own, outside the step's ordered sum of micro-batches: "
           "with --accumulate, several ranks or --dist, use --value-embeds-dense");
  if (!o.trace.empty() && (A > 1 || comm->size() > 1))
    refuse("--trace records the steps of one process with one micro-batch each (the PyTorch parity test): it takes "
           "neither --accumulate nor several ranks");
  const int N = comm->size();
  const bool lead = comm->rank() == 0;  // rank 0 prints and writes
  const int64_t M = N * A;              // the micro-batches of a step, over the whole job
  comm->set_phase("start-up", true);
  auto same_on_every_rank = [&](const std::string& what, const std::string& text) {
    if (N == 1) return;
    uint64_t h = dist::hash_bytes(Tensor::from_vector(std::vector<uint8_t>(text.begin(), text.end()),
                                                      Shape{static_cast<int64_t>(text.size())}));
    double bits;
    std::memcpy(&bits, &h, sizeof bits);
    const std::vector<double> all = dist::gather_doubles(*comm, {bits});
    for (int r = 1; r < N; ++r)
      if (std::memcmp(&all[static_cast<size_t>(r)], &all[0], sizeof bits) != 0)
        refuse("rank " + std::to_string(r) + "'s " + what + " differs from rank 0's: every rank must read the same");
  };

  const Data data = o.random_tokens ? random_data() : load_data(o.data, o.bytes, c.block);
  same_on_every_rank("data (" + data.identity + ")", data.identity);
  c.vocab = data.V;
  const char* tokens = o.random_tokens ? "random" : o.bytes ? "byte" : "char";
  const std::string settings = settings_text(o.config, p, o.dtype, tokens, M);

  // Everything a resume reads is read and checked before anything is built or written.
  nn::StateDict saved;
  nn::StateDictFile info;
  int64_t step = 0;
  if (o.resume) {
    if (!io::file_exists(o.checkpoint)) refuse("no checkpoint at " + o.checkpoint + " to resume from");
    saved = nn::load_tensors(o.checkpoint, &info);
    check_same_settings(o.checkpoint, info.learner, settings, N, A);
    if (info.data != data.identity)
      refuse(o.checkpoint + " was trained on other data (" + info.data + "), not this run's (" + data.identity + ")");
    if (info.seed != std::to_string(o.seed)) refuse(o.checkpoint + " was trained with --seed " + info.seed);
    if (info.step > static_cast<uint64_t>(o.steps))  // compared unsigned: a step of 2^63 or more is no negative
      refuse(o.checkpoint + " is at step " + std::to_string(info.step) + ", past --steps " + std::to_string(o.steps));
    step = static_cast<int64_t>(info.step);
    same_on_every_rank("checkpoint " + o.checkpoint, io::read_file(o.checkpoint));
  } else if (!o.checkpoint.empty() && io::file_exists(o.checkpoint) && !o.force) {
    refuse(o.checkpoint + " exists: pass --resume to continue it, or --force to replace it");
  }
  std::vector<LogRow> log;
  if (!o.log.empty() && o.resume && lead) log = read_log(o.log, step);

  Graph g;
  Generator gen(o.seed);
  nn::Factory f{g, gen, o.dtype, device};
  GPT model(f, c);
  std::vector<Var> dense_params;  // everything AdamW updates: all but a sparse value-embed table
  for (auto& [name, v] : model.named_parameters())
    if (!(sparse_ve && name == "ve.weight")) dense_params.push_back(v);
  dist::DataParallel dp(*comm, dense_params, {.micro_batches = A});
  const std::vector<optim::ParamGroup> groups = optim::decay_groups(dense_params, 0.1);
  const optim::AdamWConfig adamw_config{.lr = p.lr, .beta2 = 0.99};
  // ZeRO-1: AdamW's moments cut over the ranks (the same bits); otherwise every rank keeps them all
  std::optional<optim::AdamW> adamw;
  std::optional<dist::ShardedAdamW> zero;
  if (o.zero && dp.collective()) zero.emplace(dp, groups, adamw_config);
  else adamw.emplace(groups, adamw_config);
  // bf16 products: AdamW writes each weight's bf16 copy as it updates it, and the products take
  // the copies instead of casting (Note [bf16 weight copies] in ops/autocast.hpp): the same bits.
  // ZeRO-1's ranks update slices, so its products cast the gathered weights (the same bits again).
  if (c.products == DType::bf16 && !o.cast_weights && adamw) adamw->keep_bf16_copies();
  std::optional<optim::SparseAdamW> sparse;
  ops::ValueEmbedBuffer buffer;
  if (sparse_ve) {
    sparse.emplace(model.ve->weight.value(), optim::AdamWConfig{.lr = p.lr, .beta2 = 0.99, .weight_decay = 0.0});
    buffer = ops::ValueEmbedBuffer::zeros(model.ve->weight.value(), static_cast<int>(c.value_embeds), DType::f32);
  }
  const optim::WarmupCosine schedule(p.lr, p.warmup, p.decay_steps, p.min_lr);
  if (o.resume) {  // the checks of each load run before it changes anything
    std::vector<optim::AdamWConfig> run_groups;
    for (size_t i = 0; i < groups.size(); ++i) run_groups.push_back(zero ? zero->group(i) : adamw->group(i));
    check_adamw_settings(o.checkpoint, saved, run_groups);
    nn::load_state_dict(model, nn::under(saved, "model."));
    const optim::NamedTensors state = nn::under(saved, "adamw.", false);
    if (zero) zero->load_state(state);
    else adamw->load_state(state);
    if (sparse) sparse->load_state(nn::under(saved, "sparse_adamw.", false));
    nn::load_generator_state(gen, saved);
  }
  // Each micro-batch reseeds the dropout generator (mask_seed), so its place in its stream says
  // nothing about the run: the checkpoint keeps the place it had after the model was made (or
  // loaded), the same whatever the ranks and micro-batches, so checkpoints of any N compare equal.
  const nn::StateDict generator_at_start = nn::generator_state(gen);
  if (N > 1) dp.broadcast_parameters();  // rank 0's weights on every rank, checked by hash
  const std::string where = o.random_tokens ? "uniform random ids" : o.data.empty() ? "the built-in corpus" : o.data;
  if (lead)
    std::printf("gpt %s: %lld parameters, %s%s on %s%s; %s, %lld tokens (%s), vocab %lld; %s step %lld to %lld%s\n",
                o.config.c_str(), static_cast<long long>(model.parameter_count()), dtype_name(o.dtype),
                c.products == DType::bf16 ? " (bf16 products)" : "",
                device.str().c_str(), c.value_embeds ? (" with " + std::to_string(c.value_embeds) + " value-embed planes (" +
                                                       (sparse_ve ? "sparse" : "dense") + ")").c_str() : "",
                where.c_str(), static_cast<long long>(data.ids.size()),
                o.random_tokens ? "random ids" : o.bytes ? "bytes" : "characters",
                static_cast<long long>(data.V), o.resume ? "resuming at" : "from", static_cast<long long>(step),
                static_cast<long long>(o.steps), job_text(*comm, A, zero.has_value()).c_str());

  const int64_t B = c.batch, T = c.block;
  std::vector<int32_t> positions(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t) positions[static_cast<size_t>(t)] = static_cast<int32_t>(t);
  const Tensor pos = Tensor::from_vector(positions, Shape{T}, device);
  // the mean loss of the tokens (B, T) against the targets (B, T), tensors on the device
  auto loss_on = [&](const Tensor& tokens, const Tensor& targets, const ops::ValueEmbedBuffer& buf) {
    return model.loss(g.input(tokens, "tokens"), g.input(pos, "positions"), g.input(targets, "targets"), buf);
  };
  auto loss_of = [&](const std::vector<int32_t>& x, const std::vector<int32_t>& y, const ops::ValueEmbedBuffer& buf) {
    return loss_on(Tensor::from_vector(x, Shape{B, T}, device), Tensor::from_vector(y, Shape{B, T}, device), buf);
  };
  // The same eval_batches batches every time, in eval mode, no tape: each rank computes a block of
  // them (every rank draws them all, to keep the generator in step), the losses are gathered, and
  // summed in batch order, as one process sums them.
  auto validate = [&]() {
    std::mt19937_64 rng(o.seed ^ 0x76616c6964617465ull);
    model.eval();
    NoGrad off(g);
    const int64_t E = p.eval_batches, per = (E + N - 1) / N, first_k = per * comm->rank();
    std::vector<double> mine(static_cast<size_t>(per), 0.0);
    std::vector<int32_t> x, y;
    for (int64_t k = 0; k < E; ++k) {
      draw_batch(data, rng, data.split, data.ids.size(), B, T, x, y);
      if (k < first_k || k >= first_k + per) continue;
      g.clear();
      mine[static_cast<size_t>(k - first_k)] = loss_of(x, y, {}).value().item();
    }
    g.clear();
    model.train();
    const std::vector<double> all = N == 1 ? mine : dist::gather_doubles(*comm, mine);
    double total = 0;
    for (int64_t k = 0; k < E; ++k) total += all[static_cast<size_t>(k)];
    return total / static_cast<double>(E);
  };
  // Rank 0 writes the checkpoint a one-process run writes (ZeRO-1's moments gathered first, which
  // every rank takes part in); the others wait until it is on disk.
  auto save = [&](int64_t at) {
    const std::string phase = comm->phase();
    comm->set_phase("checkpoint at step " + std::to_string(at), true);
    nn::StateDict t = nn::prefixed(nn::state_dict(model), "model.");
    for (auto& e : zero ? zero->state_tensors() : adamw->state_tensors()) t.push_back(std::move(e));
    if (sparse)
      for (auto& e : sparse->state_tensors()) t.push_back(std::move(e));
    for (const auto& e : generator_at_start) t.push_back(e);
    if (!data.vocab.empty()) {
      std::vector<uint8_t> v(data.vocab.begin(), data.vocab.end());
      t.emplace_back("vocab", Tensor::from_vector(v, Shape{data.V}));
    }
    if (lead) {
      nn::save_tensors(o.checkpoint, t, {.learner = settings, .data = data.identity, .seed = std::to_string(o.seed),
                                         .step = static_cast<uint64_t>(at)});
      if (outputs) outputs->committed(at);  // the log written before it goes with it
    }
    if (N > 1) comm->barrier();
    comm->set_phase(phase);
  };
  // the parity trace: the initial weights, each step's batch, loss and rate, the first gradients
  nn::StateDict trace = o.trace.empty() ? nn::StateDict{} : nn::prefixed(nn::state_dict(model), "init.");
  std::vector<int32_t> trace_x, trace_y;
  std::vector<double> trace_loss, trace_lr;

  const std::string title = "gpt " + o.config + ": " + where;
  std::vector<int32_t> x, y;
  std::vector<size_t> starts;
  const int64_t first = step;
  const auto start = std::chrono::steady_clock::now();
  model.train();
  // The batch of global micro-batch m of step s (draw_batch's B windows) comes from a generator
  // seeded by (seed, s, m) alone, and so do its dropout masks (Generator::manual_seed): whichever
  // rank runs it, and whether or not the run was resumed, it sees the same tokens and masks.
  auto draw = [&](int64_t s, int64_t j) {
    const int64_t m = dp.first_micro_batch() + j;
    std::mt19937_64 rng(batch_seed(o.seed, s, m));
    draw_batch(data, rng, 0, data.split, B, T, x, y, &starts);
    gen.manual_seed(mask_seed(o.seed, s, m));
    if (o.show_batches) {
      std::string line = "batch: step " + std::to_string(s + 1) + " micro-batch " + std::to_string(m) + " rank " +
                         std::to_string(comm->rank()) + " windows";
      for (size_t w : starts) line += " " + std::to_string(w);
      std::printf("%s\n", line.c_str());
    }
  };
  // The optimizer's step after the step's gradient is in: the clipping coefficient computed on the
  // device (no read-back; AdamW applies it as it reads the gradients), then AdamW or ZeRO-1's.
  auto update = [&](bool scheduled) {
    if (zero) {
      const optim::ClipFactor clip = zero->clip_factor(1.0);
      if (scheduled) zero->scheduled_step(0, clip.factor);
      else zero->step(clip.factor);
    } else {
      const optim::ClipFactor clip = optim::clip_grad_factor_on_device(dense_params, 1.0);
      if (scheduled) adamw->scheduled_step(0, clip.factor);
      else adamw->step(clip.factor);
    }
  };
  // Note [a captured step]
  // With --graph, the step (forward, backward, clipping, AdamW) is recorded once as a CUDA graph,
  // after two eager steps have made the cuBLAS handle, AdamW's moments and the allocator's blocks,
  // and each later step is one replay. What a replay must see new is in device memory, written
  // before it: the batches (copied into fixed input tensors, one pair a micro-batch), AdamW's step
  // scalars from the schedule's lr (AdamW::write_schedule), and the clipping coefficient, which the
  // step computes on the device and AdamW applies as it reads the gradients (no pass of its own).
  // The ranks' collectives are captured with it (on the communicator's stream, joined to the
  // graph). The replayed kernels compute what the eager step's do, so the two give the same bits:
  // 60 steps with --graph write the checkpoint of 60 without (scripts/gpu_gpt.sh). Value
  // embeddings: the dense table is one more parameter of the graph; the sparse one's backward adds
  // into its buffer inside the graph (the lookup never synchronizes), and the pull and SparseAdamW
  // run after each replay, eagerly, because the pull learns on the host how many rows the step
  // touched.
  std::vector<Tensor> tokens_in, targets_in;  // --graph: the batches' fixed homes on the device
  if (o.graph)
    for (int64_t j = 0; j < A; ++j) {
      tokens_in.push_back(Tensor::zeros(Shape{B, T}, DType::i32, device));
      targets_in.push_back(Tensor::zeros(Shape{B, T}, DType::i32, device));
    }
  std::unique_ptr<CapturedGraph> captured;
  std::vector<Tensor> captured_losses;  // the captured step's losses, rewritten by each replay
  auto graph_step = [&](bool scheduled) {  // the --graph step's body, eager or captured
    std::vector<Tensor> losses;
    for (int64_t j = 0; j < A; ++j) {
      g.clear();
      g.zero_grad();
      Var loss = loss_on(tokens_in[static_cast<size_t>(j)], targets_in[static_cast<size_t>(j)], buffer);
      g.backward(loss, dp.backward_options(j, {.free_activation_grads = true}));
      losses.push_back(loss.value());
    }
    dp.finish();
    update(scheduled);
    return losses;
  };
  std::vector<double> step_ms;  // each step's wall time, its loss read back (a synchronization)
  // --graph: what the steps that only replay (the capture made before them) ask of the driver and
  // of the host: cudaMalloc calls and host fallbacks, both meant to be 0
  struct Counts {
    uint64_t mallocs = 0, fallbacks = 0;
  };
  auto counts = [&] {
    Counts c{0, host_fallback_count()};
#if TAPEGRAD_WITH_CUDA
    if (device.is_cuda()) c.mallocs = cuda::allocator_stats(device.index).cuda_malloc_count;
#endif
    return c;
  };
  Counts in_replays, in_updates;  // the replays; the sparse table's eager update after each
  int64_t replay_steps = 0;
  for (; step < o.steps;) {
    const auto step_start = std::chrono::steady_clock::now();
    comm->set_phase("step " + std::to_string(step + 1));
    const bool replay_only = o.graph && captured != nullptr;
    const Counts before = replay_only ? counts() : Counts{};
    Counts replayed;  // counts() after the replay, before the sparse update
    const double lr = schedule.lr(step);
    if (zero) zero->set_lr(lr);
    else adamw->set_lr(lr);
    if (sparse) sparse->set_lr(lr);
    std::vector<double> losses;  // this rank's micro-batches'
    std::vector<Tensor> loss_values;
    if (o.graph) {
      for (int64_t j = 0; j < A; ++j) {
        draw(step, j);
        tokens_in[static_cast<size_t>(j)].copy_from(Tensor::from_vector(x, Shape{B, T}));
        targets_in[static_cast<size_t>(j)].copy_from(Tensor::from_vector(y, Shape{B, T}));
      }
      std::vector<Tensor> values;
      if (step - first < 2) {
        values = graph_step(false);
      } else {
        const uint64_t t = zero ? zero->step_count() : adamw->step_count();
        if (zero) zero->write_schedule(t, 1);
        else adamw->write_schedule(t, 1);
        if (!captured) captured = capture(device, [&] { captured_losses = graph_step(true); });
        captured->replay();
        if (zero) zero->set_step_count(t + 1);
        else adamw->set_step_count(t + 1);
        values = captured_losses;
        if (replay_only) replayed = counts();
      }
      dp.wait();
      for (const Tensor& v : values) losses.push_back(v.item());
      // the sparse table's update stays outside the graph: the pull learns how many rows it takes
      if (sparse) sparse->step(model.ve->weight.value(), ops::value_embed_pull(buffer));
    } else {
      for (int64_t j = 0; j < A; ++j) {
        draw(step, j);
        g.clear();
        g.zero_grad();
        Var loss = loss_of(x, y, buffer);
        BackwardRecord record;
        const bool dump = step == first && j == 0 && lead && !o.dump_tape.empty();
        if (dump) check_dump_size(g, o.dump_tape);  // before the recorded backward: Note [what a dump costs]
        g.backward(loss, dp.backward_options(j, {.record = dump ? &record : nullptr, .free_activation_grads = true}));
        if (dump) {
          DumpOptions options;
          options.title = title + ", step " + std::to_string(step + 1);
          write_tape_dump(o.dump_tape, g, &record, options);
        }
        loss_values.push_back(loss.value());
      }
      dp.finish();
      dp.wait();
      if (!o.trace.empty() && step == first)
        for (auto& [name, v] : model.named_parameters())
          if (v.grad().defined()) trace.emplace_back("grad." + name, v.grad().to(Device::cpu()).clone());
      update(false);
      if (sparse) sparse->step(model.ve->weight.value(), ops::value_embed_pull(buffer));
      for (const Tensor& v : loss_values) losses.push_back(v.item());  // read back once the step is queued
    }
    ++step;

    // the step's loss: the mean of its M micro-batches' losses, in micro-batch order
    const double value = dist::pairwise_mean(N == 1 ? losses : dist::gather_doubles(*comm, losses));
    check_loss(value, step);  // the same on every rank: all stop
    if (replay_only) {
      const Counts after = counts();
      in_replays.mallocs += replayed.mallocs - before.mallocs;
      in_replays.fallbacks += replayed.fallbacks - before.fallbacks;
      in_updates.mallocs += after.mallocs - replayed.mallocs;
      in_updates.fallbacks += after.fallbacks - replayed.fallbacks;
      ++replay_steps;
    }
    step_ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - step_start).count());
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const double done = static_cast<double>(step - first), left = static_cast<double>(o.steps - step);
    const double tokens_per_s = done * static_cast<double>(M * B * T) / seconds;  // the whole job's
    const double val = step % p.eval_every == 0 || step == o.steps ? validate() : NAN;
    const int filled = static_cast<int>(20 * step / o.steps);
    if (lead) {
      std::printf("step %lld loss %.4f%s lr %.2e | %lld/%lld [%s%s] %3.0f%% | %.0f tok/s%s | %.1f ms/step | ETA %s\n",
                  static_cast<long long>(step), value,
                  std::isfinite(val) ? (" val " + fmt(std::round(val * 1e4) / 1e4)).c_str() : "", lr,
                  static_cast<long long>(step), static_cast<long long>(o.steps),
                  std::string(static_cast<size_t>(filled), '#').c_str(),
                  std::string(static_cast<size_t>(20 - filled), '.').c_str(),
                  100.0 * static_cast<double>(step) / static_cast<double>(o.steps), tokens_per_s,
                  N > 1 ? (" on " + std::to_string(N) + " ranks").c_str() : "", 1e3 * seconds / done,
                  seconds_text(seconds / done * left).c_str());
      std::fflush(stdout);
    }
    if (!o.trace.empty()) {
      trace_x.insert(trace_x.end(), x.begin(), x.end());
      trace_y.insert(trace_y.end(), y.begin(), y.end());
      trace_loss.push_back(value);
      trace_lr.push_back(lr);
    }
    log.push_back({step, value, val, lr, tokens_per_s});
    // the log, then the checkpoint; the last step's files are written after the loop, the trace first
    const bool last = step == o.steps, save_now = !last && !o.checkpoint.empty() && o.save_every && step % o.save_every == 0;
    if (lead && !last && !o.log.empty() && (std::isfinite(val) || save_now)) write_log(o.log, log, title);
    if (save_now) save(step);
    if (lead && std::isfinite(val))
      std::printf("validation loss %.4f at step %lld (uniform guess %.4f)\n", val, static_cast<long long>(step),
                  std::log(static_cast<double>(data.V)));
  }
  if (lead && step_ms.size() > 10) {  // the median after the first 10 steps (allocations, library start-up)
    std::vector<double> tail(step_ms.begin() + 10, step_ms.end());
    std::nth_element(tail.begin(), tail.begin() + static_cast<ptrdiff_t>(tail.size() / 2), tail.end());
    const double median = tail[tail.size() / 2];
    std::string peak;  // the caching allocator's most bytes in use (CUDA only)
#if TAPEGRAD_WITH_CUDA
    if (device.is_cuda())
      peak = "; peak device memory " + std::to_string(cuda::allocator_stats(device.index).peak_bytes_in_use >> 20) + " MiB";
#endif
    std::printf("median step %.2f ms over steps 11 to %lld (%.0f tokens/s)%s\n", median, static_cast<long long>(step),
                static_cast<double>(M * B * T) / median * 1e3, peak.c_str());
  }
  if (lead && replay_steps > 0) {
    std::printf("%lld steps replayed the captured graph: %llu cudaMalloc calls and %llu host fallbacks in them",
                static_cast<long long>(replay_steps), static_cast<unsigned long long>(in_replays.mallocs),
                static_cast<unsigned long long>(in_replays.fallbacks));
    // the pull's sizes follow the tokens a step touched: the caching allocator meets new ones
    if (sparse)
      std::printf("; the sparse table's update after each (eager): %llu cudaMalloc calls and %llu host fallbacks",
                  static_cast<unsigned long long>(in_updates.mallocs), static_cast<unsigned long long>(in_updates.fallbacks));
    std::printf("\n");
  }
  if (lead && first == o.steps)
    std::printf("%s is already at step %lld: nothing to train\n", o.checkpoint.c_str(), static_cast<long long>(step));
  if (!o.trace.empty()) {
    const int64_t n = static_cast<int64_t>(trace_loss.size());
    trace.emplace_back("x", Tensor::from_vector(trace_x, Shape{n, B, T}));
    trace.emplace_back("y", Tensor::from_vector(trace_y, Shape{n, B, T}));
    trace.emplace_back("loss", Tensor::from_vector(trace_loss, Shape{n}));
    trace.emplace_back("lr", Tensor::from_vector(trace_lr, Shape{n}));
    const std::vector<int64_t> shape{c.layers, c.heads, c.dim, c.block, c.batch, c.value_embeds, c.gelu_tanh ? 1 : 0};
    trace.emplace_back("config", Tensor::from_vector(shape, Shape{7}));  // L, H, C, T, B, P, G (1: tanh GELU)
    nn::export_safetensors(o.trace, trace);
  }
  if (step > first) {  // the run's last files: the log, then the checkpoint, the last of all
    if (lead && !o.log.empty()) write_log(o.log, log, title);
    if (!o.checkpoint.empty()) save(step);  // every rank: ZeRO-1's gather and the wait are collective
  }
  if (lead && o.sample_tokens > 0) {
    const std::vector<int32_t> prompt = data.ids.first(static_cast<size_t>(std::min<int64_t>(T, 16)));
    const Sampled out = generate(model, g, prompt, o.sample_tokens, {.temperature = 0.8, .seed = o.seed}, device);
    std::printf("sample: %s\n", (decode(data.vocab, prompt) + decode(data.vocab, out.tokens)).c_str());
    std::printf("sampled %lld tokens in %.3f s: %.0f tokens/s (KV cache)\n", static_cast<long long>(o.sample_tokens),
                out.seconds, static_cast<double>(o.sample_tokens) / out.seconds);
  }
  return 0;
}

int train(const TrainOptions& o) {
  // The job first (docs/distributed.md): under mpirun or from TAPEGRAD_RANK and its kin, or alone.
  // Rank 0 alone checks, locks and writes the outputs; a refusal there ends every rank (main calls
  // dist::abort_job), so none waits for it.
  Device device = parse_device(o.device);
  const dist::Placement place = dist::placement_from_environment();
#if TAPEGRAD_WITH_CUDA
  if (device.is_cuda() && o.device == "cuda" && place.size > 1 && cuda::device_count() > 0)
    device = Device::cuda(place.local_rank % cuda::device_count());  // one GPU a rank on each host
#endif
  if (device.is_cpu() && place.local_size > 1 && !std::getenv("TAPEGRAD_NUM_THREADS"))
    set_num_threads(std::max(1, num_threads() / place.local_size));  // the host's cores shared by its ranks
  const std::unique_ptr<dist::Communicator> comm = dist::connect(device, o.dist);
  if (comm->rank() != 0) return train_steps(o, *comm, device, nullptr);
  Outputs outputs(o);
  return outputs.run([&] { return train_steps(o, *comm, device, &outputs); });
}

int sample(const SampleOptions& o) {
  if (!(o.temperature > 0 && std::isfinite(o.temperature)))
    refuse("--temperature must be a positive finite number, got " + fmt(o.temperature));
  const Device device = parse_device(o.device);
  nn::StateDictFile info;
  const nn::StateDict saved = nn::load_tensors(o.checkpoint, &info);
  const auto f = fields_of(info.learner);
  const std::string& path = o.checkpoint;
  if (info.learner.rfind("gpt ", 0) != 0) refuse(path + " is not a gpt checkpoint (its settings: '" + info.learner + "')");
  Config c;
  c.layers = field_int(f, path, "layers", 1, 1024);
  c.heads = field_int(f, path, "heads", 1, 1024);
  c.dim = field_int(f, path, "dim", 1, 65536);
  c.block = field_int(f, path, "block", 1, 1 << 20);
  c.value_embeds = field_int(f, path, "value_embeds", 0, c.layers);
  // each setting one of its values (the first when absent: what older checkpoints ran with)
  c.ve_mode = setting(f, path, "ve_mode", {"sparse", "dense"}) == "dense" ? ValueEmbeds::dense : ValueEmbeds::sparse;
  const std::string tokens = setting(f, path, "tokens", {"char", "byte", "random"});
  const bool bytes = tokens == "byte";
  if (tokens == "random") refuse(path + " was trained on random tokens (--tokens random): there is no text to sample");
  const DType dtype = setting(f, path, "dtype", {"f32", "f64"}) == "f64" ? DType::f64 : DType::f32;
  c.products = setting(f, path, "products", {"f32", "bf16"}) == "bf16" ? DType::bf16 : DType::f32;
  c.gelu_tanh = setting(f, path, "gelu", {"exact", "tanh"}) == "tanh";
  std::string vocab;
  if (!bytes) {
    auto it = std::find_if(saved.begin(), saved.end(), [](const auto& e) { return e.first == "vocab"; });
    if (it == saved.end() || it->second.dtype() != DType::u8 || it->second.ndim() != 1 || it->second.numel() == 0)
      refuse(path + ": a character-level checkpoint needs a (V,) u8 tensor 'vocab'");
    const Tensor v = it->second.to(Device::cpu());
    vocab.assign(reinterpret_cast<const char*>(v.raw_data()), static_cast<size_t>(v.numel()));
  }
  c.vocab = bytes ? 256 : static_cast<int64_t>(vocab.size());
  check_model_size(path, c, saved);  // before a byte of the model is allocated

  Graph g;
  Generator gen(0);
  nn::Factory factory{g, gen, dtype, device};
  GPT model(factory, c);
  nn::load_state_dict(model, nn::under(saved, "model."));
  std::vector<int32_t> prompt;
  for (unsigned char ch : o.prompt) {
    if (bytes) {
      prompt.push_back(ch);
      continue;
    }
    const size_t at = vocab.find(static_cast<char>(ch));
    if (at == std::string::npos) {
      char b[32];
      std::snprintf(b, sizeof b, std::isprint(ch) ? "'%c' (0x%02x)" : "0x%02x", ch, ch);
      refuse("the prompt's character " + std::string(b) + " is not in " + path + "'s vocabulary of " +
             std::to_string(vocab.size()) + " characters");
    }
    prompt.push_back(static_cast<int32_t>(at));
  }
  if (prompt.empty()) {  // no prompt: start from a newline where the vocabulary has one
    const size_t nl = bytes ? '\n' : vocab.find('\n');
    prompt.push_back(nl == std::string::npos ? 0 : static_cast<int32_t>(nl));
  }
  const SampleSettings settings{.temperature = o.temperature, .top_k = o.top_k, .seed = o.seed, .cache = !o.no_cache};
  const Sampled out = generate(model, g, prompt, o.tokens, settings, device);
  std::printf("%s%s\n", o.prompt.c_str(), decode(vocab, out.tokens).c_str());
  // the speed on stderr: stdout is the text alone, for a pipe or a file
  std::fflush(stdout);
  std::fprintf(stderr, "gpt: %lld tokens in %.3f s: %.0f tokens/s (%s)\n", static_cast<long long>(o.tokens), out.seconds,
               static_cast<double>(o.tokens) / out.seconds, o.no_cache ? "no cache: the whole window each token" : "KV cache");
  return 0;
}

}  // namespace gpt

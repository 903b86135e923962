// Weights from the files people have: safetensors checkpoints (one file,
// or shards named by model.safetensors.index.json), memory-mapped, and a
// mapping from the checkpoint's tensor names to a program's params that
// stacks layers and fuses tensors (q/k/v, gate/up) without a conversion
// script. Session::load_params copies them to the device; assemble_params
// gives host tensors for the CPU reference.
//
//   auto ckpt = gdl::Checkpoint::open("Llama-3.2-1B/");              // Expected<Checkpoint>
//   auto map = gdl::WeightMapping::parse(                            // or WeightMapping::read(file)
//       "wqkv[l] model.layers.{l}.self_attn.q_proj.weight model.layers.{l}.self_attn.k_proj.weight "
//       "model.layers.{l}.self_attn.v_proj.weight\n"
//       "lm_head lm_head.weight|model.embed_tokens.weight\n");
//   session->load_params(*ckpt, *map);
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "gdl/gdl.h"
#include "gdl/status.h"

namespace gdl {

// One tensor of a checkpoint as stored: its safetensors dtype ("BF16",
// "F32", ...), shape, and bytes inside the mapped file (valid while a copy
// of the Checkpoint that gave it lives).
struct CheckpointTensor {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;
  uint64_t bytes = 0;
  std::string file;  // the .safetensors file holding it
  // The gdl element type of `dtype`; false for dtypes gdl has no type for
  // (F64, I64, I8, U8, F8_*, ...), which cannot be bound.
  bool element_type(ElementType* out) const;
  int64_t element_count() const;
};

// A memory-mapped safetensors checkpoint. Cheap to copy (the mappings are
// shared). Every header is checked when it is opened: the 8-byte length,
// the JSON, each tensor's dtype, shape and data offsets (inside the file,
// the size its dtype and shape give, no two overlapping); a file that fails
// is DataLoss naming the file and the tensor. The files are mapped, not
// read: they must not be truncated or rewritten while a copy of the
// Checkpoint lives (reading a truncated mapping faults).
class Checkpoint {
 public:
  // `path`: a .safetensors file; a model.safetensors.index.json (its shards
  // are opened from the same directory); or a directory holding one of
  // model.safetensors.index.json or model.safetensors. NotFound when none is there.
  static Expected<Checkpoint> open(const std::string& path);

  // nullptr when the checkpoint has no such tensor.
  const CheckpointTensor* find(const std::string& name) const;
  std::vector<std::string> names() const;  // sorted
  size_t size() const;
  uint64_t total_bytes() const;           // tensor bytes over every shard
  const std::vector<std::string>& files() const;

  struct Impl;

 private:
  explicit Checkpoint(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const Impl> impl_;
};

// Where each program param comes from. One rule per param:
//
//   PARAM SOURCE [SOURCE ...]         the sources, in order, fill the param
//   PARAM[l] SOURCE [SOURCE ...]      per layer: slice l of the param's
//                                     axis 0 takes the sources with "{l}"
//                                     replaced by l, for every l
//
// Several sources are concatenated along the first axis of the param (or
// of its slice): `wqkv[l] q k v` lays q's rows, then k's, then v's, as
// the fused weight the program multiplies by. Each source is a tensor
// name, or alternatives `a|b` of which the first in the checkpoint is
// taken (a tied LM head: `lm_head lm_head.weight|model.embed_tokens.weight`).
// A source may take a part of its tensor: `NAME[a:b]` its rows a to b-1,
// `NAME[:,a:b]` its columns a to b-1 (no spaces) — a rank's share of a
// weight split for tensor parallelism (`wo[l] model.layers.{l}.self_attn.
// o_proj.weight[:,0:2048]`).
// In the text form rules are lines; `#` starts a comment.
struct WeightRule {
  std::string param;
  bool per_layer = false;
  std::vector<std::vector<std::string>> sources;  // each: its alternatives
};

struct WeightMapping {
  std::vector<WeightRule> rules;
  // InvalidArgument naming the line for a malformed rule or a param named twice.
  static Expected<WeightMapping> parse(const std::string& text);
  static Expected<WeightMapping> read(const std::string& path);
  std::string text() const;  // the rules in the text form
};

// What a load bound, and what it left unbound.
struct LoadReport {
  std::vector<std::string> params_loaded;   // program params the mapping filled
  std::vector<std::string> params_unset;    // program params no rule names (the caller sets them)
  uint64_t bytes = 0;                       // copied
  double seconds = 0;
};

// The params the mapping names, assembled on the host for the CPU
// reference (jit::run_reference), checked as Session::load_params checks
// them.
Expected<std::map<std::string, TensorData>> assemble_params(const Checkpoint& checkpoint, const WeightMapping& mapping,
                                                            const std::vector<TensorInfo>& params,
                                                            LoadReport* report = nullptr);

}  // namespace gdl

// Export of a live engine's weights to one safetensors file (safetensors_writer.h), and
// DeepSpeed's save_16bit_model behind zero_optimization.stage3_gather_16bit_weights_on_model_save.
//
// Contract
// - Tensor names are "<unit name>.<param name>" from the engine's ModelSpec (nn::Gpt:
//   "embed.wte.weight", "block.0.attn.qkv.weight", ..., "head.ln_f.weight"); shapes are the
//   ParamSpec shapes. The tensors appear in unit and parameter order. The values are the fp32
//   master weights (ZeroEngine::GatherMasterParam), written as F32, or rounded to nearest even
//   into BF16 or F16.
// - Collective over the engine's dp group: every rank calls it with the same arguments, between
//   optimizer steps (no bracket open). Each parameter's master is gathered in turn and rank 0
//   writes it at once, so a rank holds at most one unit's padded fp32 master beyond its shards
//   (GatherMasterParam gathers the parameter's unit). Only rank 0 touches the file system; it
//   writes `path` atomically (a temporary file renamed at the end).
// - Errors: every rank returns an error when rank 0 fails to write (rank 0 names the path and
//   the reason; the others name rank 0 and the path), after all gathers have run, so no rank
//   is left waiting in a collective. A failed gather is returned as it is (the engine's
//   communicators are then broken on every rank).
// - Threads: the rank's thread that drives the engine.
#pragma once

#include <map>
#include <string>

#include "runtime/base/dtype.h"
#include "runtime/base/status.h"
#include "runtime/engine/zero_engine.h"

namespace zs {

struct SafetensorsExportOptions {
  DType dtype = DType::kF32;  // F32, BF16 or F16 in the file
  // Written under "__metadata__", with "format": "pt" (what Hugging Face loaders expect) unless
  // given here.
  std::map<std::string, std::string> metadata;
};

// The name a parameter gets in an exported file: "<unit name>.<param name>".
std::string ExportTensorName(const ModelSpec& model, int unit, int param);

// Writes every parameter's full master weights to `path` (see the contract).
Status ExportSafetensors(ZeroEngine& engine, const std::string& path,
                         const SafetensorsExportOptions& options = {});

// The 16-bit dtype a 16-bit save writes: the compute dtype with bf16 or fp16 compute, bf16 with
// fp32 compute.
DType SixteenBitDType(const ZeroEngine& engine);

// DeepSpeed's engine.save_16bit_model(save_dir, save_filename): at stage 3 the weights are
// sharded, so it writes them only when zero_optimization.stage3_gather_16bit_weights_on_model_save
// (or its old spelling stage3_gather_fp16_weights_on_model_save) is true, and otherwise writes
// nothing and returns false on every rank; at stages 0-2 it always writes. The file is
// `path`, a safetensors file of SixteenBitDType(engine) (collective, as ExportSafetensors).
// Returns whether it was written.
StatusOr<bool> Save16BitModel(ZeroEngine& engine, const std::string& path);

// The file name a checkpoint save gives the consolidated 16-bit weights inside its directory.
inline constexpr const char* kConsolidated16BitFile = "model.16bit.safetensors";

// What a checkpoint save calls once its own files are written: when the engine is at stage 3
// and its config sets stage3_gather_16bit_weights_on_model_save, writes
// `dir`/kConsolidated16BitFile (Save16BitModel) and returns true; otherwise does nothing and
// returns false. Collective over the engine's dp group (every rank calls it; no communication
// when nothing is written).
StatusOr<bool> Save16BitWeightsOnModelSave(ZeroEngine& engine, const std::string& dir);

}  // namespace zs

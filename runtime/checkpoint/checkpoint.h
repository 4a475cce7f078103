// Checkpoints: sharded, atomic, self-describing snapshots of a ZeroEngine's training state, in
// model space, so that they load at another data-parallel world size or ZeRO stage.
//
// Contract
// - [Note: checkpoint layout] SaveCheckpoint(engine, dp, ROOT, trainer) writes ROOT/step-NNNNNNNN/
//   (N = the engine's step) holding manifest.json and one rank file per rank
//   (shard_file.h, [Note: rank file format]), then points ROOT/latest (a one-line text file
//   naming the step directory) at it. Older step directories stay (the caller prunes).
// - [Note: atomic save] Every rank writes its file into ROOT/.tmp-step-NNNNNNNN and fsyncs it;
//   the ranks all-gather their files' sizes and checksums; rank 0 then writes manifest.json
//   (every file with its size and checksum), fsyncs it and the directory, moves the directory
//   into place with one rename (an existing step directory of the same name is swapped out by
//   renameat2(RENAME_EXCHANGE) and removed), fsyncs ROOT, writes ROOT/latest through a
//   temporary file and a rename, and fsyncs ROOT again. A process killed at any moment leaves
//   `latest` naming the last complete checkpoint (a stale .tmp-* directory is removed by the
//   next save of that step).
// - The manifest: format_version, step, world_size and stage at save, compute and state dtypes,
//   the loss scaler's state, the engine config (EngineConfigToJson), the caller's opaque
//   "trainer" object (data position, rng, ...), the model (units, parameters, shapes) and the
//   files. With zero_optimization.stage3_gather_16bit_weights_on_model_save (stage 3), the
//   consolidated 16-bit weights are written beside the rank files as model.16bit.safetensors
//   (safetensors_export.h, as DeepSpeed's save_16bit_model) and listed as "consolidated_16bit".
// - LoadCheckpoint(engine, dp, PATH): PATH is a step directory or a ROOT with `latest`. Every
//   rank checks a share of the files' whole-file checksums (rank r the files r, r + W, ...),
//   then reads, from whichever rank files hold them, the parameter ranges its optimizer range
//   now covers (a layout conversion in model space; engine->LoadOwnedState does the rest).
//   fp32 and bf16 states load exactly at any world size and stage; int8 states exactly where
//   the saved block grid lines up with the engine's (same world size and stage always; see
//   [Note: int8 blocks in checkpoints] in zero_engine.h), otherwise decoded and re-encoded.
//   The model must match (every parameter by name and full shape, and for a plain engine the
//   parameter count), else InvalidArgument naming the parameter. A missing, truncated or corrupt
//   file is an error naming the file (and the parameter and array where one is at fault).
// - Both are collective over `dp` (the communicator the engine was created with); every rank
//   gets the same outcome (a failing rank's error reaches the others). ROOT must be on a file
//   system every rank sees. They block the calling thread; one thread per rank.
// - [Note: grid checkpoints] The same format serves a tp x pp x dp grid (GridGpt, and any
//   caller with several engines per rank): SaveCheckpoint(CheckpointRank) takes a rank's
//   engines, each with its dp communicator and every parameter's ParamPlacement (its model
//   name, full shape and tp slice: param_placement.h); rank r of `world` writes rank-r's file
//   with what its engines own, in the local frame of its tp slice plus the slice's layout
//   (parameters replicated over tp only from tp rank 0, over ep only from ep rank 0: each
//   element once). The manifest adds "grid" (the caller's
//   description: tp, pp, dp, ep, ...) and lists the union of the saved parameters by name.
//   LoadCheckpoint(CheckpointRank) fills every engine's optimizer range from whichever pieces
//   hold its full-space elements (PlanCopy), at any tp, pp, dp and stage: parameters match by
//   name and full shape; padded vocabulary rows (not in the full tensor) load as zeros, as
//   TpGpt's Init gives them. The bits are restored exactly where a range's local frame and
//   dtype are the saved ones (same tp slice), else the values (f32, decoded bf16/int8 states).
//   A data-parallel checkpoint is the special case of one engine with Whole placements, so
//   the two load into each other. Collectives run over `world` and then each engine's dp.
// - [Note: 16-bit weights of a grid] With stage3_gather_16bit_weights_on_model_save at stage 3
//   a grid save (anything but one plain engine) writes model.16bit.safetensors too: the full,
//   unpadded weights under the model's names and shapes (what a data-parallel run of the same
//   model writes: tp slices joined, padded vocabulary rows dropped, every pp stage and every
//   expert), in the model's unit order, as SixteenBitDType of the first engine. World rank 0
//   writes it alone, after every rank file is durable, reading the fp32 masters back from them
//   one full parameter at a time (consolidate.h): its memory beyond its own state is one full
//   parameter in fp32, and no collective beyond the save's own runs. DeepSpeed's stage 3 also
//   gathers the whole model on rank 0 (_zero3_consolidated_16bit_state_dict collects every
//   parameter into one state dict, then torch.save); here nothing is held whole, but rank 0
//   reads 4 bytes per parameter from the file system while the other ranks wait for the
//   manifest (within their communicators' timeout).
// - [Note: checkpoint index] (checkpoint_index.h): rank 0 also writes index.json, every piece
//   with its file and offsets, listed in the manifest as "index" with its size and checksum.
//   A load reads the index (checking both), then opens only the rank files holding pieces that
//   meet what its engines own; a checkpoint without an index (older) is read by a scan of every
//   rank file's header. PlanCopy looks pieces up by binary search ([Note: piece lookup]).
// - Costs: a save holds the rank's owned state in host memory while it writes its file; rank 0
//   reads every rank file's header (the index). A load reads the manifest and the index on
//   every rank, its share of the whole-file checksums and, per parameter part, the saved arrays
//   that overlap it.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "runtime/base/status.h"
#include "runtime/checkpoint/param_placement.h"
#include "runtime/comm/communicator.h"
#include "runtime/engine/zero_engine.h"

namespace zs {

struct CheckpointManifest {
  struct File {
    std::string name;  // relative to the checkpoint directory
    int rank = 0;
    int64_t bytes = 0;
    uint64_t checksum = 0;  // FNV-1a 64 of the whole file
  };
  struct Param {
    int unit = 0, param = 0;
    std::string unit_name, name;  // name = "<unit name>.<param name>"
    std::vector<int64_t> shape;
    int64_t numel = 0;
  };
  int format_version = 0;
  int64_t step = 0;
  int world_size = 0;  // rank files (the whole job's ranks)
  int stage = 0;
  nlohmann::json grid;  // grid checkpoints: the saver's description; null for data-parallel
  std::string compute_dtype, state_dtype, optimizer;
  EngineTrainingState training;
  nlohmann::json config;   // the engine config at save
  nlohmann::json trainer;  // the caller's object
  std::vector<Param> params;
  std::vector<File> files;
  File index;       // [Note: checkpoint index]; name "" when the checkpoint has none (older)
  std::string dir;  // where it was read from (not stored)
  // LoadCheckpoint only (not stored): the rank files (positions in `files`, ascending) this rank
  // opened for their headers or arrays: those holding pieces it owns now with an index, every
  // file without one. The whole-file checksum share (files r, r + W, ...) is not counted.
  std::vector<int> files_read;
};

// The step directory PATH names: PATH itself when it holds manifest.json, else ROOT/<latest>.
StatusOr<std::string> ResolveCheckpointDir(const std::string& path);
// Reads and checks manifest.json of PATH (resolved as above).
StatusOr<CheckpointManifest> ReadCheckpointManifest(const std::string& path);

// One engine of a rank: the engine, the communicator it was created with, the model unit
// index of each of its units (empty: its own model's) and each parameter's placement,
// [unit][param] as the engine's ModelSpec.
struct CheckpointEngine {
  ZeroEngine* engine = nullptr;
  Communicator* dp = nullptr;
  std::vector<int> model_units;
  std::vector<std::vector<ParamPlacement>> placements;
};
// The engine as a whole model: Whole placements named "<unit>.<param>".
CheckpointEngine WholeEngine(ZeroEngine& engine, Communicator& dp);

// What one rank of a job checkpoints ([Note: grid checkpoints]). The first engine gives the
// step, the loss scaler, the config and the dtypes; every engine loads the same training state.
struct CheckpointRank {
  Communicator* world = nullptr;  // every rank of the job; its rank r writes rank r's file
  std::vector<CheckpointEngine> engines;
  nlohmann::json grid;  // recorded as the manifest's "grid" (null: none)
};

// Collective over rank.world, then each engine's dp. Returns the step directory written.
StatusOr<std::string> SaveCheckpoint(const CheckpointRank& rank, const std::string& root,
                                     const nlohmann::json& trainer = nlohmann::json::object());
// Collective over rank.world, then each engine's dp (in the engines' order).
StatusOr<CheckpointManifest> LoadCheckpoint(const CheckpointRank& rank, const std::string& path);

// Collective. Returns the step directory written.
StatusOr<std::string> SaveCheckpoint(ZeroEngine& engine, Communicator& dp, const std::string& root,
                                     const nlohmann::json& trainer = nlohmann::json::object());

// Collective. Returns the manifest it loaded (its trainer object included).
StatusOr<CheckpointManifest> LoadCheckpoint(ZeroEngine& engine, Communicator& dp,
                                            const std::string& path);

}  // namespace zs

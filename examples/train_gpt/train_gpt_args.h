// Args: train_gpt's command line, and the flags that fill it (README's train_gpt table).
//
// Contract
// - AddTrainGptFlags registers every flag on `app` with its range check; `args` must outlive
//   the parse. Plain values; no threads.
// - ParseTrainGptArgs parses a command line with them and never exits or throws (STYLE rule 8:
//   no exit() outside main): a bad command line comes back as an error naming the flag, for
//   main to print and exit with, as CLI11's own CLI11_PARSE would have.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

#include "runtime/base/status.h"

namespace zs {

struct Args {
  std::string config_path;
  std::string corpus;
  int world = 1;
  int steps = 100;
  uint64_t seed = 1234;
  int layers = 4;
  int hidden = 128;
  int heads = 4;
  int seq = 64;
  // LayerDrop ([Note: LayerDrop] in runtime/nn/gpt.h): the probability in [0, 1) that training
  // skips each block of a micro-batch; > 0 sets zerostack.allow_unused_units. Data parallel only.
  double layer_drop = 0.0;
  int micro_batch = 0;  // 0: the config's train_micro_batch_size_per_gpu
  // [Note: "auto" as the Hugging Face integration fills it] What train_gpt supplies for a
  // config's "auto" keys, with the Hugging Face TrainingArguments' defaults.
  int accumulation_steps = 1;
  double lr = 5e-5;
  int warmup_steps = 1;  // DeepSpeed's schedulers need at least 1 (and warm up over 2)
  double grad_clip = 1.0;
  std::string precision = "fp32";
  int stage = -1;       // -1: the config's zero_optimization.stage
  std::string report;
  int print_every = 10;
  int eval_every = 0;    // held-out loss every N steps (0: never)
  int eval_batches = 4;  // held-out batches (of the global batch size) per evaluation
  std::string save_dir;   // checkpoints: DIR/step-N (runtime/checkpoint)
  int save_every = 0;     // 0: only after the last step (when --save-dir is given)
  std::string resume;     // a checkpoint or a --save-dir to continue from
  std::string device = "cpu";
  std::string trace;      // Chrome trace per rank: trace.json -> trace.rank<r>.json
  std::string nvme_path;  // overrides offload_optimizer/offload_param.nvme_path
  // The grid (runtime/parallel): world = tp x pp x dp.
  int tp = 1;
  int pp = 1;
  std::string schedule = "1f1b";
  int virtual_stages = 1;
  bool sequence_parallel = false;
  bool recompute = false;
  std::string partition = "params";  // what the pipeline stages balance: params or measured
  int experts = 0;  // experts in every block's MLP (0: dense)
  int ep = 1;
  int top_k = 2;
  double capacity_factor = 1.25;
  bool grid() const {  // any grid flag given: GridGpt (also with tp = pp = 1)
    return tp > 1 || pp > 1 || sequence_parallel || recompute || experts > 0 ||
           schedule != "1f1b" || virtual_stages > 1;
  }
};

void AddTrainGptFlags(CLI::App& app, Args& args);

// What parsing a command line decided.
struct CommandLineOutcome {
  // InvalidArgument with CLI11's message, which names the flag or the unexpected argument.
  Status status;
  // train_gpt's exit code when it stops here: CLI11's code for an error, 0 after --help.
  int exit_code = 0;
  // --help (status OK): the usage text, to print on stdout before exiting 0.
  std::string help;
  bool stop() const { return !status.ok() || !help.empty(); }
};

// Parses `argv` into the flags `app` holds (AddTrainGptFlags). `app` keeps what it parsed for
// app.count().
CommandLineOutcome ParseTrainGptArgs(CLI::App& app, int argc, const char* const* argv);

}  // namespace zs

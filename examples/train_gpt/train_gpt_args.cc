#include "examples/train_gpt/train_gpt_args.h"

#include <fmt/format.h>

#include <string_view>

namespace zs {

void AddTrainGptFlags(CLI::App& app, Args& args) {
  app.add_option("--config", args.config_path, "DeepSpeed-style JSON config (docs/CONFIG.md)")
      ->check(CLI::ExistingFile);
  app.add_option("--corpus", args.corpus, "text file to train on (default: the shipped corpus)");
  app.add_option("--world", args.world, "ranks as threads (ignored under a launcher)")
      ->check(CLI::Range(1, 1024));
  app.add_option("--steps", args.steps, "optimizer steps")->check(CLI::Range(1, 10'000'000));
  app.add_option("--seed", args.seed, "seed of the initialization and of the data order");
  app.add_option("--layers", args.layers, "transformer blocks")->check(CLI::Range(1, 1024));
  app.add_option("--hidden", args.hidden, "hidden size")->check(CLI::Range(1, 1 << 16));
  app.add_option("--heads", args.heads, "attention heads")->check(CLI::Range(1, 1024));
  app.add_option("--layer-drop", args.layer_drop,
                 "LayerDrop: the probability in [0, 1) that training skips each transformer "
                 "block of a micro-batch (sets zerostack.allow_unused_units; data parallel "
                 "only; at stage 3 blocks must be persistent: "
                 "stage3_param_persistence_threshold)")
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--seq", args.seq, "sequence length")->check(CLI::Range(1, 1 << 16));
  app.add_option("--micro-batch", args.micro_batch,
                 "sequences per rank per micro-batch (overrides train_micro_batch_size_per_gpu)")
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--stage", args.stage, "ZeRO stage (overrides zero_optimization.stage)")
      ->check(CLI::Range(0, 3));
  app.add_option("--report", args.report, "write a JSON report here");
  app.add_option("--save-dir", args.save_dir,
                 "write checkpoints to DIR/step-N (every --save-every steps and at the end)");
  app.add_option("--save-every", args.save_every, "checkpoint every N steps (0: at the end)")
      ->check(CLI::Range(0, 10'000'000));
  app.add_option("--resume", args.resume,
                 "continue from a checkpoint (a step directory, or a --save-dir's latest)");
  app.add_option("--accumulation-steps", args.accumulation_steps,
                 "the value of a config's \"auto\" gradient_accumulation_steps")
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--lr", args.lr,
                 "the value of \"auto\" learning rates (optimizer.params.lr, "
                 "scheduler.params.warmup_max_lr)")
      ->check(CLI::PositiveNumber);
  app.add_option("--warmup-steps", args.warmup_steps,
                 "the value of \"auto\" scheduler.params.warmup_num_steps")
      ->check(CLI::Range(1, 1 << 30));
  app.add_option("--grad-clip", args.grad_clip, "the value of \"auto\" gradient_clipping")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--precision", args.precision,
                 "fp32, bf16 or fp16: the value of \"auto\" fp16.enabled / bf16.enabled")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}));
  app.add_option("--print-every", args.print_every,
                 "progress line every N steps (default: the config's steps_per_print)")
      ->check(CLI::Range(1, 1 << 30));
  app.add_option("--eval-every", args.eval_every,
                 "report a held-out loss (validation split, forward only) every N steps; 0 never")
      ->check(CLI::Range(0, 1 << 30));
  app.add_option("--eval-batches", args.eval_batches,
                 "held-out batches (of the global batch size) per evaluation")
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--device", args.device, "device of each rank: cpu or budgeted-cpu:SIZE");
  app.add_option("--nvme-path", args.nvme_path,
                 "directory for NVMe offload files (overrides the config's nvme_path keys)")
      ->check(CLI::ExistingDirectory);
  app.add_option("--tp", args.tp, "tensor-parallel degree (Megatron-style layers)")
      ->check(CLI::Range(1, 1024));
  app.add_option("--pp", args.pp, "pipeline-parallel stages (dp = world / (tp x pp))")
      ->check(CLI::Range(1, 1024));
  app.add_option("--schedule", args.schedule, "pipeline schedule: gpipe, 1f1b or interleaved")
      ->check(CLI::IsMember({"gpipe", "1f1b", "interleaved"}));
  app.add_option("--virtual-stages", args.virtual_stages,
                 "model chunks per pipeline rank (interleaved schedule)")
      ->check(CLI::Range(1, 64));
  app.add_flag("--sequence-parallel", args.sequence_parallel,
               "Megatron sequence parallelism in the tp group (LayerNorm/dropout regions split "
               "along the tokens)");
  app.add_flag("--recompute", args.recompute,
               "recompute each block's activations in backward instead of keeping them");
  app.add_option("--partition", args.partition,
                 "balance the pipeline stages by parameter count (params) or by forward + "
                 "backward time measured at start-up (measured; dense models only)")
      ->check(CLI::IsMember({"params", "measured"}));
  app.add_option("--experts", args.experts,
                 "mixture-of-experts: this many experts replace every block's MLP (replicated "
                 "over tp)")
      ->check(CLI::Range(0, 4096));
  app.add_option("--ep", args.ep, "expert-parallel degree (divides dp)")
      ->check(CLI::Range(1, 4096));
  app.add_option("--top-k", args.top_k, "experts per token: 1 (Switch) or 2 (GShard)")
      ->check(CLI::Range(1, 2));
  app.add_option("--capacity-factor", args.capacity_factor,
                 "each expert keeps at most ceil(k x tokens x factor / experts) tokens per "
                 "micro-batch; the rest are dropped")
      ->check(CLI::PositiveNumber);
  app.add_option("--trace", args.trace,
                 "write a Chrome/Perfetto trace per rank (FILE.json -> FILE.rank<r>.json)");
}

CommandLineOutcome ParseTrainGptArgs(CLI::App& app, int argc, const char* const* argv) {
  CommandLineOutcome outcome;
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    outcome.help = app.help();
  } catch (const CLI::CallForAllHelp&) {
    outcome.help = app.help("", CLI::AppFormatMode::All);
  } catch (const CLI::ExtrasError& e) {
    // CLI11 lists them unquoted, so an empty argument ('') read as nothing: quoted here.
    std::string quoted;
    for (const std::string& extra : app.remaining()) {
      if (quoted.size() > 400) {
        quoted += " ...";
        break;
      }
      quoted += fmt::format("{}\"{}{}\"", quoted.empty() ? "" : " ", extra.substr(0, 100),
                            extra.size() > 100 ? "..." : "");
    }
    outcome.exit_code = e.get_exit_code();
    outcome.status = InvalidArgumentError(fmt::format(
        "unexpected argument{}: {} (train_gpt takes flags only)",
        app.remaining().size() == 1 ? "" : "s", quoted));
  } catch (const CLI::ParseError& e) {
    outcome.exit_code = e.get_exit_code();
    std::string_view what = e.what();
    // An argument CLI11 quotes back can be as long as the command line: bounded.
    if (what.size() > 500) what = what.substr(0, 500);
    outcome.status = InvalidArgumentError(std::string(what));
  }
  return outcome;
}

}  // namespace zs

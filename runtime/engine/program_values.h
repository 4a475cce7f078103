// ProgramValues: what a training program knows about its own run, for the keys of a DeepSpeed
// config written as "auto" (the Hugging Face integration's templates), and AutoFill, what each
// "auto" became.
//
// Contract
// - [Note: "auto" as the Hugging Face integration fills it] ParseEngineConfig(text, program,
//   &filled) replaces every "auto" by the value the program supplies, with the integration's
//   derivations where it has one:
//     train_micro_batch_size_per_gpu        micro_batch
//     gradient_accumulation_steps           accumulation_steps
//     train_batch_size                      micro_batch x accumulation_steps x dp_world_size
//     gradient_clipping                     max_grad_norm
//     optimizer.params.lr                   lr
//     optimizer.params.betas / eps / weight_decay   betas / eps / weight_decay
//     scheduler.params.warmup_min_lr        0 (no program value needed)
//     scheduler.params.warmup_max_lr        lr
//     scheduler.params.warmup_num_steps     warmup_steps
//     scheduler.params.total_num_steps      total_steps
//     zero_optimization.reduce_bucket_size  hidden_size^2
//     zero_optimization.stage3_prefetch_bucket_size        int(0.9 x hidden_size^2)
//     zero_optimization.stage3_param_persistence_threshold 10 x hidden_size
//     fp16.enabled / bf16.enabled           precision == "fp16" / "bf16"
//   An "auto" whose value the program did not supply (or any other key's "auto") is an error
//   naming the key and what would resolve it (`flags` maps a ProgramValues field to the
//   program's option for it, e.g. "lr" -> "--lr", for that message).
// - Plain values; no threads.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>

namespace zs {

struct ProgramValues {
  std::optional<int64_t> micro_batch;
  std::optional<int64_t> accumulation_steps;
  std::optional<int64_t> dp_world_size;
  std::optional<double> max_grad_norm;
  std::optional<double> lr;
  std::optional<std::array<double, 2>> betas;
  std::optional<double> eps;
  std::optional<double> weight_decay;
  std::optional<int64_t> warmup_steps;
  std::optional<int64_t> total_steps;
  std::optional<int64_t> hidden_size;
  std::optional<std::string> precision;  // "fp16", "bf16" or "fp32"
  // For errors: the program's way to supply a field ("lr" -> "--lr"); absent: the field name.
  std::map<std::string, std::string> flags;
};

struct AutoFill {
  std::string key;    // "optimizer.params.lr"
  std::string value;  // the JSON text it became: "0.0003"
  std::string from;   // "lr", or "hidden_size^2"
};

}  // namespace zs

// ZeroEngine: a model's parameters, gradients and optimizer states, sharded across the
// data-parallel group as the ZeRO stage says, behind the UnitAccess hook surface.
//
// Contract
// - Create() is collective over `dp`: every rank passes the same config, model and init. It
//   splits `dp` into a gather group and a reduce group (so parameter all-gathers never queue
//   behind gradient buckets), lays out every unit (ShardLayout, padded so no size has to divide
//   the world size), initializes the parameters from `init` (every rank computes the same full
//   values and keeps what it owns) and allocates what the stage keeps resident. `device`, `dp`
//   and the tracker behind `device` must outlive the engine.
// - [Note: what each stage keeps] (compute dtype c = bf16/fp16/f32, P = a unit's padded size,
//   S = P / N its shard; "master + m + v" is AdamW with fp32 states: the fp32 master weights
//   and the optimizer's states (optimizers/optimizer_spec.h) count as optimizer states):
//     stage 0  params P (c), grads P (c), master + m + v over P       gradients all-reduced
//     stage 1  params P (c), grads P (c), master + m + v over S       all-reduced; params
//                                                                      all-gathered after step
//     stage 2  params P (c), grads S (c), master + m + v over S       reduce-scattered; same
//     stage 3  params S (c), grads S (c), master + m + v over S       reduce-scattered; params
//                                                                      gathered per use
//   Transient, accounted apart: the gradient staging of units in backward (fp32, kCommBuffers),
//   the reducer's bucket buffers (kCommBuffers), stage 3's gathered units
//   (kGatheredParameters) and, with bf16/fp16 compute, the widened fp32 view of units in use
//   (kActivations).
// - One training step: gradient_accumulation_steps micro-batches, each a forward and a backward
//   through the hooks (unit_access.h), then Step(). Each unit's gradient is reduced at its last
//   EndBackward of the micro-batch, overlapping the rest of backward; [Note: accumulation] every
//   stage reduces every micro-batch and accumulates reduced gradients in the compute dtype, so
//   stages 2/3 need no full-size gradient buffer and all stages add in the same order.
// - Step() finishes the reductions, unscales (fp16), checks overflow (fp16: all ranks agree and
//   skip together), computes the global gradient norm over all shards ([Note: one norm] each rank
//   sums squares over its shard in double whatever the stage; the partial sums are all-gathered
//   and added in rank order, so every stage and rank gets the same bits; in a model-parallel
//   job the dp totals are then added over the replica, [Note: one norm over the grid]), clips to
//   gradient_clipping, steps AdamW on the rank's optimizer range, and (stages 1/2) all-gathers
//   the updated parameters. With fp32 compute, stages 0-3 are bit-identical.
// - Evaluation: forward passes without backward between steps, in an evaluation bracket
//   (BeginEvaluation / EndEvaluation, [Note: evaluation] below); outside one, every forward
//   needs its backward before Step().
// - [Note: frozen units] A parameter with ParamSpec::trainable false is frozen: its values are
//   used as usual and never change. What the engine saves for it depends on its unit:
//   - A wholly frozen unit (every parameter frozen) keeps its parameters (compute dtype, as its
//     stage shards them, gathered per use at stage 3) and nothing else: no gradient buffer, no
//     optimizer tiles (so no fp32 master either: its values are its compute-dtype parameters,
//     which never change), no bucket in the reducer, no part in the gradient norm or the fp16
//     overflow check, no all-gather after a step. Its backward brackets still run (the model
//     passes the gradient on through it) and Grad() gives the transient fp32 staging as a
//     scratch buffer whose contents are dropped at the last EndBackward. Checkpoints save its
//     owned values as "master" with no states and load them back; GatherMasterParam (the
//     safetensors export) reads them widened.
//   - A mixed unit (frozen and trainable parameters: LoRA's frozen weight beside its adapters,
//     partial fine-tuning; PyTorch FSDP's use_orig_params=True) trains, and keeps its gradient
//     buffer and optimizer tiles over the whole unit: the memory saving is for wholly frozen
//     units only, as FSDP keeps a full flat gradient for a flat parameter that mixes
//     requires_grad. Why: a unit is one flat buffer under one ShardLayout, and a rank's gradient
//     shard, optimizer range and parameter shard are the same elements of it; leaving the frozen
//     elements out would need a second layout over the trainable ones, whose shards are other
//     elements than the parameter shards, and another collective after each step to bring
//     updated values to their parameter owners. Create logs (dp rank 0) one line per mixed unit
//     naming its frozen parameters and the gradient and optimizer bytes kept for them; the
//     memory tracker counts them. The frozen elements take part in nothing: their fp32
//     gradient is set to exact zeros before each reduction, whatever the model wrote there (Grad
//     is scratch for them too: an inf or NaN written there reaches neither the norm nor the
//     fp16 overflow check), and their segments step in a parameter group of their own after
//     the config's ([Note: parameter groups] in optimizers/optimizer_spec.h) with learning rate
//     0 and no weight decay, under every tier (device, CPU and NVMe offload: one tile loop).
//     With a zero gradient and initial states, every optimizer kind's update is then w * 1 - (+0)
//     (zero_engine.cc, GroupHypers): the master keeps its bits, -0.0 included, its states stay
//     initial, and param_out rewrites the same compute-dtype values. The zeros are what this
//     rests on: lr 0 alone would still turn a -0.0 into +0.0 (w - (0 * m) with m < 0 is
//     -0.0 + 0.0) and let garbage in as NaN (0 * NaN). Checkpoints save a frozen
//     parameter of a mixed unit as its master alone and load it back with initial states (so
//     a checkpoint from a run where it trained, or where it had a unit of its own, loads too).
//   To save a frozen parameter's gradient and optimizer memory, give it a unit of its own.
// - [Note: unused units] With zerostack.allow_unused_units a micro-batch may leave units out
//   (conditional computation). Ranks must still make the same collectives in the same order
//   and no rank knows which units the others ran, so each micro-batch's units are reduced in
//   one agreed order, the reverse unit index (backward's usual order), not as they complete:
//   at the micro-batch's first BeginBackward, every unit without a forward bracket in it is
//   unused there; unit u's reduction starts once every unit above it is reduced and either its
//   last EndBackward came (used) or at once (unused: a zero gradient, reduced as zeros, so the
//   ranks that ran it get the mean over all ranks, zero from those that did not). A unit done
//   before one above it holds its fp32 staging until its turn (nothing extra for a backward in
//   reverse unit order). A forward of a unit after its zero reduction is FailedPrecondition.
//   Each rank runs at least one backward bracket per micro-batch (one that ran nothing cannot
//   tell the micro-batch happened). At stage 3 a unit's forward gathers it, a collective of
//   the dp group, so a unit that some ranks run and others leave out must be persistent
//   (stage3_param_persistence_threshold; AllowsUnusedUnit says which): otherwise its gather
//   waits for ranks that never call it and fails at comm_timeout_ms, naming the unit. With
//   EngineParallelism::reduce_per_step, units without a bracket in the whole step are reduced
//   as zeros at Step(). Without the option every rank
//   runs every unit in every micro-batch: Step() fails naming a unit not run (where ranks
//   disagree, their collectives mismatch and time out first). Stages 0-3 reduce the same
//   values in the same order: bit-identical.
// - Errors: collectives and allocations return Status naming the unit and the operation; a
//   failed collective breaks the engine's communicators (later calls fail at once). Misuse of
//   the hooks (out-of-order brackets) is a ZS_CHECK.
// - Threads: one thread per rank calls everything; communication progresses on the
//   communicators' threads.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "runtime/base/status.h"
#include "runtime/base/trace_recorder.h"
#include "runtime/comm/communicator.h"
#include "runtime/device/device.h"
#include "runtime/engine/engine_config.h"
#include "runtime/model/model_spec.h"
#include "runtime/model/unit_access.h"
#include "runtime/sharding/shard_layout.h"

namespace zs {

// Where one Step's time went and what it moved (offload tuning: which tier limits the step).
// Waits are host time blocked on that tier; optimizer_seconds is the step's own compute.
struct StepTimes {
  double step_seconds = 0.0;             // the whole Step() call (the rest of a training step
                                         // is the model's forward and backward)
  double collective_seconds = 0.0;       // finishing reductions, the norm, the param all-gather
  double optimizer_seconds = 0.0;        // the optimizer kernels (waits excluded)
  double copy_wait_seconds = 0.0;        // device<->host copies (offload_optimizer)
  double nvme_read_wait_seconds = 0.0;   // optimizer tiles read from NVMe
  double nvme_write_wait_seconds = 0.0;  // optimizer tiles written back to NVMe
  int64_t device_to_host_bytes = 0;
  int64_t host_to_device_bytes = 0;
  int64_t nvme_read_bytes = 0;
  int64_t nvme_written_bytes = 0;
};

struct StepResult {
  int64_t step = 0;          // optimizer steps taken so far (skipped ones excluded)
  bool skipped = false;      // fp16 overflow: no update this step
  double grad_norm = 0.0;    // global L2 norm of the unscaled gradient, before clipping
  double clip_coef = 1.0;    // the factor the gradient was multiplied by (1 = not clipped)
  float loss_scale = 1.0f;   // the scale used for this step's backward
  double lr = 0.0;           // learning rate used
  StepTimes times;           // this rank's
};

// Where this rank's optimizer states live and what offload moved since Create.
struct OffloadReport {
  std::string optimizer_tier;   // "device", "host", "pinned_host" or "nvme"
  std::string parameter_tier;   // stage 3 parameter shards: "device", "host", "pinned_host", "nvme"
  std::string nvme_file;        // the swap file (nvme), else empty
  std::string io_backend;       // "io_uring", "libaio", "posix" (nvme), else "none"
  int64_t tiles = 0;            // optimizer tiles (store slots) of this rank
  int64_t device_to_host_bytes = 0;
  int64_t host_to_device_bytes = 0;
  int64_t nvme_read_bytes = 0;
  int64_t nvme_written_bytes = 0;
  int64_t nvme_demand_reads = 0;   // tile reads the step waited for from the start
  int64_t nvme_prefetch_hits = 0;  // tiles whose read a prefetch had started
  double copy_wait_seconds = 0.0;
  double nvme_read_wait_seconds = 0.0;
  double nvme_write_wait_seconds = 0.0;
  // offload_param nvme: the parameter shards' swap file, read before each gather.
  std::string param_nvme_file;
  int64_t param_nvme_read_bytes = 0;
  int64_t param_nvme_written_bytes = 0;
  int64_t param_nvme_prefetch_hits = 0;
  double param_nvme_read_wait_seconds = 0.0;
};

struct GatherReport {  // stage 3 counters (zero for other stages)
  int64_t gathers = 0;
  int64_t prefetch_hits = 0;
  int64_t demand_gathers = 0;
  int64_t reuse_hits = 0;
  int64_t trace_invalidations = 0;
  int64_t peak_live_elements = 0;
  // Gathers that held more than stage3_max_live_parameters: a soft cap ([Note: soft cap],
  // runtime/gather/gather_coordinator.h); 0 when the run stayed within it.
  int64_t max_live_exceeded = 0;
  // Evaluation ([Note: evaluation]): passes at every stage; the rest stage 3's counters of the
  // evaluation trace, kept apart from the training counters above.
  int64_t eval_passes = 0;
  int64_t eval_gathers = 0;
  int64_t eval_prefetch_hits = 0;
  int64_t eval_demand_gathers = 0;
  int64_t eval_trace_invalidations = 0;
};

// What an engine needs to know when it holds one part of a model-parallel job (runtime/parallel:
// tensor-parallel layers, one engine per pipeline stage). The default is a data-parallel job.
struct EngineParallelism {
  // The ranks holding the other parts of this model replica: every tp x pp position with this
  // rank's dp index, as ProcessGroups::model_parallel() gives them. Not owned; must outlive the
  // engine. Null (or a group of 1) = none. [Note: one norm over the grid] The global gradient
  // norm, and with it clipping and the fp16 overflow decision, covers the whole replica: each
  // engine sums its dp group as before, then the dp totals of the model-parallel group are
  // all-gathered and added in its rank order, so every rank of the job gets the same bits.
  Communicator* model_parallel = nullptr;
  // This rank's index in its tp group. Parameters whose ParamSpec::tensor_parallel is false are
  // the same on every tp rank: they count in the norm on tp rank 0 only.
  int tp_rank = 0;
  // This rank's index in its expert-parallel group, for an engine holding expert units
  // (ParamSpec::expert_parallel): parameters without the flag (a router) are the same on every
  // ep rank and count on ep rank 0 only. 0 for an engine of dense units.
  int ep_rank = 0;
  // [Note: per-step reduction] By default a pipeline stage's engine reduces each unit's gradient
  // once per micro-batch, as a data-parallel engine does ([Note: accumulation]), with the
  // schedule naming each bracket's micro-batch (UnitAccess::SetMicroBatch, [Note: micro-batches
  // in flight]): the fp32 staging of a unit exists only during its micro-batch's backward, so
  // stages 2 and 3 keep their gradient memory saving under pipelines, and the reduction
  // overlaps backward. With true, the engine ignores the micro-batch names instead: forward
  // brackets may open while a unit's backward is under way, each unit's fp32 staging
  // accumulates every micro-batch of the step and Step() reduces it once: 1/m of the dp
  // traffic for m micro-batches (DeepSpeed's pipeline engine reduces so), at the price of every
  // unit's full fp32 staging (kCommBuffers) from its first backward of the step until Step(),
  // whatever the stage, and no overlap. Step() does not count micro-batches in this mode. The
  // two modes add in different orders; within either, stages 0-3 are bit-identical.
  bool reduce_per_step = false;
};

// ---- Checkpoint state (zero_engine_state.cc; runtime/checkpoint/ stores it) ----------------
// [Note: checkpoint ownership] For checkpoints a rank owns, of parameter p, the elements its dp
// shard holds: ShardLayout::OwnedBy(p, rank), at every stage (stage 0 keeps every element on
// every rank, and saves only its shard's part, so the ranks of any stage write disjoint parts
// that cover every element once). Ranges are in the parameter frame, unpadded: padding and the
// gaps between parameters are never saved (their master is 0, their states are the optimizer's
// initial ones: exactly what the run holds, except Adagrad's int8 accumulator with
// initial_accumulator_value > 0, whose padding codes are re-encoded from the initial value).
//
// One array of one owned part, as the optimizer keeps it (optimizers/optimizer_spec.h, [Note:
// state layout]): the raw bytes, so fp32, bf16 and int8 states round-trip exactly.
struct OwnedArray {
  std::string kind;           // "master", "state0", "state1"
  std::string dtype;          // "f32", "bf16", "int8" (the master is always "f32")
  std::vector<uint8_t> data;  // elements [begin, end) of the parameter, in `dtype`
  // int8 only: [Note: int8 blocks in checkpoints] the scales of the kQuantBlock-element blocks
  // meeting [begin, end), in order; block j starts at parameter offset
  // block_origin + j * kQuantBlock (block_origin <= begin; negative when the block starts in an
  // earlier parameter or gap: blocks run over the unit's flat optimizer range, from the start of
  // the rank's optimizer range). Element x decodes as code * scales[(x - block_origin) /
  // kQuantBlock].
  std::vector<float> scales;
  int64_t block_origin = 0;
};

// What one rank owns of one parameter ([Note: checkpoint ownership]).
struct OwnedParamState {
  int unit = 0;
  int param = 0;
  int64_t begin = 0;  // the owned range of the parameter, [begin, end), parameter frame
  int64_t end = 0;
  std::vector<OwnedArray> arrays;  // "master", then the optimizer's states in order
};

// What LoadOwnedState asks a checkpoint for: parameter `param` of `unit` over [begin, end), its
// master ("f32") and `num_states` states. The answer's arrays must be, per state, either in
// `state_dtype` (for int8 with scales on this request's grid, block_origin as given here: then
// the bits are restored as they were) or "f32" values (then the engine encodes them:
// [Note: int8 blocks in checkpoints] when the saved blocks do not line up with the engine's).
struct OwnedStateRequest {
  int unit = 0;
  int param = 0;
  int64_t begin = 0;
  int64_t end = 0;
  int num_states = 0;
  std::string state_dtype;   // "f32", "bf16", "int8"
  int64_t block_origin = 0;  // int8: parameter offset of the engine's first block meeting it
};
using OwnedStateSource = std::function<StatusOr<OwnedParamState>(const OwnedStateRequest&)>;

// The scalars a continued run needs besides the arrays: the step counter (the LR schedule is a
// function of it) and the fp16 loss scaler.
struct EngineTrainingState {
  int64_t step = 0;
  float loss_scale = 1.0f;
  int64_t loss_scale_hysteresis_left = 0;
  int64_t loss_scale_good_steps = 0;
};

class ZeroEngine final : public UnitAccess {
 public:
  // `trace` (not owned, may be null; must outlive the engine): the engine records its work as
  // spans on its own tracks: "compute" (each unit's forward and backward brackets), "gather"
  // (stage 3 all-gathers the host waited for, and the stage 1/2 parameter all-gather), "reduce"
  // (gradient hand-offs and the step's finish), "optimizer" (each tile's step), "engine step",
  // and with offload "copy d2h", "copy h2d", "nvme read", "nvme write" and "offload wait".
  // `parallel`: see EngineParallelism (a data-parallel job needs none).
  static StatusOr<std::unique_ptr<ZeroEngine>> Create(const EngineConfig& config, ModelSpec model,
                                                      const ParamInit& init, Device& device,
                                                      Communicator& dp,
                                                      TraceRecorder* trace = nullptr,
                                                      const EngineParallelism& parallel = {});
  ~ZeroEngine() override;

  // UnitAccess.
  const ModelSpec& model() const override;
  Status BeginForward(int unit) override;
  Status EndForward(int unit) override;
  Status BeginBackward(int unit) override;
  Status EndBackward(int unit) override;
  std::span<const float> Param(int unit, int param) override;
  std::span<float> Grad(int unit, int param) override;
  float backward_scale() const override;
  void SetMicroBatch(int micro_batch) override;
  // zerostack.allow_unused_units, and at stage 3 the unit persistent ([Note: unused units]).
  bool AllowsUnusedUnit(int unit) const override;

  // Collective. Ends the accumulation window: requires gradient_accumulation_steps complete
  // micro-batches since the last Step (FailedPrecondition naming the count otherwise).
  StatusOr<StepResult> Step();

  // [Note: evaluation] Forward passes without backward (a held-out loss), between optimizer
  // steps: BeginEvaluation(), then any number of forward passes (BeginForward/EndForward
  // brackets only, e.g. nn::Gpt::Forward), then EndEvaluation(). In between, brackets stage no
  // gradient and reduce nothing; stage 3 gathers and releases units as in training but records
  // and replays a separate evaluation trace (gather_coordinator.h, [Note: evaluation trace]),
  // so the training trace and its prefetching are untouched. Nothing a training step reads
  // changes (parameters, gradients, optimizer states, loss scale, step counter): a step after
  // an evaluation has the same bits as without it. BeginEvaluation() returns
  // FailedPrecondition, changing nothing, unless at a step boundary (no bracket open, no
  // micro-batch completed since the last Step, not evaluating); EndEvaluation() returns
  // FailedPrecondition if a bracket is still open or no evaluation is under way. A backward
  // bracket, Grad() or Step() during an evaluation is a ZS_CHECK / FailedPrecondition
  // respectively. Collective where the forward is (stage 3: every rank runs the same passes).
  Status BeginEvaluation();
  Status EndEvaluation();
  bool evaluating() const;

  // Step() in two halves, for a model whose parameters live in several engines (experts: one
  // engine over the dp group for the dense units, one over the expert-data-parallel group for
  // the experts), which must clip with one global norm. PrepareStep() finishes the reductions
  // and returns this engine's sum of squares of the unscaled gradient over its dp group (the
  // first half of [Note: one norm over the grid]: EngineParallelism's skipping applies, the
  // model-parallel sum does not); FinishStep(total) takes the job's total (the caller adds the
  // engines' sums and their model-parallel groups' in a fixed order, the same on every rank)
  // and clips, checks fp16 overflow, steps and gathers. Step() is
  // FinishStep(PrepareStep() summed over EngineParallelism::model_parallel). Collective, as
  // Step(); calling them out of order is a ZS_CHECK.
  StatusOr<double> PrepareStep();
  StatusOr<StepResult> FinishStep(double global_sum_squares);

  // Collective helpers for training loops and tests.
  StatusOr<double> AllReduceMean(double local);  // the mean of one value over the dp group
  // The full fp32 master values of one parameter (collective: gathers the unit's shards).
  StatusOr<std::vector<float>> GatherMasterParam(int unit, int param);
  // FNV-1a 64 over the fp32 master bits of every parameter, units and parameters in order:
  // equal digests mean bit-identical parameters, whatever the stage or world size.
  StatusOr<uint64_t> MasterDigest();

  const EngineConfig& config() const;
  int stage() const;
  int world_size() const;
  int rank() const;
  DType compute_dtype() const;
  const ShardLayout& layout(int unit) const;
  GatherReport gather_report() const;
  OffloadReport offload_report() const;
  int64_t micro_batches_pending() const;  // completed since the last Step
  // Bytes per parameter the optimizer keeps: the fp32 master plus its states in their dtype
  // (12 for AdamW with fp32 states; int8 states include their block scales).
  double optimizer_bytes_per_param() const;
  // What steps the shards, for logs: "AdamW, fp32 states, CPU kernels AVX2 x 2 threads, prefetch
  // auto (none on this CPU); this rank's 1.50 GiB of optimizer arrays exceed the 8.0 MiB
  // cache-resident limit: streamed param_out, no prefetch" (the Highway target the kernels
  // dispatched to on this CPU, optimizer_threads, what optimizer_prefetch does here, and the
  // stores and prefetch this rank's step uses: zerostack.optimizer_cache_resident_bytes).
  std::string optimizer_summary() const;

  // Checkpoints ([Note: checkpoint ownership]). VisitOwnedState calls `visit` for every
  // parameter part this rank owns, units and parameters in order (not collective; reads the
  // optimizer tiles through the shard store, NVMe included; stops at the first error `visit`
  // returns). Requires no micro-batch pending (FailedPrecondition). LoadOwnedState is
  // collective: it asks `source` for every parameter part in this rank's optimizer range (stage
  // 0: all of every parameter), writes the master and states, rebuilds the compute-dtype
  // parameters (all-gathered at stages 1/2, persistent units regathered at stage 3) and sets
  // `state`. After an error the engine's optimizer state is undefined (Aborted from then on).
  EngineTrainingState training_state() const;
  Status VisitOwnedState(const std::function<Status(const OwnedParamState&)>& visit);
  Status LoadOwnedState(const OwnedStateSource& source, const EngineTrainingState& state);

 private:
  class Impl;
  explicit ZeroEngine(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace zs

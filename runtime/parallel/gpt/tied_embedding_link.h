// TiedEmbeddingLink: GPT's output projection is its token embedding (tied weights). Under
// pipeline parallelism the embedding (the first chunk, pp rank 0) and the head (the last chunk,
// pp rank p-1) sit on different ranks, and only rank 0 holds wte (its engine owns the parameter,
// its optimizer state and its gradient). This link carries what the head needs across:
//   - the weights, once per step: rank 0 sends its wte (tp shard) with the step's first
//     embedding forward; rank p-1 receives them before its first head forward;
//   - the gradient, once per micro-batch: rank p-1 sends the head's wte gradient of each
//     micro-batch; rank 0 adds it into wte's gradient in that micro-batch's embedding backward,
//     before the embedding's own contribution (nn::Gpt's order: head first, then embedding).
// Megatron instead keeps a copy of wte on the last stage and all-reduces the two copies'
// gradients; one owner keeps one optimizer state and needs no agreement between copies.
//
// Contract
// - Create is collective over `pp` (size >= 2): it splits {rank 0, rank p-1} into a group of
//   their own ("tied-embedding"), so these messages never queue behind the pipeline's
//   activations. Other pp ranks get a link with no group (is_first()/is_last() false) and must
//   not call the transfer functions.
// - Sends are asynchronous (send_buffers.h): the link copies what it sends and keeps it until
//   delivered (a delivered send's buffer is reused by the next one, so the buffers number the
//   sends in flight, not the micro-batches); Finish() (at the end of each step, before the
//   engine's Step) waits for every send in flight, and so does the destructor (which can block
//   up to the communicator's timeout when the peer is gone). Receives block the calling thread.
//   The buffers (wte-sized each) are counted in `tracker` (host, kActivations). Messages in each
//   direction are matched in order, so every step must make the same calls in the same
//   micro-batch order on both ends.
// - Errors: communicator errors are returned with the direction and micro-batch named.
// - One thread at a time (the rank's training thread).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "runtime/base/status.h"
#include "runtime/comm/communicator.h"
#include "runtime/device/memory_tracker.h"
#include "runtime/device/tracked_bytes.h"
#include "runtime/parallel/pipeline/send_buffers.h"

namespace zs::parallel {

class TiedEmbeddingLink {
 public:
  static StatusOr<std::unique_ptr<TiedEmbeddingLink>> Create(Communicator& pp,
                                                             int64_t wte_elements,
                                                             MemoryTracker* tracker = nullptr);
  ~TiedEmbeddingLink();

  bool is_first() const { return first_; }  // pp rank 0: owns wte
  bool is_last() const { return last_; }    // pp rank p-1: the head

  // pp rank 0.
  Status SendWeights(std::span<const float> wte);
  Status AddGradInto(int micro_batch, std::span<float> grad);  // blocks until it arrives
  // pp rank p-1.
  StatusOr<std::span<const float>> ReceiveWeights();  // blocks
  // A zeroed buffer for micro-batch `micro_batch`'s head gradient; SendGrad sends it.
  std::span<float> GradBuffer();
  Status SendGrad(int micro_batch);
  // Both: waits for every send in flight.
  Status Finish();

 private:
  TiedEmbeddingLink(std::unique_ptr<Communicator> group, bool first, bool last, int64_t elements,
                    MemoryTracker* tracker)
      : group_(std::move(group)),
        first_(first),
        last_(last),
        elements_(elements),
        tracked_(tracker, MemoryTier::kHost, MemoryCategory::kActivations),
        sends_(tracker, MemoryTier::kHost, MemoryCategory::kActivations) {}
  void UpdateTracker();

  std::unique_ptr<Communicator> group_;  // {first, last}; null on other ranks
  bool first_;
  bool last_;
  int64_t elements_;
  TrackedBytes tracked_;         // weights_, received_ (kHost, kActivations)
  std::vector<float> weights_;   // last: the received wte
  std::vector<float> grad_;      // last: the micro-batch's gradient being built (from sends_)
  std::vector<float> received_;  // first: a received gradient
  SendBuffers sends_;            // the sends in flight and their reusable buffers
};

}  // namespace zs::parallel

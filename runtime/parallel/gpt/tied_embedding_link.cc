#include "runtime/parallel/gpt/tied_embedding_link.h"

#include <fmt/format.h>

#include <algorithm>

#include "runtime/base/check.h"

namespace zs::parallel {

StatusOr<std::unique_ptr<TiedEmbeddingLink>> TiedEmbeddingLink::Create(Communicator& pp,
                                                                       int64_t wte_elements,
                                                                       MemoryTracker* tracker) {
  if (pp.size() < 2) {
    return InvalidArgumentError(fmt::format(
        "tied embedding link: the pp group '{}' has {} rank(s); a link needs two stages",
        pp.group_name(), pp.size()));
  }
  const bool first = pp.rank() == 0, last = pp.rank() == pp.size() - 1;
  ZS_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> group,
                      pp.Split(first || last ? 0 : -1, first ? 0 : 1, "tied-embedding"));
  return std::unique_ptr<TiedEmbeddingLink>(
      new TiedEmbeddingLink(std::move(group), first, last, wte_elements, tracker));
}

TiedEmbeddingLink::~TiedEmbeddingLink() {
  (void)Finish();
  spare_.clear();
  weights_ = {};
  grad_ = {};
  received_ = {};
  UpdateTracker();
}

void TiedEmbeddingLink::UpdateTracker() {
  size_t floats = weights_.capacity() + grad_.capacity() + received_.capacity();
  for (const std::vector<float>& b : spare_) floats += b.capacity();
  for (const PendingSend& p : pending_) floats += p.buffer.capacity();
  tracked_.Set(int64_t(floats * sizeof(float)));
}

Status TiedEmbeddingLink::ReapDelivered() {
  Status first_error;
  for (size_t i = 0; i < pending_.size();) {
    if (!pending_[i].handle.Test()) {
      ++i;
      continue;
    }
    Status s = pending_[i].handle.Wait();
    if (!s.ok() && first_error.ok()) first_error = s;
    spare_.push_back(std::move(pending_[i].buffer));
    pending_.erase(pending_.begin() + ptrdiff_t(i));
  }
  return first_error;
}

std::vector<float> TiedEmbeddingLink::TakeBuffer() {
  std::vector<float> buffer;
  if (!spare_.empty()) {
    buffer = std::move(spare_.back());
    spare_.pop_back();
  }
  return buffer;
}

Status TiedEmbeddingLink::SendWeights(std::span<const float> wte) {
  ZS_CHECK(first_ && int64_t(wte.size()) == elements_, "SendWeights on the wrong rank or size");
  if (Status s = ReapDelivered(); !s.ok()) {
    return s.WithContext("sending wte to the last pipeline stage");
  }
  std::vector<float> buffer = TakeBuffer();
  buffer.assign(wte.begin(), wte.end());
  CommHandle handle = group_->StartSend(buffer.data(), buffer.size(), DType::kF32, 1);
  pending_.push_back(PendingSend{std::move(handle), std::move(buffer)});
  UpdateTracker();
  return OkStatus();
}

Status TiedEmbeddingLink::AddGradInto(int micro_batch, std::span<float> grad) {
  ZS_CHECK(first_ && int64_t(grad.size()) == elements_, "AddGradInto on the wrong rank or size");
  received_.resize(size_t(elements_));
  if (Status s = group_->Recv(received_.data(), received_.size(), DType::kF32, 1); !s.ok()) {
    return s.WithContext(
        fmt::format("receiving the head's wte gradient of micro-batch {}", micro_batch));
  }
  for (size_t i = 0; i < grad.size(); ++i) grad[i] += received_[i];
  UpdateTracker();
  return OkStatus();
}

StatusOr<std::span<const float>> TiedEmbeddingLink::ReceiveWeights() {
  ZS_CHECK(last_, "ReceiveWeights on a rank other than the last stage");
  weights_.resize(size_t(elements_));
  if (Status s = group_->Recv(weights_.data(), weights_.size(), DType::kF32, 0); !s.ok()) {
    return s.WithContext("receiving wte from the first pipeline stage");
  }
  UpdateTracker();
  return std::span<const float>(weights_);
}

std::span<float> TiedEmbeddingLink::GradBuffer() {
  ZS_CHECK(last_, "GradBuffer on a rank other than the last stage");
  grad_.assign(size_t(elements_), 0.0f);
  return grad_;
}

Status TiedEmbeddingLink::SendGrad(int micro_batch) {
  ZS_CHECK(last_ && int64_t(grad_.size()) == elements_, "SendGrad without GradBuffer");
  if (Status s = ReapDelivered(); !s.ok()) {
    return s.WithContext(
        fmt::format("sending the head's wte gradient of micro-batch {}", micro_batch));
  }
  std::vector<float> buffer = TakeBuffer();
  buffer.swap(grad_);  // grad_ takes the spare (or nothing) for the next GradBuffer()
  CommHandle handle = group_->StartSend(buffer.data(), buffer.size(), DType::kF32, 0);
  pending_.push_back(PendingSend{std::move(handle), std::move(buffer)});
  UpdateTracker();
  return OkStatus();
}

Status TiedEmbeddingLink::Finish() {
  Status first_error;
  for (PendingSend& p : pending_) {
    Status s = p.handle.Wait();
    if (!s.ok() && first_error.ok()) {
      first_error = s.WithContext(first_ ? "sending wte to the last pipeline stage"
                                         : "sending the head's wte gradient to the first stage");
    }
    spare_.push_back(std::move(p.buffer));
  }
  pending_.clear();
  UpdateTracker();
  return first_error;
}

}  // namespace zs::parallel

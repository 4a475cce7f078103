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

TiedEmbeddingLink::~TiedEmbeddingLink() { (void)Finish(); }

void TiedEmbeddingLink::UpdateTracker() {
  tracked_.Set(int64_t((weights_.capacity() + received_.capacity()) * sizeof(float)));
}

Status TiedEmbeddingLink::SendWeights(std::span<const float> wte) {
  ZS_CHECK(first_ && int64_t(wte.size()) == elements_, "SendWeights on the wrong rank or size");
  ZS_RETURN_IF_ERROR(sends_.Reap());
  std::vector<float> buffer = sends_.Acquire(elements_);
  std::copy(wte.begin(), wte.end(), buffer.begin());
  sends_.Start(*group_, std::move(buffer), 1, "sending wte to the last pipeline stage");
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
  if (grad_.empty()) grad_ = sends_.Acquire(elements_);
  std::fill(grad_.begin(), grad_.end(), 0.0f);
  return grad_;
}

Status TiedEmbeddingLink::SendGrad(int micro_batch) {
  ZS_CHECK(last_ && int64_t(grad_.size()) == elements_, "SendGrad without GradBuffer");
  ZS_RETURN_IF_ERROR(sends_.Reap());
  sends_.Start(*group_, std::move(grad_), 0,
               fmt::format("sending the head's wte gradient of micro-batch {} to the first "
                           "stage",
                           micro_batch));
  grad_ = {};
  return OkStatus();
}

Status TiedEmbeddingLink::Finish() { return sends_.WaitAll(); }

}  // namespace zs::parallel

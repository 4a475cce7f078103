#include "runtime/parallel/pipeline/send_buffers.h"

#include <utility>

namespace zs {

std::vector<float> SendBuffers::Acquire(int64_t elements) {
  for (auto it = pool_.begin(); it != pool_.end(); ++it) {
    if (int64_t(it->capacity()) >= elements) {
      std::vector<float> buffer = std::move(*it);
      pool_.erase(it);
      buffer.resize(size_t(elements));
      return buffer;
    }
  }
  std::vector<float> buffer(static_cast<size_t>(elements));
  tracked_.Set(tracked_.current() + int64_t(buffer.capacity() * sizeof(float)));
  return buffer;
}

void SendBuffers::Release(std::vector<float> buffer) {
  if (buffer.capacity() == 0) return;
  pool_.push_back(std::move(buffer));
}

void SendBuffers::Start(Communicator& comm, std::vector<float> buffer, int peer,
                        std::string what) {
  Send& send = sends_.emplace_back(Send{CommHandle(), std::move(buffer), std::move(what)});
  send.handle = comm.StartSend(send.buffer.data(), send.buffer.size(), DType::kF32, peer);
}

Status SendBuffers::Complete(Send& send) {
  Status status = send.handle.Wait();
  Release(std::move(send.buffer));
  if (!status.ok()) return status.WithContext(send.what);
  return OkStatus();
}

Status SendBuffers::Reap() {
  Status first;
  for (auto it = sends_.begin(); it != sends_.end();) {
    if (!it->handle.Test()) {
      ++it;
      continue;
    }
    Status s = Complete(*it);
    if (first.ok()) first = std::move(s);
    it = sends_.erase(it);
  }
  return first;
}

Status SendBuffers::WaitAll() {
  Status first;
  for (Send& send : sends_) {
    Status s = Complete(send);
    if (first.ok()) first = std::move(s);
  }
  sends_.clear();
  return first;
}

}  // namespace zs

#include "runtime/comm/nccl/nccl_communicator.h"

#include <cuda_runtime_api.h>
#include <fmt/format.h>
#include <nccl.h>

#include "runtime/base/log.h"
#include "runtime/comm/nccl/nccl_status.h"
#include "runtime/comm/op_checks.h"

namespace zs {
namespace {

using Clock = std::chrono::steady_clock;

ncclDataType_t ToNccl(DType t) {
  switch (t) {
    case DType::kF32:
      return ncclFloat32;
    case DType::kBF16:
      return ncclBfloat16;
    case DType::kF16:
      return ncclFloat16;
  }
  return ncclFloat32;
}

ncclRedOp_t ToNccl(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return ncclSum;
    case ReduceOp::kAvg:
      return ncclAvg;
    case ReduceOp::kMax:
      return ncclMax;
  }
  return ncclSum;
}

Status CheckRecvBuffers(const Communicator& comm, const void* send, void* recv, size_t count,
                        std::string_view op) {
  ZS_RETURN_IF_ERROR(CheckBuffer(comm, "send", send, count, op));
  return CheckBuffer(comm, "recv", recv, count, op);
}

}  // namespace

NcclCommunicator::NcclCommunicator(ncclComm* comm, int device, int rank, int size,
                                   CommOptions options)
    : device_(device), rank_(rank), size_(size), options_(std::move(options)), comm_(comm) {}

StatusOr<std::unique_ptr<NcclCommunicator>> NcclCommunicator::Create(ncclComm* comm, int device,
                                                                     CommOptions options) {
  int rank = 0, size = 0;
  ncclResult_t r = ncclCommUserRank(comm, &rank);
  if (r == ncclSuccess) r = ncclCommCount(comm, &size);
  if (r != ncclSuccess) {
    Status s = NcclError(
        r, comm, fmt::format("nccl: querying the communicator of group '{}'", options.group_name));
    ncclCommAbort(comm);
    return s;
  }
  std::unique_ptr<NcclCommunicator> c(
      new NcclCommunicator(comm, device, rank, size, std::move(options)));
  ZS_RETURN_IF_ERROR(c->Init());  // on failure the destructor aborts the comm
  return c;
}

Status NcclCommunicator::Init() {
  const std::string where = fmt::format("nccl group '{}' (rank {} of {}, device {})", group_name(),
                                        rank_, size_, device_);
  cudaError_t e = cudaSetDevice(device_);
  if (e == cudaSuccess) e = cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking);
  if (e == cudaSuccess) e = cudaMalloc(reinterpret_cast<void**>(&scratch_), sizeof(float));
  if (e != cudaSuccess) {
    std::lock_guard<std::mutex> lock(mu_);
    broken_ = CudaError(e, where + ": creating the stream and scratch");
    return broken_;
  }
  waiter_ = std::thread([this] { WaiterLoop(); });
  return OkStatus();
}

NcclCommunicator::~NcclCommunicator() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (waiter_.joinable()) waiter_.join();  // drains: every pending op completes or fails
  cudaSetDevice(device_);
  if (comm_ != nullptr) {
    const std::string what =
        fmt::format("nccl: finalizing group '{}' (rank {} of {})", group_name(), rank_, size_);
    ncclResult_t r = ncclCommFinalize(comm_);
    Status s = r == ncclSuccess || r == ncclInProgress
                   ? WaitUntilReady(comm_, Clock::now() + options_.timeout, options_.timeout, what)
                   : NcclError(r, comm_, what);
    if (s.ok()) {
      ncclCommDestroy(comm_);
    } else {
      ZS_LOG(kWarn, "{}; aborting it", s.ToString());
      ncclCommAbort(comm_);
    }
    comm_ = nullptr;
  }
  if (scratch_ != nullptr) cudaFree(scratch_);
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

Status NcclCommunicator::AbortedStatus() const {
  return AbortedError(
      fmt::format("nccl group '{}' (rank {} of {}) is broken by an earlier "
                  "failure: {}",
                  group_name(), rank_, size_, broken_.ToString()));
}

void NcclCommunicator::FailLocked(std::shared_ptr<CommWork> failed, Status status) {
  if (broken_.ok()) broken_ = status;
  if (comm_ != nullptr) {
    ncclCommAbort(comm_);  // NCCL kernels still running on the stream exit
    comm_ = nullptr;
  }
  if (failed != nullptr) failed->Complete(std::move(status));
  for (Pending& p : pending_) {
    if (p.work != failed) p.work->Complete(AbortedStatus());
    cudaEventDestroy(p.event);  // allowed while unfinished: released when it completes
  }
  pending_.clear();
}

CommHandle NcclCommunicator::Enqueue(std::string description, const Status& valid, size_t count,
                                     IssueFn issue) {
  if (!valid.ok()) return CommHandle::Completed(valid, std::move(description));
  std::lock_guard<std::mutex> lock(mu_);
  if (!broken_.ok()) return CommHandle::Completed(AbortedStatus(), std::move(description));
  auto work = std::make_shared<CommWork>(description);
  Status s;
  cudaError_t e = cudaSetDevice(device_);
  if (e != cudaSuccess) s = CudaError(e, description + ": cudaSetDevice");
  if (s.ok() && count > 0) {
    const ncclResult_t r = static_cast<ncclResult_t>(issue(comm_, stream_));
    if (r == ncclInProgress) {
      s = WaitUntilReady(comm_, Clock::now() + options_.timeout, options_.timeout,
                         description + ": enqueueing");
    } else if (r != ncclSuccess) {
      s = NcclError(r, comm_, description);
    }
  }
  CUevent_st* event = nullptr;
  if (s.ok()) {
    e = cudaEventCreateWithFlags(&event, cudaEventDisableTiming);
    if (e == cudaSuccess) e = cudaEventRecord(event, stream_);
    if (e != cudaSuccess) s = CudaError(e, description + ": recording its completion event");
  }
  if (!s.ok()) {
    if (event != nullptr) cudaEventDestroy(event);
    FailLocked(work, std::move(s));
    return CommHandle(std::move(work));
  }
  pending_.push_back(Pending{work, event, std::nullopt});
  cv_.notify_all();
  return CommHandle(std::move(work));
}

void NcclCommunicator::WaiterLoop() {
  cudaSetDevice(device_);  // for cudaEventQuery on this thread
  auto sleep = std::chrono::microseconds(10);
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    cv_.wait(lock, [&] { return stopping_ || !pending_.empty(); });
    if (pending_.empty()) return;  // stopping and drained
    Pending& head = pending_.front();
    if (!head.deadline) head.deadline = Clock::now() + options_.timeout;
    const cudaError_t e = cudaEventQuery(head.event);
    if (e == cudaSuccess) {
      cudaEventDestroy(head.event);
      std::shared_ptr<CommWork> work = std::move(head.work);
      pending_.pop_front();
      work->Complete(OkStatus());
      sleep = std::chrono::microseconds(10);
      continue;
    }
    if (e != cudaErrorNotReady) {
      FailLocked(head.work, CudaError(e, head.work->description()));
      continue;
    }
    ncclResult_t state = ncclSuccess;
    const ncclResult_t r = ncclCommGetAsyncError(comm_, &state);
    if (r != ncclSuccess || (state != ncclSuccess && state != ncclInProgress)) {
      FailLocked(head.work,
                 NcclError(r != ncclSuccess ? r : state, comm_, head.work->description()));
      continue;
    }
    if (Clock::now() >= *head.deadline) {
      FailLocked(head.work,
                 DeadlineExceededError(fmt::format(
                     "{} did not complete within {} ms (a peer did not call it, called a "
                     "different operation, or died); the communicator was aborted",
                     head.work->description(), options_.timeout.count())));
      continue;
    }
    // Poll again soon; back off to 1 ms while an op is long. Start...() can take the lock.
    lock.unlock();
    std::this_thread::sleep_for(sleep);
    sleep = std::min(sleep * 2, std::chrono::microseconds(1000));
    lock.lock();
  }
}

CommHandle NcclCommunicator::StartAllGather(const void* send, void* recv, size_t count,
                                            DType dtype) {
  std::string d = DescribeOp(*this, "all_gather", count, dtype);
  const Status valid = CheckRecvBuffers(*this, send, recv, count, "all_gather");
  return Enqueue(std::move(d), valid, count, [=](ncclComm* c, CUstream_st* s) {
    return int(ncclAllGather(send, recv, count, ToNccl(dtype), c, s));
  });
}

CommHandle NcclCommunicator::StartReduceScatter(const void* send, void* recv, size_t count,
                                                DType dtype, ReduceOp op) {
  std::string d = DescribeOp(*this, "reduce_scatter", count, dtype, op);
  const Status valid = CheckRecvBuffers(*this, send, recv, count, "reduce_scatter");
  return Enqueue(std::move(d), valid, count, [=](ncclComm* c, CUstream_st* s) {
    return int(ncclReduceScatter(send, recv, count, ToNccl(dtype), ToNccl(op), c, s));
  });
}

CommHandle NcclCommunicator::StartAllReduce(const void* send, void* recv, size_t count, DType dtype,
                                            ReduceOp op) {
  std::string d = DescribeOp(*this, "all_reduce", count, dtype, op);
  const Status valid = CheckRecvBuffers(*this, send, recv, count, "all_reduce");
  return Enqueue(std::move(d), valid, count, [=](ncclComm* c, CUstream_st* s) {
    return int(ncclAllReduce(send, recv, count, ToNccl(dtype), ToNccl(op), c, s));
  });
}

CommHandle NcclCommunicator::StartBroadcast(void* buffer, size_t count, DType dtype, int root) {
  std::string d = DescribeOp(*this, "broadcast", count, dtype);
  Status valid = CheckBuffer(*this, "broadcast", buffer, count, "broadcast");
  if (valid.ok()) valid = CheckPeer(*this, root, "broadcast root");
  return Enqueue(std::move(d), valid, count, [=](ncclComm* c, CUstream_st* s) {
    return int(ncclBroadcast(buffer, buffer, count, ToNccl(dtype), root, c, s));
  });
}

CommHandle NcclCommunicator::StartSend(const void* buffer, size_t count, DType dtype, int peer) {
  std::string d = DescribeOp(*this, fmt::format("send(to {})", peer), count, dtype);
  Status valid = CheckBuffer(*this, "send", buffer, count, "send");
  if (valid.ok()) valid = CheckPeer(*this, peer, "send");
  if (valid.ok() && peer == rank_) {
    valid = InvalidArgumentError(fmt::format("{}: a rank cannot send to itself", d));
  }
  return Enqueue(std::move(d), valid, count, [=](ncclComm* c, CUstream_st* s) {
    ncclResult_t r = ncclGroupStart();
    if (r == ncclSuccess) r = ncclSend(buffer, count, ToNccl(dtype), peer, c, s);
    const ncclResult_t end = ncclGroupEnd();  // always closes the group
    return int(r != ncclSuccess ? r : end);
  });
}

CommHandle NcclCommunicator::StartRecv(void* buffer, size_t count, DType dtype, int peer) {
  std::string d = DescribeOp(*this, fmt::format("recv(from {})", peer), count, dtype);
  Status valid = CheckBuffer(*this, "recv", buffer, count, "recv");
  if (valid.ok()) valid = CheckPeer(*this, peer, "recv");
  if (valid.ok() && peer == rank_) {
    valid = InvalidArgumentError(fmt::format("{}: a rank cannot receive from itself", d));
  }
  return Enqueue(std::move(d), valid, count, [=](ncclComm* c, CUstream_st* s) {
    ncclResult_t r = ncclGroupStart();
    if (r == ncclSuccess) r = ncclRecv(buffer, count, ToNccl(dtype), peer, c, s);
    const ncclResult_t end = ncclGroupEnd();
    return int(r != ncclSuccess ? r : end);
  });
}

CommHandle NcclCommunicator::StartAllToAllv(const void* send, std::span<const size_t> send_counts,
                                            std::span<const size_t> send_offsets, void* recv,
                                            std::span<const size_t> recv_counts,
                                            std::span<const size_t> recv_offsets, DType dtype) {
  auto layout =
      std::make_shared<AllToAllLayout>(send_counts, send_offsets, recv_counts, recv_offsets);
  std::string d = DescribeAllToAll(*this, *layout, dtype);
  const Status valid = CheckAllToAllArgs(*this, send, recv, *layout, dtype, d);
  const size_t total = valid.ok() ? layout->send_total() + layout->recv_total() : 0;
  const int n = size_;
  return Enqueue(std::move(d), valid, total, [=](ncclComm* c, CUstream_st* s) {
    const size_t esize = DTypeSize(dtype);
    const auto* in = static_cast<const char*>(send);
    auto* out = static_cast<char*>(recv);
    ncclResult_t r = ncclGroupStart();
    for (int p = 0; p < n && r == ncclSuccess; ++p) {
      if (layout->send_counts[p] > 0) {
        r = ncclSend(in + layout->send_offsets[p] * esize, layout->send_counts[p], ToNccl(dtype), p,
                     c, s);
      }
      if (r == ncclSuccess && layout->recv_counts[p] > 0) {
        r = ncclRecv(out + layout->recv_offsets[p] * esize, layout->recv_counts[p], ToNccl(dtype),
                     p, c, s);
      }
    }
    const ncclResult_t end = ncclGroupEnd();  // always closes the group
    return int(r != ncclSuccess ? r : end);
  });
}

CommHandle NcclCommunicator::StartBarrier() {
  // A one-element all-reduce: every rank's stream passes it only once all ranks reached it.
  float* scratch = scratch_;
  return Enqueue(fmt::format("barrier on group '{}' (rank {} of {})", group_name(), rank_, size_),
                 OkStatus(), 1, [=](ncclComm* c, CUstream_st* s) {
                   return int(ncclAllReduce(scratch, scratch, 1, ncclFloat32, ncclSum, c, s));
                 });
}

StatusOr<std::unique_ptr<Communicator>> NcclCommunicator::Split(int color, int key,
                                                                std::string name) {
  const std::string what = fmt::format(
      "split of nccl group '{}' (rank {} of {}, color {}, key "
      "{}) into '{}'",
      group_name(), rank_, size_, color, key, name);
  ncclComm* child = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!broken_.ok()) return AbortedStatus();
    const cudaError_t e = cudaSetDevice(device_);
    if (e != cudaSuccess) return CudaError(e, what);
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    const ncclResult_t r =
        ncclCommSplit(comm_, color < 0 ? NCCL_SPLIT_NOCOLOR : color, key, &child, &config);
    Status s;
    if (r != ncclSuccess && r != ncclInProgress) {
      s = NcclError(r, comm_, what);
    } else {
      // Both the parent (the split's own collective) and the child (its initialisation).
      const auto deadline = Clock::now() + options_.timeout;
      s = WaitUntilReady(comm_, deadline, options_.timeout, what);
      if (s.ok() && child != nullptr) s = WaitUntilReady(child, deadline, options_.timeout, what);
    }
    if (!s.ok()) {
      if (child != nullptr) ncclCommAbort(child);
      FailLocked(nullptr, s);  // the parent may be stuck in the split: it is broken too
      return s;
    }
  }
  if (child == nullptr) return std::unique_ptr<Communicator>();  // color < 0
  CommOptions options = options_;
  options.group_name = std::move(name);
  ZS_ASSIGN_OR_RETURN(std::unique_ptr<NcclCommunicator> c,
                      Create(child, device_, std::move(options)));
  return std::unique_ptr<Communicator>(std::move(c));
}

}  // namespace zs

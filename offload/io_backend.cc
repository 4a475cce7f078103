#include "offload/io_backend.h"

#include <fmt/format.h>
#include <libaio.h>
#include <liburing.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <deque>
#include <thread>

#include "runtime/base/check.h"

namespace zs {

std::string ErrnoText(int error) {
  char buffer[256];
  // GNU strerror_r: returns either `buffer` or a static string.
  return fmt::format("{} (errno {})", strerror_r(error, buffer, sizeof(buffer)), error);
}

namespace {

// Submission system calls may refuse for a moment (EAGAIN: kernel resources; EINTR: a signal).
// They are retried this often, a short sleep apart, before the queue gives up.
constexpr int kSubmitRetries = 1000;
constexpr auto kSubmitRetrySleep = std::chrono::microseconds(100);

bool IsTransient(int error) { return error == EINTR || error == EAGAIN || error == EBUSY; }

// ---- io_uring ------------------------------------------------------------------------------

class IoUringQueue final : public IoQueue {
 public:
  explicit IoUringQueue(int depth) : depth_(depth) {}
  ~IoUringQueue() override {
    if (initialized_) io_uring_queue_exit(&ring_);
  }

  Status Init() {
    const int r = io_uring_queue_init(static_cast<unsigned>(depth_), &ring_, 0);
    if (r < 0) {
      return UnavailableError(
          fmt::format("io_uring_queue_init(entries={}) failed: {}", depth_, ErrnoText(-r)));
    }
    initialized_ = true;
    // IORING_OP_READ/WRITE (plain buffers, no iovec) need Linux 5.6; older rings cannot run
    // our ops, so they count as "no io_uring" and the store falls back.
    io_uring_probe* probe = io_uring_get_probe_ring(&ring_);
    const bool supported = probe != nullptr && io_uring_opcode_supported(probe, IORING_OP_READ) &&
                           io_uring_opcode_supported(probe, IORING_OP_WRITE);
    if (probe != nullptr) io_uring_free_probe(probe);
    if (!supported) {
      return UnavailableError("this kernel's io_uring lacks IORING_OP_READ/WRITE (Linux >= 5.6)");
    }
    return OkStatus();
  }

  IoBackend backend() const override { return IoBackend::kIoUring; }

  void Submit(std::span<IoOp* const> ops, bool single_submit) override {
    for (IoOp* op : ops) {
      io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
      ZS_CHECK(sqe != nullptr, "io_uring submission queue full: more than {} ops in flight",
               depth_);
      const auto bytes = static_cast<unsigned>(op->bytes);
      if (op->is_write) {
        io_uring_prep_write(sqe, op->fd, op->buffer, bytes, static_cast<uint64_t>(op->offset));
      } else {
        io_uring_prep_read(sqe, op->fd, op->buffer, bytes, static_cast<uint64_t>(op->offset));
      }
      io_uring_sqe_set_data(sqe, op);
      if (single_submit) SubmitQueued();
    }
    SubmitQueued();
  }

  void Reap(std::vector<IoOp*>& done) override {
    io_uring_cqe* cqe = nullptr;
    int r;
    while ((r = io_uring_wait_cqe(&ring_, &cqe)) < 0 && IsTransient(-r)) {
    }
    ZS_CHECK(r == 0, "io_uring_wait_cqe failed: {}", ErrnoText(-r));
    unsigned head;
    unsigned seen = 0;
    io_uring_for_each_cqe(&ring_, head, cqe) {
      auto* op = static_cast<IoOp*>(io_uring_cqe_get_data(cqe));
      op->result = cqe->res;
      done.push_back(op);
      ++seen;
    }
    io_uring_cq_advance(&ring_, seen);
  }

 private:
  // Submits every prepared entry. The kernel may take fewer than prepared (it stops after an
  // entry that fails to initialise, which still gets a completion); the rest stay in the ring
  // and go with the next call. Entries cannot be taken back once prepared, so a ring that keeps
  // refusing them is unusable: a ZS_CHECK (see the contract).
  void SubmitQueued() {
    int retries = 0;
    while (io_uring_sq_ready(&ring_) > 0) {
      const int r = io_uring_submit(&ring_);
      if (r > 0) continue;
      ZS_CHECK(r == 0 || IsTransient(-r), "io_uring_submit failed: {}", ErrnoText(-r));
      ZS_CHECK(++retries < kSubmitRetries, "io_uring_submit made no progress in {} tries: {}",
               kSubmitRetries, r == 0 ? std::string("0 entries taken") : ErrnoText(-r));
      std::this_thread::sleep_for(kSubmitRetrySleep);
    }
  }

  const int depth_;
  bool initialized_ = false;
  io_uring ring_{};
};

// ---- libaio --------------------------------------------------------------------------------

class LibaioQueue final : public IoQueue {
 public:
  explicit LibaioQueue(int depth)
      : depth_(depth), control_blocks_(static_cast<size_t>(depth)), events_(depth) {
    for (iocb& cb : control_blocks_) free_.push_back(&cb);
  }
  ~LibaioQueue() override {
    if (context_ != nullptr) io_destroy(context_);
  }

  Status Init() {
    const int r = io_setup(depth_, &context_);  // libaio returns -errno
    if (r < 0) {
      context_ = nullptr;
      return UnavailableError(
          fmt::format("io_setup(nr_events={}) failed: {} (see /proc/sys/fs/aio-max-nr)", depth_,
                      ErrnoText(-r)));
    }
    return OkStatus();
  }

  IoBackend backend() const override { return IoBackend::kLibaio; }

  void Submit(std::span<IoOp* const> ops, bool single_submit) override {
    batch_.clear();
    for (IoOp* op : ops) {
      ZS_CHECK(!free_.empty(), "libaio queue full: more than {} ops in flight", depth_);
      iocb* cb = free_.back();
      free_.pop_back();
      if (op->is_write) {
        io_prep_pwrite(cb, op->fd, op->buffer, static_cast<size_t>(op->bytes), op->offset);
      } else {
        io_prep_pread(cb, op->fd, op->buffer, static_cast<size_t>(op->bytes), op->offset);
      }
      cb->data = op;
      batch_.push_back(cb);
    }
    if (single_submit) {
      for (iocb* cb : batch_) SubmitControlBlocks(&cb, 1);
    } else {
      SubmitControlBlocks(batch_.data(), static_cast<int>(batch_.size()));
    }
  }

  void Reap(std::vector<IoOp*>& done) override {
    if (!refused_.empty()) {  // ops the kernel never took: complete without waiting
      done.insert(done.end(), refused_.begin(), refused_.end());
      refused_.clear();
      return;
    }
    int n;
    while ((n = io_getevents(context_, 1, depth_, events_.data(), nullptr)) < 0 &&
           IsTransient(-n)) {
    }
    ZS_CHECK(n > 0, "io_getevents failed: {}", ErrnoText(-n));
    for (int i = 0; i < n; ++i) {
      auto* op = static_cast<IoOp*>(events_[i].data);
      // res is an unsigned long carrying the byte count or -errno.
      op->result = static_cast<int64_t>(static_cast<long>(events_[i].res));
      free_.push_back(events_[i].obj);
      done.push_back(op);
    }
  }

 private:
  // Unlike io_uring, control blocks io_submit did not take are not in the kernel, so they can
  // fail cleanly: they come back from the next Reap with result = -errno.
  void SubmitControlBlocks(iocb** cbs, int count) {
    int retries = 0;
    while (count > 0) {
      const int r = io_submit(context_, count, cbs);
      if (r > 0) {
        cbs += r;
        count -= r;
        continue;
      }
      if ((r == 0 || IsTransient(-r)) && ++retries < kSubmitRetries) {
        std::this_thread::sleep_for(kSubmitRetrySleep);
        continue;
      }
      for (int i = 0; i < count; ++i) {
        auto* op = static_cast<IoOp*>(cbs[i]->data);
        op->result = r < 0 ? r : -EAGAIN;
        free_.push_back(cbs[i]);
        refused_.push_back(op);
      }
      return;
    }
  }

  const int depth_;
  io_context_t context_ = nullptr;
  std::vector<iocb> control_blocks_;  // one per op in flight; addresses are stable
  std::vector<iocb*> free_;           // control blocks not in flight
  std::vector<iocb*> batch_;          // scratch of Submit
  std::vector<io_event> events_;
  std::vector<IoOp*> refused_;  // refused by io_submit, handed back by the next Reap
};

// ---- pread/pwrite --------------------------------------------------------------------------

// The portable fallback: ops run one at a time, synchronously, on the I/O thread inside Reap.
// Parallelism comes only from having several I/O threads (aio.intra_op_parallelism).
class PosixQueue final : public IoQueue {
 public:
  IoBackend backend() const override { return IoBackend::kPosix; }

  void Submit(std::span<IoOp* const> ops, bool /*single_submit*/) override {
    pending_.insert(pending_.end(), ops.begin(), ops.end());
  }

  void Reap(std::vector<IoOp*>& done) override {
    ZS_CHECK(!pending_.empty(), "PosixQueue::Reap with nothing submitted");
    IoOp* op = pending_.front();
    pending_.pop_front();
    const auto bytes = static_cast<size_t>(op->bytes);
    ssize_t r;
    do {
      r = op->is_write ? pwrite(op->fd, op->buffer, bytes, op->offset)
                       : pread(op->fd, op->buffer, bytes, op->offset);
    } while (r < 0 && errno == EINTR);
    op->result = r < 0 ? -errno : r;
    done.push_back(op);
  }

 private:
  std::deque<IoOp*> pending_;
};

}  // namespace

StatusOr<std::unique_ptr<IoQueue>> CreateIoQueue(IoBackend backend, int depth) {
  ZS_CHECK(depth >= 1, "queue depth {}", depth);
  switch (backend) {
    case IoBackend::kIoUring: {
      auto queue = std::make_unique<IoUringQueue>(depth);
      ZS_RETURN_IF_ERROR(queue->Init());
      return std::unique_ptr<IoQueue>(std::move(queue));
    }
    case IoBackend::kLibaio: {
      auto queue = std::make_unique<LibaioQueue>(depth);
      ZS_RETURN_IF_ERROR(queue->Init());
      return std::unique_ptr<IoQueue>(std::move(queue));
    }
    case IoBackend::kPosix:
      return std::unique_ptr<IoQueue>(std::make_unique<PosixQueue>());
    case IoBackend::kAuto:
      break;
  }
  ZS_CHECK(false, "CreateIoQueue needs a concrete backend, not {}", IoBackendName(backend));
  return InternalError("unreachable");
}

}  // namespace zs

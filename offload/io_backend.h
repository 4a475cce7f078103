// IoQueue: one submission/completion queue of an NvmeStore I/O thread, filled by every
// asynchronous I/O backend (io_uring, libaio, pread/pwrite) through the same interface.
// Private to offload/: the engine sees only NvmeStore and IoBackend.
//
// Contract
// - Ownership: a queue belongs to one I/O thread, which alone calls Submit and Reap (no locks
//   inside). The IoOps it is given are the caller's; each must stay valid, with its buffer, from
//   Submit until Reap hands it back.
// - Every op given to Submit comes back from Reap exactly once with `result` set: the bytes
//   moved (possibly fewer than asked), or -errno. A request the kernel refused at submission
//   comes back the same way, so the caller has one completion path.
// - The caller keeps at most `depth` ops (as given at creation) submitted and not yet reaped.
// - What blocks: Create blocks the host briefly (a ring or context is set up). Submit blocks
//   for the submission system call(s) only, except on the posix backend where it only queues.
//   Reap blocks the calling thread until at least one op has completed (posix: runs one op).
// - Errors: Create returns Unavailable naming the backend, the call and errno (e.g. io_uring
//   disabled by the kernel, aio-max-nr exhausted). A failure of the queue itself after creation
//   (a ring that rejects its own entries) is a bug and a ZS_CHECK: the kernel may still own
//   the buffers, so pretending to fail the ops would hand them back too early.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "offload/nvme_store.h"
#include "runtime/base/status.h"

namespace zs {

// One read or write of `bytes` at `offset` of `fd` (both multiples of kNvmeAlignment for
// O_DIRECT files), from or into `buffer`.
struct IoOp {
  bool is_write = false;
  int fd = -1;
  void* buffer = nullptr;
  int64_t offset = 0;
  int64_t bytes = 0;
  int64_t result = 0;  // set by the queue when the op comes back: bytes moved or -errno
};

class IoQueue {
 public:
  virtual ~IoQueue() = default;
  virtual IoBackend backend() const = 0;

  // Hands `ops` to the kernel: with one system call for the batch, or one per op when
  // `single_submit` (DeepSpeed's aio.single_submit). Never fails; see the contract.
  virtual void Submit(std::span<IoOp* const> ops, bool single_submit) = 0;
  // Blocks until at least one submitted op has completed; appends every completed op to `done`.
  // Must not be called with nothing submitted.
  virtual void Reap(std::vector<IoOp*>& done) = 0;
};

// Creates a queue of `backend` (not kAuto) that holds up to `depth` ops in flight.
StatusOr<std::unique_ptr<IoQueue>> CreateIoQueue(IoBackend backend, int depth);

// "Invalid argument" for EINVAL; thread-safe (strerror is not guaranteed to be).
std::string ErrnoText(int error);

}  // namespace zs

// PipelineLinks: one pp rank's point-to-point channels to its pipeline neighbours, each on a
// communicator of its own, so that no operation ever waits in a queue behind another channel's.
//
// Contract
// - A link e (0 <= e < p) joins rank e and rank (e + 1) % p. Forward messages (activations) run
//   on link e from rank e to rank e + 1; backward messages (gradients) from rank e + 1 to rank
//   e. Link p - 1 (from the last rank back to rank 0) is the wrap-around that the interleaved
//   schedule uses; it exists only when `wrap` is set.
// - Why one communicator per channel ([Note: pipeline channels]). A communicator runs its
//   operations in start order, and a Send may not complete before its Recv is posted, so two
//   channels sharing a communicator couple their progress: a Recv waiting for a late message
//   would hold back a Send behind it that a third rank needs. Here every communicator a rank
//   uses carries exactly one channel at that rank: only its sends to one neighbour in one
//   direction, or only its receives from one neighbour in one direction. A channel's messages
//   are sent and received in the same order (ValidateSchedule checks it for the schedule), so
//   the k-th Recv matches the k-th Send, and a channel's operations wait only for each other.
// - Communicators: Split copies of the pp group (color 0, key = rank, so ranks are kept), one
//   set for forward and one for backward. Link e uses copy color(e): e % 2, except the
//   wrap-around link with odd p, which uses copy 2 (an odd ring needs three colours so that a
//   rank's two links never share a copy). So a rank's send link (e = r) and receive link
//   (e = r - 1) in one direction are on different copies, and each copy is used by a rank for
//   one link only. That is 0 copies per direction for p = 1, 1 for p = 2 without wrap-around,
//   2 otherwise, 3 for odd p with wrap-around.
// - Create is collective over `pp` (it splits): every rank of the group calls it with the same
//   `wrap`, in the same order relative to other collectives of `pp`. `pp` must outlive the
//   links. The communicators are owned here; one thread at a time uses them.
#pragma once

#include <memory>
#include <vector>

#include "runtime/base/status.h"
#include "runtime/comm/communicator.h"

namespace zs {

class PipelineLinks {
 public:
  static StatusOr<PipelineLinks> Create(Communicator& pp, bool wrap);

  PipelineLinks(PipelineLinks&&) noexcept = default;
  PipelineLinks& operator=(PipelineLinks&&) noexcept = default;

  int rank() const { return rank_; }
  int size() const { return size_; }
  int next_rank() const { return (rank_ + 1) % size_; }
  int prev_rank() const { return (rank_ + size_ - 1) % size_; }

  // Activations to next_rank() / from prev_rank(); gradients to prev_rank() / from next_rank().
  // Checked (programmer error) for p = 1, and for a link that does not exist without wrap.
  Communicator& SendActivations() const { return Copy(forward_, rank_); }
  Communicator& RecvActivations() const { return Copy(forward_, prev_rank()); }
  Communicator& SendGradients() const { return Copy(backward_, prev_rank()); }
  Communicator& RecvGradients() const { return Copy(backward_, rank_); }

  // How many communicator copies per direction Create splits for p ranks.
  static int CopiesPerDirection(int p, bool wrap);

 private:
  PipelineLinks(int rank, int size, bool wrap) : rank_(rank), size_(size), wrap_(wrap) {}
  int Color(int link) const;
  Communicator& Copy(const std::vector<std::unique_ptr<Communicator>>& copies, int link) const;

  int rank_;
  int size_;
  bool wrap_;
  std::vector<std::unique_ptr<Communicator>> forward_;   // indexed by Color(link)
  std::vector<std::unique_ptr<Communicator>> backward_;  // indexed by Color(link)
};

}  // namespace zs

// The comparison point for bench_comm: OpenMPI's collectives on the same machine, measured the
// way bench_comm measures ranks as processes (bench/bench_comm.cc, BM_ProcessCollective), so the
// two busbw figures divide apples by apples:
// - sizes (nccl-tests): `size` is the full buffer: the all-reduce buffer, the all-gather OUTPUT
//   (count x n elements, count = size / 4 / n), the reduce-scatter INPUT (count x n); f32, sum;
//   every rank's send buffer holds 1 + rank;
// - busbw = size / time x 2(n-1)/n (all-reduce) or (n-1)/n (all-gather, reduce-scatter);
// - per (op, size) and repetition: one warm-up, two timed calls whose mean, maxed over the ranks,
//   sets the iteration count ceil(min_seconds / per_op) clamped to [3, 100000]; a barrier; then
//   rank 0's clock of the loop;
// - order: all_reduce, all_gather, reduce_scatter (bench_comm's registration order), sizes
//   ascending, repetitions of one (op, size) back to back; fresh buffers per (op, size).
// Rank 0 prints one line per (op, size): the median busbw of the repetitions and each of them.
// Built and run by scripts/bench_openmpi.sh; not part of the zerostack build.
//   mpi_collectives_bench [min_seconds=0.5] [sizes_mib=1,4,16,128] [repetitions=3]
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, n = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  const double min_seconds = argc > 1 ? std::atof(argv[1]) : 0.5;
  std::vector<long> sizes;
  {
    std::stringstream list(argc > 2 ? argv[2] : "1,4,16,128");
    for (std::string item; std::getline(list, item, ',');) {
      // bench_comm's rounding: a multiple of 64 bytes, at least 64.
      sizes.push_back(std::max(64L, long(std::atof(item.c_str()) * (1 << 20)) / 64 * 64));
    }
  }
  const int repetitions = argc > 3 ? std::max(1, std::atoi(argv[3])) : 3;
  if (rank == 0) {
    std::printf("%-16s %12s %6s %12s  %s\n", "collective", "size_bytes", "reps",
                "busbw_GB/s", "(median; each repetition's busbw_GB/s)");
  }
  for (int c = 0; c < 3; ++c) {
    const char* name = c == 0 ? "all_reduce" : c == 1 ? "all_gather" : "reduce_scatter";
    for (long bytes : sizes) {
      const long elems = bytes / 4;
      long count = elems, send_elems = elems, recv_elems = elems;
      if (c == 1) {
        count = elems / n;
        send_elems = count;
        recv_elems = count * n;
      } else if (c == 2) {
        count = elems / n;
        send_elems = count * n;
        recv_elems = count;
      }
      const double size = double(c == 0 ? count : count * n) * 4;
      const double factor = c == 0 ? 2.0 * (n - 1) / n : double(n - 1) / n;
      std::vector<float> send(send_elems, 1.0f + float(rank)), recv(recv_elems, 0.f);
      auto run = [&] {
        if (c == 0) {
          MPI_Allreduce(send.data(), recv.data(), int(count), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        } else if (c == 1) {
          MPI_Allgather(send.data(), int(count), MPI_FLOAT, recv.data(), int(count), MPI_FLOAT,
                        MPI_COMM_WORLD);
        } else {
          MPI_Reduce_scatter_block(send.data(), recv.data(), int(count), MPI_FLOAT, MPI_SUM,
                                   MPI_COMM_WORLD);
        }
      };
      std::vector<double> busbw;
      for (int r = 0; r < repetitions; ++r) {
        run();  // warm-up
        double t0 = MPI_Wtime();
        run();
        run();
        double per_op = (MPI_Wtime() - t0) / 2;
        MPI_Allreduce(MPI_IN_PLACE, &per_op, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        const long iters = std::clamp<long>(long(std::ceil(min_seconds / std::max(per_op, 1e-7))),
                                            3, 100000);
        MPI_Barrier(MPI_COMM_WORLD);
        t0 = MPI_Wtime();
        for (long i = 0; i < iters; ++i) run();
        const double t = MPI_Wtime() - t0;
        busbw.push_back(size * factor * double(iters) / t / 1e9);
      }
      if (rank == 0) {
        std::vector<double> sorted = busbw;
        std::sort(sorted.begin(), sorted.end());
        const size_t m = sorted.size();
        const double median = m % 2 ? sorted[m / 2] : (sorted[m / 2 - 1] + sorted[m / 2]) / 2;
        std::printf("%-16s %12.0f %6d %12.3f ", name, size, repetitions, median);
        for (double b : busbw) std::printf(" %.3f", b);
        std::printf("\n");
        std::fflush(stdout);
      }
    }
  }
  MPI_Finalize();
  return 0;
}

// The comparison point for bench_comm: OpenMPI's collectives on the same machine, measured
// with the same sizes and nccl-tests bus-bandwidth conventions (see bench/bench_comm.cc).
// Built and run by scripts/bench_openmpi.sh; not part of the zerostack build.
#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, n = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  const double min_seconds = argc > 1 ? std::atof(argv[1]) : 0.5;
  if (rank == 0) std::printf("%-16s %12s %10s %12s %12s\n", "collective", "size_bytes", "iters", "algbw_GB/s", "busbw_GB/s");
  for (long bytes = 1L << 20; bytes <= 256L << 20; bytes *= 4) {
    const long elems = bytes / 4;
    const long count = elems / n;
    std::vector<float> send(elems, 1.0f + rank), recv(elems, 0.f);
    for (int c = 0; c < 3; ++c) {
      const char* name = c == 0 ? "all_reduce" : c == 1 ? "all_gather" : "reduce_scatter";
      auto run = [&] {
        if (c == 0) MPI_Allreduce(send.data(), recv.data(), int(elems), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        if (c == 1) MPI_Allgather(send.data(), int(count), MPI_FLOAT, recv.data(), int(count), MPI_FLOAT, MPI_COMM_WORLD);
        if (c == 2) MPI_Reduce_scatter_block(send.data(), recv.data(), int(count), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      };
      run();  // warm-up
      // Every rank runs the same number of iterations: rank 0 decides and broadcasts.
      long iters = 1;
      while (true) {
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        for (long i = 0; i < iters; ++i) run();
        double t = MPI_Wtime() - t0;
        MPI_Bcast(&t, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
        if (t >= min_seconds || iters >= (1L << 20)) {
          const double size = c == 0 ? double(elems) * 4 : double(count) * n * 4;
          const double factor = c == 0 ? 2.0 * (n - 1) / n : double(n - 1) / n;
          const double algbw = size * iters / t / 1e9;
          if (rank == 0) std::printf("%-16s %12.0f %10ld %12.3f %12.3f\n", name, size, iters, algbw, algbw * factor);
          break;
        }
        iters *= 2;
      }
    }
  }
  MPI_Finalize();
  return 0;
}

/* bench/mpi/mpi_reference.c — the Open MPI side of bench/compare_mpi.py: the three
 * measurements remora's `bench p2p`, `bench rma` and `bench coll` make, written the way
 * the OSU micro-benchmarks make them, for two ranks.
 *
 *   mpi_reference bw SIZE WINDOW ITERS         osu_bw: rank 0 posts WINDOW MPI_Isend of
 *                                              SIZE bytes, rank 1 as many MPI_Irecv, then
 *                                              a 4-byte ack; ITERS timed windows
 *   mpi_reference put SIZE WINDOW ITERS        osu_put_bw (lock): rank 0 locks rank 1's
 *                                              window, posts WINDOW MPI_Put, unlocks
 *   mpi_reference lat SIZE 1 ITERS             osu_latency: rank 0 sends SIZE bytes, rank 1
 *                                              sends them back (blocking); one-way latency
 *                                              = seconds / ITERS / 2
 *   mpi_reference allreduce SIZE ITERS         MPI_Allreduce of SIZE bytes of float, sum
 *   mpi_reference allreduce_inplace SIZE ITERS the same with MPI_IN_PLACE (as PyTorch's
 *                                              allreduce, which works in place)
 *
 * Each run does ITERS/10 + 1 untimed iterations first, checks the bytes that arrived
 * (exit 2 on a mismatch) and prints on rank 0 one line:
 *
 *   RESULT <mode> <size> <MB/s> <seconds> <cpu seconds of both ranks>
 *
 * where MB/s is 10^6 bytes per second moved by rank 0 (bw, put) or SIZE per operation
 * (allreduce: the algorithm bandwidth, as `remora bench coll` reports it).
 * Built by bench/compare_mpi.py with mpicc; not part of the library's build. */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

static double cpu_seconds(void) {
  struct rusage u;
  getrusage(RUSAGE_SELF, &u);
  return (double)u.ru_utime.tv_sec + (double)u.ru_stime.tv_sec +
         ((double)u.ru_utime.tv_usec + (double)u.ru_stime.tv_usec) / 1e6;
}

static unsigned char pattern(size_t i, int iter) { return (unsigned char)(i * 131u + (unsigned)iter * 7u + 1u); }

static void fill(unsigned char* p, size_t n, int iter) {
  for (size_t i = 0; i < n; i += 4096) p[i] = pattern(i, iter);
  p[n - 1] = pattern(n - 1, iter);
}

static int check(const unsigned char* p, size_t n, int iter) {
  for (size_t i = 0; i < n; i += 4096)
    if (p[i] != pattern(i, iter)) return 0;
  return p[n - 1] == pattern(n - 1, iter);
}

/* The timed part starts at iteration 0, after the warm-up, with both ranks lined up. */
static void start_clock(int it, double* t0) {
  if (it != 0) return;
  MPI_Barrier(MPI_COMM_WORLD);
  *t0 = MPI_Wtime();
}

static int run_bw(int rank, size_t size, int window, int iters, int warmup, double* secs) {
  unsigned char* buf = malloc(size);
  MPI_Request* reqs = malloc(sizeof(MPI_Request) * (size_t)window);
  int ack = 0, ok = 1;
  double t0 = 0;
  for (int it = -warmup; it < iters; ++it) {
    start_clock(it, &t0);
    if (rank == 0) {
      fill(buf, size, it);
      for (int w = 0; w < window; ++w) MPI_Isend(buf, (int)size, MPI_BYTE, 1, 100, MPI_COMM_WORLD, &reqs[w]);
      MPI_Waitall(window, reqs, MPI_STATUSES_IGNORE);
      MPI_Recv(&ack, 1, MPI_INT, 1, 101, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    } else {
      for (int w = 0; w < window; ++w) MPI_Irecv(buf, (int)size, MPI_BYTE, 0, 100, MPI_COMM_WORLD, &reqs[w]);
      MPI_Waitall(window, reqs, MPI_STATUSES_IGNORE);
      ok &= check(buf, size, it);
      MPI_Send(&ack, 1, MPI_INT, 0, 101, MPI_COMM_WORLD);
    }
  }
  *secs = MPI_Wtime() - t0;
  free(reqs);
  free(buf);
  return ok;
}

static int run_lat(int rank, size_t size, int iters, int warmup, double* secs) {
  unsigned char* buf = malloc(size > 0 ? size : 1);
  int ok = 1;
  double t0 = 0;
  for (int it = -warmup; it < iters; ++it) {
    start_clock(it, &t0);
    if (rank == 0) {
      fill(buf, size, it);
      MPI_Send(buf, (int)size, MPI_BYTE, 1, 102, MPI_COMM_WORLD);
      MPI_Recv(buf, (int)size, MPI_BYTE, 1, 102, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    } else {
      MPI_Recv(buf, (int)size, MPI_BYTE, 0, 102, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      MPI_Send(buf, (int)size, MPI_BYTE, 0, 102, MPI_COMM_WORLD);
    }
    ok &= check(buf, size, it);  /* the message came back (rank 0) or arrived (rank 1) whole */
  }
  *secs = MPI_Wtime() - t0;
  free(buf);
  return ok;
}

static int run_put(int rank, size_t size, int window, int iters, int warmup, double* secs) {
  unsigned char* buf;
  MPI_Win win;
  MPI_Alloc_mem((MPI_Aint)size, MPI_INFO_NULL, &buf);
  memset(buf, 0, size);
  MPI_Win_create(buf, (MPI_Aint)size, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &win);
  int ok = 1;
  double t0 = 0;
  for (int it = -warmup; it < iters; ++it) {
    start_clock(it, &t0);
    if (rank == 0) {
      fill(buf, size, it);
      MPI_Win_lock(MPI_LOCK_SHARED, 1, 0, win);
      for (int w = 0; w < window; ++w) MPI_Put(buf, (int)size, MPI_BYTE, 1, 0, (int)size, MPI_BYTE, win);
      MPI_Win_unlock(1, win);
    }
  }
  *secs = MPI_Wtime() - t0;
  MPI_Barrier(MPI_COMM_WORLD);  // the target progresses passive-target puts in here
  if (rank == 1) {
    MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 1, 0, win);
    ok = check(buf, size, iters - 1);
    MPI_Win_unlock(1, win);
  }
  MPI_Win_free(&win);
  MPI_Free_mem(buf);
  return ok;
}

static int run_allreduce(int rank, size_t size, int iters, int warmup, int in_place, double* secs) {
  const size_t n = size / sizeof(float);
  float* in = malloc(n * sizeof(float));
  float* out = malloc(n * sizeof(float));
  int ok = 1;
  double t0 = 0;
  for (size_t i = 0; i < n; ++i) in[i] = (float)((i % 251) + (size_t)rank);
  for (int it = -warmup; it < iters; ++it) {
    start_clock(it, &t0);
    if (in_place) {
      MPI_Allreduce(MPI_IN_PLACE, out, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    } else {
      MPI_Allreduce(in, out, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    }
  }
  *secs = MPI_Wtime() - t0;
  if (in_place) {  // the timed sums grew without bound: one more, of known values, checks
    memcpy(out, in, n * sizeof(float));
    MPI_Allreduce(MPI_IN_PLACE, out, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  }
  for (size_t i = 0; i < n; i += 1021)
    if (out[i] != (float)(2 * (i % 251) + 1)) ok = 0;
  free(in);
  free(out);
  return ok;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, ranks = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  const int in_place = argc == 4 && strcmp(argv[1], "allreduce_inplace") == 0;
  const int is_allreduce = argc == 4 && (strcmp(argv[1], "allreduce") == 0 || in_place);
  if (ranks != 2 || (argc != 5 && !is_allreduce)) {
    if (rank == 0) fprintf(stderr, "usage: mpirun -np 2 %s bw|put|lat SIZE WINDOW ITERS | allreduce[_inplace] SIZE ITERS\n", argv[0]);
    MPI_Finalize();
    return 1;
  }
  const size_t size = (size_t)strtoull(argv[2], NULL, 10);
  const int window = is_allreduce ? 1 : atoi(argv[3]);
  const int iters = atoi(argv[is_allreduce ? 3 : 4]);
  const int warmup = iters / 10 + 1;
  double secs = 0;
  int ok = 0;
  const double cpu0 = cpu_seconds();
  if (strcmp(argv[1], "bw") == 0) {
    ok = run_bw(rank, size, window, iters, warmup, &secs);
  } else if (strcmp(argv[1], "lat") == 0) {
    ok = run_lat(rank, size, iters, warmup, &secs);
  } else if (strcmp(argv[1], "put") == 0) {
    ok = run_put(rank, size, window, iters, warmup, &secs);
  } else if (is_allreduce) {
    ok = run_allreduce(rank, size, iters, warmup, in_place, &secs);
  } else {
    if (rank == 0) fprintf(stderr, "unknown mode %s\n", argv[1]);
    MPI_Finalize();
    return 1;
  }
  // CPU of the whole run (warm-up included) of both ranks, scaled to the timed part.
  const double cpu = (cpu_seconds() - cpu0) * (double)iters / (double)(iters + warmup);
  double cpu_sum = 0;
  int all_ok = 0;
  MPI_Reduce(&cpu, &cpu_sum, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
  MPI_Reduce(&ok, &all_ok, 1, MPI_INT, MPI_LAND, 0, MPI_COMM_WORLD);
  if (rank == 0) {
    if (!all_ok) {
      fprintf(stderr, "%s %zu: the bytes that arrived are wrong\n", argv[1], size);
      MPI_Finalize();
      return 2;
    }
    const double bytes = (double)size * window * iters;
    printf("RESULT %s %zu %.2f %.6f %.6f\n", argv[1], size, bytes / secs / 1e6, secs, cpu_sum);
  }
  MPI_Finalize();
  return 0;
}

/* mpi-allreduce-perf: the peer of kolo-allreduce-perf for side-by-side benchmarks. The
 * same sweep (float32 sum, out of place, -b/-e/-f/-w/-n) through MPI_Allreduce, printed
 * in the same nccl-tests columns (size, count, type, redop, time, algbw, busbw, #wrong)
 * by rank 0, so one parser reads both. Times are taken as kolo-allreduce-perf takes
 * them: the median of the per-iteration times on each rank, then the slowest rank;
 * -c 1 checks every element against the exact sum. */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct options {
  size_t min_bytes, max_bytes;
  double factor;
  int warmups, iterations, check;
} options;

static int parse_size(const char *text, size_t *out) {
  char *end = NULL;
  double value = strtod(text, &end);
  if (end == text || value < 0) return -1;
  double scale = 1;
  if (*end == 'K' || *end == 'k')
    scale = 1024.0, end++;
  else if (*end == 'M' || *end == 'm')
    scale = 1024.0 * 1024, end++;
  else if (*end == 'G' || *end == 'g')
    scale = 1024.0 * 1024 * 1024, end++;
  if (*end != '\0') return -1;
  *out = (size_t)(value * scale);
  return 0;
}

static int parse(int argc, char **argv, options *o) {
  *o = (options){4096, 64u << 20, 4.0, 5, 20, 0};
  for (int i = 1; i + 1 < argc; i += 2) {
    const char *flag = argv[i], *value = argv[i + 1];
    int bad = 0;
    if (strcmp(flag, "-b") == 0)
      bad = parse_size(value, &o->min_bytes);
    else if (strcmp(flag, "-e") == 0)
      bad = parse_size(value, &o->max_bytes);
    else if (strcmp(flag, "-f") == 0)
      bad = (o->factor = atof(value)) <= 1.0;
    else if (strcmp(flag, "-w") == 0)
      bad = (o->warmups = atoi(value)) < 0;
    else if (strcmp(flag, "-n") == 0)
      bad = (o->iterations = atoi(value)) < 1;
    else if (strcmp(flag, "-c") == 0)
      o->check = atoi(value) != 0;
    else
      bad = 1;
    if (bad) {
      fprintf(stderr, "mpi-allreduce-perf: bad flag or value '%s %s' (-b -e -f -w -n -c)\n", flag,
              value);
      return -1;
    }
  }
  if (argc % 2 == 0) {
    fprintf(stderr, "mpi-allreduce-perf: flag %s has no value\n", argv[argc - 1]);
    return -1;
  }
  return 0;
}

static int compare_doubles(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double median(double *times, int n) {
  qsort(times, (size_t)n, sizeof *times, compare_doubles);
  return n % 2 ? times[n / 2] : (times[n / 2 - 1] + times[n / 2]) / 2;
}

static float input(int rank, size_t i) {
  return (float)((rank + 1) + (int)(i % 7));
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  options o;
  if (parse(argc, argv, &o) != 0) {
    MPI_Finalize();
    return 2;
  }
  size_t max_count = o.max_bytes / sizeof(float);
  float *send = malloc((max_count ? max_count : 1) * sizeof *send);
  float *recv = malloc((max_count ? max_count : 1) * sizeof *recv);
  double *times = malloc((size_t)o.iterations * sizeof *times);
  if (send == NULL || recv == NULL || times == NULL) {
    fprintf(stderr, "mpi-allreduce-perf: out of memory\n");
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  for (size_t i = 0; i < max_count; i++) send[i] = input(rank, i);
  if (rank == 0) {
    printf("# mpi-allreduce-perf: %d ranks, float32 sum, out of place\n", size);
    printf("#%12s %12s %8s %6s %12s %10s %10s %8s\n", "size", "count", "type", "redop", "time(us)",
           "algbw(GB/s)", "busbw(GB/s)", "#wrong");
  }
  for (size_t bytes = o.min_bytes; bytes <= o.max_bytes;) {
    int count = (int)(bytes / sizeof(float));
    for (int w = 0; w < o.warmups; w++)
      MPI_Allreduce(send, recv, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);
    for (int it = 0; it < o.iterations; it++) {
      double start = MPI_Wtime();
      MPI_Allreduce(send, recv, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      times[it] = MPI_Wtime() - start;
    }
    double seconds = median(times, o.iterations), slowest = 0;
    MPI_Reduce(&seconds, &slowest, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    long wrong = 0;
    if (o.check) {
      for (int i = 0; i < count; i++) {
        double want = 0;
        for (int r = 0; r < size; r++) want += input(r, (size_t)i);
        wrong += fabs(recv[i] - want) > 0;
      }
    }
    long all_wrong = 0;
    MPI_Reduce(&wrong, &all_wrong, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) {
      double algbw = (double)bytes / slowest / 1e9;
      double busbw = algbw * 2.0 * (size - 1) / size;
      printf(" %12zu %12d %8s %6s %12.2f %10.3f %10.3f %8ld\n", bytes, count, "float", "sum",
             slowest * 1e6, algbw, busbw, all_wrong);
      fflush(stdout);
    }
    size_t next = (size_t)((double)bytes * o.factor);
    if (next <= bytes) break;
    bytes = next;
  }
  free(send);
  free(recv);
  free(times);
  MPI_Finalize();
  return 0;
}

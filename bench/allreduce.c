/*
 * allreduce.c: the MPI driver of `nam-bench allreduce` (osu_allreduce-style). Each rank
 * times MPI_Allreduce and nam_allreduce (float sum) on the same vectors in one run: per size,
 * several repeats, each a timed loop of MPI_Allreduce then one of nam_allreduce (so a change
 * of the machine's load hits both); a repeat's latency is the average over ranks of their
 * mean time per call, and rank 0 prints the median over repeats of each, one line per size:
 *
 *   RESULT <bytes> <ranks> <nam_us> <mpi_us> <repeats> <iterations per repeat>
 *
 * and checks that both give the same result. Arguments: min_bytes max_bytes. The memory
 * server comes from NAM_SERVERS. `nam-bench allreduce` builds and launches this with mpirun.
 *
 * Failures are agreed (agree_or_exit): every rank contributes whether its nam calls succeeded
 * before the next MPI collective, so no rank enters one alone; on a failure every rank prints
 * an error (its own, or the lowest failed rank's number and cause) and all leave together.
 */
#include <mpi.h>
#include <nam.h>

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int iterations(size_t bytes) {
    if (bytes <= 4096) return 400;
    if (bytes <= 65536) return 100;
    if (bytes <= 1 << 20) return 20;
    return 5;
}

/* Repeats per size: the median of several is stable on a shared, oversubscribed machine. */
static int repeats(size_t bytes) {
    if (bytes <= 65536) return 7;
    return 3;
}

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, by_value);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* Average over ranks of this rank's mean time per call, in microseconds. */
static double average_us(double seconds, int iters, int ranks) {
    double mine = 1e6 * seconds / iters, sum = 0;
    MPI_Allreduce(&mine, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    return sum / ranks;
}

/* Collective: returns when every rank's s is NAM_OK; otherwise every rank prints an error
 * (its own, or that of the lowest failed rank), finalizes MPI and exits with status 1. */
static void agree_or_exit(int rank, nam_status_t s, const char *what) {
    int failed = s != NAM_OK ? rank : INT_MAX, first = INT_MAX;
    MPI_Allreduce(&failed, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (first == INT_MAX) return;
    char cause[512] = "";
    if (rank == first) snprintf(cause, sizeof cause, "%s: %s", nam_status_string(s), nam_last_error_message());
    MPI_Bcast(cause, (int)sizeof cause, MPI_CHAR, first, MPI_COMM_WORLD);
    if (s != NAM_OK)
        fprintf(stderr, "rank %d: %s: %s: %s\n", rank, what, nam_status_string(s), nam_last_error_message());
    else
        fprintf(stderr, "rank %d: %s failed on rank %d: %s\n", rank, what, first, cause);
    fflush(stderr);
    MPI_Finalize();
    exit(1);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, ranks;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &ranks);
    size_t min_bytes = argc > 1 ? strtoull(argv[1], NULL, 10) : 4;
    size_t max_bytes = argc > 2 ? strtoull(argv[2], NULL, 10) : 16 << 20;
    nam_t *nam = NULL;
    nam_reduce_t *group = NULL;
    nam_status_t s = nam_init(NULL, &nam);
    if (s == NAM_OK) {
        char name[64];
        snprintf(name, sizeof name, "bench-allreduce-%d", ranks);
        uint64_t chunk = max_bytes < (4u << 20) ? max_bytes : (4u << 20);
        s = nam_reduce_create(nam, name, (uint32_t)ranks, (uint32_t)rank, (chunk + 7) / 8 * 8, &group);
    }
    agree_or_exit(rank, s, "nam_init/nam_reduce_create");
    float *send = malloc(max_bytes), *mpi_out = malloc(max_bytes), *nam_out = malloc(max_bytes);
    for (size_t i = 0; i < max_bytes / 4; i++) send[i] = (float)((i + (size_t)rank) % 64);
    for (size_t bytes = min_bytes; bytes <= max_bytes; bytes *= 4) {
        int count = (int)(bytes / 4), iters = iterations(bytes), warmup = iters / 10 + 1;
        for (int i = 0; i < warmup; i++) {
            MPI_Allreduce(send, mpi_out, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
            if (s == NAM_OK) s = nam_allreduce(group, send, nam_out, (size_t)count, NAM_FLOAT, NAM_OP_SUM);
        }
        int reps = repeats(bytes);
        double nam_us[16], mpi_us[16];
        for (int r = 0; r < reps; r++) {
            /* Also the barrier the MPI loop is timed from. */
            agree_or_exit(rank, s, "nam_allreduce");
            double t0 = MPI_Wtime();
            for (int i = 0; i < iters; i++) MPI_Allreduce(send, mpi_out, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
            double mpi_s = MPI_Wtime() - t0;
            MPI_Barrier(MPI_COMM_WORLD);
            t0 = MPI_Wtime();
            for (int i = 0; i < iters && s == NAM_OK; i++)
                s = nam_allreduce(group, send, nam_out, (size_t)count, NAM_FLOAT, NAM_OP_SUM);
            double nam_s = MPI_Wtime() - t0;
            mpi_us[r] = average_us(mpi_s, iters, ranks);
            nam_us[r] = average_us(nam_s, iters, ranks);
        }
        agree_or_exit(rank, s, "nam_allreduce");
        int same = memcmp(mpi_out, nam_out, bytes) == 0, all_same = 0;
        MPI_Allreduce(&same, &all_same, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
        if (rank == 0) {
            if (!all_same) fprintf(stderr, "MISMATCH at %zu bytes: nam and MPI results differ\n", bytes);
            printf("RESULT %zu %d %.3f %.3f %d %d\n", bytes, ranks, median(nam_us, reps), median(mpi_us, reps), reps,
                   iters);
            fflush(stdout);
        }
        if (!all_same) MPI_Abort(MPI_COMM_WORLD, 2);
    }
    nam_reduce_destroy(group);
    nam_finalize(nam);
    free(send), free(mpi_out), free(nam_out);
    MPI_Finalize();
    return 0;
}

/*
 * allreduce.c: the MPI driver of `nam bench allreduce` (osu_allreduce-style). Each rank
 * times MPI_Allreduce and nam_allreduce (float sum) on the same vectors in one run: per size,
 * several repeats, each a timed loop of MPI_Allreduce then one of nam_allreduce (so a change
 * of the machine's load hits both); a repeat's latency is the average over ranks of their
 * mean time per call, and rank 0 prints the median over repeats of each, one line per size:
 *
 *   RESULT <bytes> <ranks> <nam_us> <mpi_us> <repeats> <iterations per repeat>
 *
 * and checks that both give the same result. Arguments: min_bytes max_bytes. The memory
 * server comes from NAM_SERVERS. `nam bench allreduce` builds and launches this with mpirun.
 */
#include <mpi.h>
#include <nam.h>

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
    if (s != NAM_OK) {
        fprintf(stderr, "rank %d: %s: %s\n", rank, nam_status_string(s), nam_last_error_message());
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    float *send = malloc(max_bytes), *mpi_out = malloc(max_bytes), *nam_out = malloc(max_bytes);
    for (size_t i = 0; i < max_bytes / 4; i++) send[i] = (float)((i + (size_t)rank) % 64);
    for (size_t bytes = min_bytes; bytes <= max_bytes; bytes *= 4) {
        int count = (int)(bytes / 4), iters = iterations(bytes), warmup = iters / 10 + 1;
        for (int i = 0; i < warmup; i++) {
            MPI_Allreduce(send, mpi_out, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
            s = nam_allreduce(group, send, nam_out, (size_t)count, NAM_FLOAT, NAM_OP_SUM);
        }
        int reps = repeats(bytes);
        double nam_us[16], mpi_us[16];
        for (int r = 0; r < reps && s == NAM_OK; r++) {
            MPI_Barrier(MPI_COMM_WORLD);
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
        if (s != NAM_OK) {
            fprintf(stderr, "rank %d: nam_allreduce: %s\n", rank, nam_last_error_message());
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
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

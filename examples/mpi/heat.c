/*
 * heat.c: a 2-D heat stencil (Jacobi iteration on an NX x NY plate, hot top edge) that
 * checkpoints through the nam checkpoint library and restarts after a failure.
 *
 *   make && mpirun -np 4 ./heat [steps] [checkpoint_every] [fail_rank] [fail_after_step]
 *
 * The plate is split into row blocks, one per rank (rows differ by one between ranks), with
 * one halo row above and below exchanged every step. The rank's rows and the step counter
 * are protected regions. On start the program asks nam_ckpt_latest for a restartable
 * version and, if there is one, restarts from it; so running it again after a failure
 * continues where the last checkpoint left off. `fail_rank` kills itself (SIGKILL) after
 * step `fail_after_step`, as a crashed node would.
 *
 * Configuration: NAM_CKPT_CONFIG (a TOML file) and NAM_CKPT_* variables; see
 * docs/checkpoint.md. The last line printed by rank 0 is the answer:
 *   final step=<steps> checksum=<64-bit FNV-1a of the whole plate, rank by rank>
 * which is the same whether or not the run was interrupted.
 */
#include <mpi.h>
#include <nam.h>

#include <inttypes.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NX 256 /* columns */
#define NY 256 /* rows of the whole plate */

static void check(nam_status_t status, const char *what, int rank) {
    if (status != NAM_OK) {
        fprintf(stderr, "rank %d: %s failed: %s: %s\n", rank, what, nam_status_string(status), nam_last_error_message());
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
}

static uint64_t fnv1a(const void *data, size_t len, uint64_t hash) {
    const unsigned char *p = data;
    for (size_t i = 0; i < len; i++) {
        hash ^= p[i];
        hash *= 1099511628211ull;
    }
    return hash;
}

/* One Jacobi step on the rank's rows (halo rows 0 and rows+1 hold the neighbours'). */
static void step(const double *cur, double *next, int rows, int first_row) {
    for (int r = 1; r <= rows; r++) {
        int global = first_row + r - 1;
        for (int c = 0; c < NX; c++) {
            double *out = &next[r * NX + c];
            if (global == 0 || global == NY - 1 || c == 0 || c == NX - 1) {
                *out = cur[r * NX + c]; /* fixed boundary */
                continue;
            }
            *out = 0.25 * (cur[(r - 1) * NX + c] + cur[(r + 1) * NX + c] + cur[r * NX + c - 1] + cur[r * NX + c + 1]);
        }
    }
}

static void exchange_halos(double *grid, int rows, int rank, int size) {
    int up = rank > 0 ? rank - 1 : MPI_PROC_NULL;
    int down = rank < size - 1 ? rank + 1 : MPI_PROC_NULL;
    MPI_Sendrecv(&grid[1 * NX], NX, MPI_DOUBLE, up, 0, &grid[(rows + 1) * NX], NX, MPI_DOUBLE, down, 0, MPI_COMM_WORLD,
                 MPI_STATUS_IGNORE);
    MPI_Sendrecv(&grid[rows * NX], NX, MPI_DOUBLE, down, 1, &grid[0], NX, MPI_DOUBLE, up, 1, MPI_COMM_WORLD,
                 MPI_STATUS_IGNORE);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    long steps = argc > 1 ? atol(argv[1]) : 200;
    long every = argc > 2 ? atol(argv[2]) : 20;
    int fail_rank = argc > 3 ? atoi(argv[3]) : -1;
    long fail_after = argc > 4 ? atol(argv[4]) : -1;

    int rows = NY / size + (rank < NY % size ? 1 : 0);
    int first_row = rank * (NY / size) + (rank < NY % size ? rank : NY % size);
    size_t cells = (size_t)(rows + 2) * NX;
    double *grid = calloc(cells, sizeof *grid);
    double *next = calloc(cells, sizeof *next);
    uint64_t done = 0; /* steps completed */
    if (!grid || !next) {
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    if (first_row == 0) {
        for (int c = 0; c < NX; c++) {
            grid[1 * NX + c] = 100.0; /* the hot edge */
        }
    }

    nam_ckpt_t *ckpt = NULL;
    check(nam_ckpt_init(MPI_COMM_WORLD, NULL, &ckpt), "nam_ckpt_init", rank);
    check(nam_ckpt_protect(ckpt, 1, grid, cells * sizeof *grid), "nam_ckpt_protect(grid)", rank);
    check(nam_ckpt_protect(ckpt, 2, &done, sizeof done), "nam_ckpt_protect(step)", rank);
    /* The RAM level's files for the versions kept are allocated now, not during checkpoints. */
    check(nam_ckpt_reserve(ckpt, "heat", NULL), "nam_ckpt_reserve", rank);

    uint64_t version = 0;
    int found = 0;
    check(nam_ckpt_latest(ckpt, "heat", &version, &found), "nam_ckpt_latest", rank);
    if (found) {
        check(nam_ckpt_restart(ckpt, "heat", NAM_CKPT_VERSION_LATEST, NULL, 0, &version), "nam_ckpt_restart", rank);
        if (rank == 0) {
            printf("restarted from version %" PRIu64 " at step %" PRIu64 "\n", version, done);
        }
    }

    for (; (long)done < steps;) {
        exchange_halos(grid, rows, rank, size);
        step(grid, next, rows, first_row);
        memcpy(&grid[NX], &next[NX], (size_t)rows * NX * sizeof *grid);
        done++;
        if ((long)done % every == 0) {
            int level = 0;
            check(nam_ckpt_checkpoint(ckpt, "heat", done, &level), "nam_ckpt_checkpoint", rank);
            if (rank == 0) {
                printf("checkpoint step=%" PRIu64 " level=%d\n", done, level);
            }
        }
        if (rank == fail_rank && (long)done == fail_after) {
            fprintf(stderr, "rank %d: failing after step %ld\n", rank, fail_after);
            raise(SIGKILL);
        }
    }

    uint64_t hash = fnv1a(&grid[NX], (size_t)rows * NX * sizeof *grid, 14695981039346656037ull);
    uint64_t *all = rank == 0 ? malloc((size_t)size * sizeof *all) : NULL;
    MPI_Gather(&hash, 1, MPI_UINT64_T, all, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        uint64_t total = fnv1a(all, (size_t)size * sizeof *all, 14695981039346656037ull);
        printf("final step=%" PRIu64 " checksum=%016" PRIx64 "\n", done, total);
        free(all);
    }
    check(nam_ckpt_finalize(ckpt), "nam_ckpt_finalize", rank);
    free(grid);
    free(next);
    MPI_Finalize();
    return 0;
}

/*
 * A 2-D heat stencil that checkpoints through NAM-XOR: every rank keeps its block of rows
 * (after a step counter) in one array, registers that array in place as its checkpoint
 * buffer in a nam checkpoint group (nam_ckpt_group_join_in: no copy per checkpoint), writes
 * it to node-local storage, and the memory server pulls the buffers and keeps their XOR
 * parity. After a failure, the job restarts; the rank whose local checkpoint is gone gets it
 * rebuilt by the server from the parity and the other ranks' buffers, and the run ends with
 * the same answer as one that never failed.
 *
 *   mpirun -np 4 heat_namxor run     DIR STEPS EVERY            # uninterrupted
 *   mpirun -np 4 heat_namxor crash   DIR STEPS EVERY CRASH_AT   # dies after a checkpoint
 *   mpirun -np 4 heat_namxor die     DIR STEPS EVERY DIE_AT     # rank 1 is killed mid-checkpoint
 *   mpirun -np 4 heat_namxor restart DIR STEPS EVERY            # resumes, rebuilding lost ranks
 *
 * With HEAT_BUFFER=library the checkpoint goes through a buffer the library allocates
 * instead (nam_ckpt_group_join + nam_ckpt_group_buffer, one copy per checkpoint), which the
 * server can read in place over shared memory.
 *
 * A local checkpoint replaces the previous one only once the server confirms the new parity,
 * so after a failure during a checkpoint the previous epoch is restored.
 * The memory server comes from NAM_SERVERS. Rows are split unevenly, so ranks' checkpoints
 * differ in size. Prints "final checksum <x>" on rank 0.
 */
#include <mpi.h>
#include <signal.h>
#include <nam.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define N 96          /* grid is N x N */
#define WAIT_MS 60000

static void check(nam_status_t s, const char *what, int rank) {
    if (s != NAM_OK) {
        fprintf(stderr, "rank %d: %s: %s (%s)\n", rank, what, nam_status_string(s), nam_last_error_message());
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
}

/* Rows [first, first + rows) of the grid belong to `rank`: uneven on purpose. */
static void block_of(int rank, int size, int *first, int *rows) {
    int base = N / size, extra = N % size;
    *rows = base + (rank < extra ? 1 : 0);
    *first = rank * base + (rank < extra ? rank : extra);
}

/* Checkpoint layout: u64 step, then rows * N doubles. */
static size_t ckpt_len(int rows) { return sizeof(uint64_t) + (size_t)rows * N * sizeof(double); }

static void local_path(char *out, size_t n, const char *dir, int rank) {
    snprintf(out, n, "%s/rank-%d.ckpt", dir, rank);
}

static int write_local(const char *path, const uint8_t *buf, size_t len) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    size_t w = fwrite(buf, 1, len, f);
    return fclose(f) == 0 && w == len ? 0 : -1;
}

static int read_local(const char *path, uint8_t *buf, size_t len) {
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    size_t r = fread(buf, 1, len, f);
    fclose(f);
    return r == len ? 0 : -1;
}

/* One Jacobi step over this rank's rows, with the halo rows `up` and `down`. */
static void step(double *up, double *mine, double *down, double *next, int rows, int rank, int size) {
    int above = rank > 0 ? rank - 1 : MPI_PROC_NULL, below = rank < size - 1 ? rank + 1 : MPI_PROC_NULL;
    MPI_Sendrecv(mine, N, MPI_DOUBLE, above, 0, down, N, MPI_DOUBLE, below, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    MPI_Sendrecv(mine + (size_t)(rows - 1) * N, N, MPI_DOUBLE, below, 1, up, N, MPI_DOUBLE, above, 1, MPI_COMM_WORLD,
                 MPI_STATUS_IGNORE);
    if (rank == 0) for (int j = 0; j < N; j++) up[j] = 100.0;   /* hot top edge */
    if (rank == size - 1) for (int j = 0; j < N; j++) down[j] = 0.0;
    for (int i = 0; i < rows; i++) {
        for (int j = 0; j < N; j++) {
            double l = j > 0 ? mine[i * N + j - 1] : 0.0, r = j < N - 1 ? mine[i * N + j + 1] : 0.0;
            double u = (i == 0 ? up : mine + (size_t)(i - 1) * N)[j];
            double d = (i == rows - 1 ? down : mine + (size_t)(i + 1) * N)[j];
            next[i * N + j] = 0.25 * (l + r + u + d);
        }
    }
    memcpy(mine, next, (size_t)rows * N * sizeof(double));
}

/* Joins the group "heat": with the rank's own `block` registered in place, or (library) with
 * a library buffer of `len` bytes (0 for a rank that restores its checkpoint). */
static void join(nam_t *nam, int in_place, uint8_t *block, size_t len, int rank,
                 const nam_ckpt_group_params_t *params, nam_ckpt_group_t **group) {
    if (in_place)
        check(nam_ckpt_group_join_in(nam, "heat", (uint32_t)rank, block, len, params, group), "join in place", rank);
    else
        check(nam_ckpt_group_join(nam, "heat", (uint32_t)rank, len, params, group), "join", rank);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (argc < 5) {
        if (rank == 0) fprintf(stderr, "usage: heat_namxor run|crash|die|restart DIR STEPS EVERY [AT]\n");
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    const char *mode = argv[1], *dir = argv[2];
    long steps = atol(argv[3]), every = atol(argv[4]), crash_at = argc > 5 ? atol(argv[5]) : -1;
    int first, rows;
    block_of(rank, size, &first, &rows);
    size_t len = ckpt_len(rows);
    /* The rank's state and checkpoint in one array: the step counter, then its rows. */
    uint8_t *block = calloc(1, len);
    double *mine = (double *)(block + sizeof(uint64_t));
    double *up = calloc(N, sizeof(double)), *down = calloc(N, sizeof(double));
    double *next = calloc((size_t)rows * N, sizeof(double));
    const char *buffer_mode = getenv("HEAT_BUFFER");
    int in_place = !(buffer_mode && strcmp(buffer_mode, "library") == 0);
    char path[4096], node[32];
    local_path(path, sizeof path, dir, rank);
    snprintf(node, sizeof node, "node%d", rank);

    nam_t *nam;
    check(nam_init(NULL, &nam), "nam_init", rank);
    nam_ckpt_group_params_t params = {.ranks = (uint32_t)size, .node = node, .timeout_ms = 30000};
    nam_ckpt_group_t *group;
    uint8_t *buf;
    uint64_t buf_len;
    long start = 0;
    if (strcmp(mode, "restart") == 0) {
        /* Survivors load their local checkpoint back; a rank without one keeps a zeroed block
         * (or joins with an empty library buffer), and the ranks that lost theirs are rebuilt
         * one after another. */
        int have = read_local(path, block, len) == 0;
        join(nam, in_place, block, have || in_place ? len : 0, rank, &params, &group);
        if (have && !in_place) {
            check(nam_ckpt_group_buffer(group, &buf, &buf_len), "buffer", rank);
            memcpy(buf, block, len);
        }
        int *haves = malloc(sizeof(int) * (size_t)size);
        MPI_Allgather(&have, 1, MPI_INT, haves, 1, MPI_INT, MPI_COMM_WORLD);
        for (int lost = 0; lost < size; lost++) {
            if (haves[lost]) continue;
            /* The replacement asks for its own checkpoint to be rebuilt into its buffer; the
             * survivors keep theirs unchanged until the restore is done. */
            nam_status_t s = NAM_OK;
            if (rank == lost) s = nam_ckpt_group_restore_own(group, 0, len);
            /* The outcome and its reason travel together: a rank told of the failure by a peer
             * prints the peer's cause, not its own (empty) last error. */
            char reason[512] = "";
            if (rank == lost && s != NAM_OK) snprintf(reason, sizeof reason, "%s", nam_last_error_message());
            MPI_Bcast(&s, 1, MPI_INT, lost, MPI_COMM_WORLD);
            MPI_Bcast(reason, (int)sizeof reason, MPI_CHAR, lost, MPI_COMM_WORLD);
            if (s != NAM_OK) {
                if (rank == lost)
                    fprintf(stderr, "rank %d: restore request: %s (%s)\n", rank, nam_status_string(s), reason);
                else
                    fprintf(stderr, "rank %d: restore request of rank %d failed there: %s (%s)\n", rank, lost,
                            nam_status_string(s), reason);
                fflush(stderr);
                MPI_Barrier(MPI_COMM_WORLD); /* every rank has printed before the job is aborted */
                MPI_Abort(MPI_COMM_WORLD, 2);
            }
            if (rank == lost) {
                uint64_t epoch = 0;
                check(nam_ckpt_group_finish_restore(group, WAIT_MS, &epoch), "finish the restore", rank);
                if (!in_place) {
                    check(nam_ckpt_group_buffer(group, &buf, &buf_len), "buffer", rank);
                    memcpy(block, buf, len);
                }
                if (write_local(path, block, len) != 0) check(NAM_ERR_INVALID_ARGUMENT, "rewrite local", rank);
                printf("rank %d: checkpoint of epoch %llu rebuilt by the memory server (%zu bytes, %s)\n", rank,
                       (unsigned long long)epoch, len, in_place ? "in place" : "library buffer");
            } else {
                check(nam_ckpt_group_wait_restore(group, WAIT_MS), "wait for the restore", rank);
            }
            MPI_Barrier(MPI_COMM_WORLD);
        }
        free(haves);
        uint64_t at;
        memcpy(&at, block, sizeof at);
        start = (long)at;
        if (rank == 0) printf("restarting from step %ld\n", start);
    } else {
        join(nam, in_place, block, len, rank, &params, &group);
    }
    for (long t = start + 1; t <= steps; t++) {
        step(up, mine, down, next, rows, rank, size);
        if (t % every == 0 && t < steps) {
            uint64_t at = (uint64_t)t;
            memcpy(block, &at, sizeof at);
            if (!in_place) {
                check(nam_ckpt_group_buffer(group, &buf, &buf_len), "buffer", rank);
                memcpy(buf, block, len);
            }
            char tmp[4200];
            snprintf(tmp, sizeof tmp, "%s.new", path);
            if (write_local(tmp, block, len) != 0) check(NAM_ERR_INVALID_ARGUMENT, "local write", rank);
            if (strcmp(mode, "die") == 0 && t == crash_at && rank == 1) {
                printf("rank 1: killed before flagging step %ld ready\n", t);
                fflush(stdout);
                raise(SIGKILL);
            }
            /* From here until the wait returns the server may read the buffer: in place, that
             * is the rank's own block, which the next step would change. */
            check(nam_ckpt_group_ready(group, NULL), "ready", rank);
            check(nam_ckpt_group_wait(group, 1, WAIT_MS), "parity", rank);
            if (rename(tmp, path) != 0) check(NAM_ERR_INVALID_ARGUMENT, "local rename", rank);
            if (strcmp(mode, "crash") == 0 && t == crash_at) {
                if (rank == 0) printf("crashing after the checkpoint of step %ld\n", t);
                fflush(stdout);
                MPI_Barrier(MPI_COMM_WORLD);
                _exit(3); /* no finalize, no goodbye: a failure */
            }
        }
    }
    double sum = 0.0, total = 0.0;
    for (size_t i = 0; i < (size_t)rows * N; i++) sum += mine[i] * (double)(first * N + i + 1);
    MPI_Reduce(&sum, &total, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) printf("final checksum %.12e\n", total);
    check(nam_ckpt_group_leave(group, 0), "leave", rank);
    check(nam_finalize(nam), "nam_finalize", rank);
    free(block);
    free(up);
    free(down);
    free(next);
    MPI_Finalize();
    return 0;
}

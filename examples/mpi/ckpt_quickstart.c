/*
 * ckpt_quickstart.c: checkpoint/restart of an MPI program in one page. Each rank protects its
 * state; the program restarts from the newest checkpoint a restart can restore, if there is
 * one; it snapshots every iteration (a checkpoint once `snapshot.interval` seconds have
 * passed) and checkpoints every 100 steps to the SSD level, chosen for that call.
 *
 *   mpicc -o ckpt_quickstart ckpt_quickstart.c $(pkg-config --cflags --libs nam)
 *   mpirun -np 4 ./ckpt_quickstart        # kill it, run it again: it goes on from there
 *
 * Where checkpoints go: docs/checkpoint.md (NAM_CKPT_CONFIG names a TOML file; by default
 * /dev/shm/nam-ckpt and /var/tmp/nam-ckpt, chosen per checkpoint by the placement policy).
 */
#include <nam.h> /* before or after <mpi.h>, as you like */
#include <mpi.h>

#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>

#define CELLS 100000
#define STEPS 400

static void check(nam_status_t status, const char *what) {
    if (status != NAM_OK) {
        fprintf(stderr, "%s: %s: %s\n", what, nam_status_string(status), nam_last_error_message());
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
}

static double cells[CELLS];

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    uint64_t step = 0;

    nam_ckpt_t *ckpt = NULL;
    check(nam_ckpt_init(MPI_COMM_WORLD, NULL, &ckpt), "nam_ckpt_init"); /* NAM_CKPT_CONFIG or defaults */
    check(nam_ckpt_protect(ckpt, 1, cells, sizeof cells), "nam_ckpt_protect");
    check(nam_ckpt_protect(ckpt, 2, &step, sizeof step), "nam_ckpt_protect");

    uint64_t version = 0;
    int found = 0;
    /* Only a version every rank has, or the redundancy scheme can rebuild, is reported;
     * NAM_ERR_CKPT_UNRECOVERABLE says what is missing when there were some and none is left. */
    check(nam_ckpt_latest(ckpt, "quickstart", &version, &found), "nam_ckpt_latest");
    if (found) {
        check(nam_ckpt_restart(ckpt, "quickstart", version, NULL, 0, &version), "nam_ckpt_restart");
        if (rank == 0) {
            printf("restarted from version %" PRIu64 " at step %" PRIu64 "\n", version, step);
        }
    }

    for (; step < STEPS;) {
        for (int i = 0; i < CELLS; i++) {
            cells[i] = 0.5 * cells[i] + (double)(rank + i % 7); /* the computation */
        }
        step++;
        int level = NAM_CKPT_LEVEL_SKIPPED;
        if (step % 100 == 0) {
            check(nam_ckpt_checkpoint_level(ckpt, "quickstart", step, NAM_CKPT_LEVEL_SSD, &level),
                  "nam_ckpt_checkpoint_level");
        } else {
            int taken = 0;
            check(nam_ckpt_snapshot(ckpt, "quickstart", step, &taken, &level), "nam_ckpt_snapshot");
        }
        if (rank == 0 && level != NAM_CKPT_LEVEL_SKIPPED) {
            printf("checkpoint step=%" PRIu64 " level=%d\n", step, level);
        }
    }

    double local = 0, total = 0;
    for (int i = 0; i < CELLS; i++) {
        local += cells[i];
    }
    MPI_Reduce(&local, &total, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        printf("final step=%" PRIu64 " sum=%.6f\n", step, total);
    }
    check(nam_ckpt_finalize(ckpt), "nam_ckpt_finalize");
    MPI_Finalize();
    return 0;
}

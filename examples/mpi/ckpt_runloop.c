/*
 * ckpt_runloop.c: the run loop of an MPI code on nam-ckpt, as SCR users write it. Every
 * iteration it computes, asks whether to checkpoint now (runloop.interval or
 * runloop.overhead), and whether to stop (a halt file written by `nam ckpt halt DIR`, or the
 * allocation ending within runloop.exit_before seconds, from SLURM_JOB_END_TIME or
 * runloop.end_time). Before it stops early it takes a last checkpoint; run again, it restarts
 * from the newest restorable checkpoint (or the one `nam ckpt current` chose).
 *
 *   mpicc -o ckpt_runloop ckpt_runloop.c $(pkg-config --cflags --libs nam)
 *   NAM_CKPT_RUNLOOP_INTERVAL=60 mpirun -np 4 ./ckpt_runloop 100000 10
 *   nam ckpt halt /var/tmp/nam-ckpt        # from another shell: it checkpoints and stops
 *   nam ckpt halt /var/tmp/nam-ckpt --clear; mpirun -np 4 ./ckpt_runloop 100000 10
 */
#include <mpi.h>
#include <nam.h>

#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define CELLS 65536

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
    uint64_t steps = argc > 1 ? strtoull(argv[1], NULL, 10) : 1000;
    long pause_ms = argc > 2 ? atol(argv[2]) : 0; /* stands for a longer computation */
    uint64_t step = 0;
    for (int i = 0; i < CELLS; i++) cells[i] = rank + i * 1e-3;

    nam_ckpt_t *ckpt = NULL;
    check(nam_ckpt_init(MPI_COMM_WORLD, NULL, &ckpt), "nam_ckpt_init");
    check(nam_ckpt_protect(ckpt, 1, cells, sizeof cells), "nam_ckpt_protect");
    check(nam_ckpt_protect(ckpt, 2, &step, sizeof step), "nam_ckpt_protect");

    /* Restart, if a checkpoint can be restored. */
    uint64_t version = 0;
    int found = 0;
    check(nam_ckpt_latest(ckpt, "runloop", &version, &found), "nam_ckpt_latest");
    if (found) {
        check(nam_ckpt_restart(ckpt, "runloop", NAM_CKPT_VERSION_LATEST, NULL, 0, &version), "nam_ckpt_restart");
        if (rank == 0) printf("restarted from version %" PRIu64 " at step %" PRIu64 "\n", version, step);
    }

    int stop = 0;
    char why[256];
    uint64_t last = step;
    while (step < steps && !stop) {
        for (int i = 0; i < CELLS; i++) cells[i] = 0.5 * cells[i] + 0.25 * cells[(i + 1) % CELLS] + 1e-3 * step;
        step++;
        struct timespec pause = {pause_ms / 1000, (pause_ms % 1000) * 1000000L};
        nanosleep(&pause, NULL);

        int need = 0;
        check(nam_ckpt_need_checkpoint(ckpt, &need), "nam_ckpt_need_checkpoint");
        if (need) {
            int level = 0;
            check(nam_ckpt_checkpoint(ckpt, "runloop", step, &level), "nam_ckpt_checkpoint");
            last = step;
            if (rank == 0) printf("checkpoint step=%" PRIu64 " level=%d\n", step, level);
        }
        check(nam_ckpt_should_exit(ckpt, &stop, why, sizeof why), "nam_ckpt_should_exit");
    }
    if (stop) {
        if (last != step) check(nam_ckpt_checkpoint(ckpt, "runloop", step, NULL), "nam_ckpt_checkpoint");
        if (rank == 0) printf("stopping at step %" PRIu64 ": %s\n", step, why);
    } else {
        double sum = 0, total = 0;
        for (int i = 0; i < CELLS; i++) sum += cells[i];
        MPI_Reduce(&sum, &total, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
        if (rank == 0) printf("final step=%" PRIu64 " sum=%.17g\n", step, total);
    }
    check(nam_ckpt_finalize(ckpt), "nam_ckpt_finalize");
    MPI_Finalize();
    return 0;
}

/*
 * ckpt_order.c: the C checkpoint API with <nam.h> included BEFORE <mpi.h> (nam_ckpt_init is
 * a macro that expands at its call, after <mpi.h>). Built by tests/c_ckpt.rs with mpicc and
 * run under mpirun; the configuration comes from NAM_CKPT_CONFIG.
 *
 *   ckpt_order write    checkpoints v1 at the SSD level, v2 at RAM, v3 at PFS (each asked
 *                       for per call), then a snapshot that must wait for snapshot.interval
 *                       and becomes v4 (placed by the policy); checks refused levels.
 *   ckpt_order latest   asks nam_ckpt_latest; prints "latest found=F version=V status=S" and
 *                       the error message; when found, restarts from that version and checks
 *                       every byte ("restored version=V").
 */
#include <nam.h>
#include <mpi.h>

#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define WORDS 4096

static int rank_;

static void fail(const char *what, nam_status_t status) {
    fprintf(stderr, "rank %d: FAIL %s: %s: %s\n", rank_, what, nam_status_string(status), nam_last_error_message());
    MPI_Abort(MPI_COMM_WORLD, 2);
}

static void check(nam_status_t status, const char *what) {
    if (status != NAM_OK) {
        fail(what, status);
    }
}

static void expect(nam_status_t got, nam_status_t want, const char *what) {
    if (got != want) {
        fprintf(stderr, "rank %d: FAIL %s returned %s, expected %s\n", rank_, what, nam_status_string(got),
                nam_status_string(want));
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
}

/* The content of version `v` on this rank: every word differs by rank, version and index. */
static void fill(uint64_t *data, uint64_t v) {
    for (uint64_t i = 0; i < WORDS; i++) {
        data[i] = ((uint64_t)rank_ << 48) ^ (v << 32) ^ (i * 2654435761u);
    }
}

static void sleep_seconds(double s) {
    struct timespec t = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&t, NULL);
}

static void checkpoint_at(nam_ckpt_t *ckpt, uint64_t *data, uint64_t *version, uint64_t v, int level) {
    *version = v;
    fill(data, v);
    int got = -1;
    check(nam_ckpt_checkpoint_level(ckpt, "order", v, level, &got), "nam_ckpt_checkpoint_level");
    if (got != level) {
        fprintf(stderr, "rank %d: FAIL v%" PRIu64 " went to level %d, asked for %d\n", rank_, v, got, level);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    if (rank_ == 0) {
        printf("checkpoint version=%" PRIu64 " level=%d\n", v, got);
    }
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    const char *mode = argc > 1 ? argv[1] : "write";
    uint64_t *data = malloc(WORDS * sizeof *data);
    uint64_t version = 0;
    if (!data) {
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    nam_ckpt_t *ckpt = NULL;
    check(nam_ckpt_init(MPI_COMM_WORLD, NULL, &ckpt), "nam_ckpt_init");
    check(nam_ckpt_protect(ckpt, 1, data, WORDS * sizeof *data), "nam_ckpt_protect(data)");
    check(nam_ckpt_protect(ckpt, 2, &version, sizeof version), "nam_ckpt_protect(version)");

    if (strcmp(mode, "write") == 0) {
        expect(nam_ckpt_checkpoint_level(ckpt, "order", 9, 17, NULL), NAM_ERR_INVALID_ARGUMENT, "level 17");
        expect(nam_ckpt_checkpoint_level(ckpt, "order", 9, NAM_CKPT_LEVEL_NAM, NULL), NAM_ERR_CONFIG,
               "NAM_CKPT_LEVEL_NAM with full checkpoints");
        checkpoint_at(ckpt, data, &version, 1, NAM_CKPT_LEVEL_SSD);
        checkpoint_at(ckpt, data, &version, 2, NAM_CKPT_LEVEL_RAM);
        checkpoint_at(ckpt, data, &version, 3, NAM_CKPT_LEVEL_PFS);
        /* Right after a checkpoint the interval has not passed: no checkpoint. */
        version = 4;
        fill(data, 4);
        int taken = -1, level = -1;
        check(nam_ckpt_snapshot(ckpt, "order", 4, &taken, &level), "nam_ckpt_snapshot (early)");
        if (taken != 0 || level != NAM_CKPT_LEVEL_SKIPPED) {
            fprintf(stderr, "rank %d: FAIL an early snapshot checkpointed (level %d)\n", rank_, level);
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
        double interval = argc > 2 ? atof(argv[2]) : 1.0;
        sleep_seconds(interval + 0.2);
        check(nam_ckpt_snapshot(ckpt, "order", 4, &taken, &level), "nam_ckpt_snapshot (late)");
        if (taken != 1 || level != NAM_CKPT_LEVEL_RAM) {
            fprintf(stderr, "rank %d: FAIL a late snapshot gave taken=%d level=%d\n", rank_, taken, level);
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
        if (rank_ == 0) {
            printf("snapshot version=4 level=%d\n", level);
        }
    } else {
        uint64_t latest = 0;
        int found = -1;
        nam_status_t status = nam_ckpt_latest(ckpt, "order", &latest, &found);
        if (rank_ == 0) {
            printf("latest found=%d version=%" PRIu64 " status=%s\n", found, latest, nam_status_string(status));
            if (status != NAM_OK) {
                printf("latest message: %s\n", nam_last_error_message());
            }
        }
        if (found) {
            uint64_t restored = 0;
            check(nam_ckpt_restart(ckpt, "order", latest, NULL, 0, &restored), "nam_ckpt_restart");
            uint64_t *want = malloc(WORDS * sizeof *want);
            if (!want) {
                MPI_Abort(MPI_COMM_WORLD, 1);
            }
            fill(want, latest);
            if (restored != latest || version != latest || memcmp(want, data, WORDS * sizeof *data) != 0) {
                fprintf(stderr, "rank %d: FAIL restored v%" PRIu64 " holds the data of another version\n", rank_,
                        restored);
                MPI_Abort(MPI_COMM_WORLD, 2);
            }
            free(want);
            MPI_Barrier(MPI_COMM_WORLD);
            if (rank_ == 0) {
                printf("restored version=%" PRIu64 "\n", restored);
            }
        }
    }
    check(nam_ckpt_finalize(ckpt), "nam_ckpt_finalize");
    free(data);
    MPI_Finalize();
    return 0;
}

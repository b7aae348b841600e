/*
 * ckpt_datasets.c: datasets and redundancy descriptors of the C checkpoint API, driven by
 * tests/c_ckpt_runloop.rs under mpirun. Each rank's region holds a pattern of (rank,
 * version), so a restart proves which version it restored, byte by byte.
 *
 *   ckpt_datasets write N           checkpoints 1..N (descriptors chosen by their rule)
 *   ckpt_datasets descriptor D V    checkpoint V with descriptor D
 *   ckpt_datasets output V          output dataset V
 *   ckpt_datasets restart           restart without a version; checks every byte
 *   ckpt_datasets current V|forget V|delete V
 */
#include <mpi.h>
#include <nam.h>

#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BYTES (256 * 1024)

static uint8_t region[BYTES];
static int rank;

static uint8_t pattern(int r, uint64_t version, size_t j) {
    return (uint8_t)(r * 31 + version * 7 + j * 13 + (j >> 9));
}

static void fill(uint64_t version) {
    for (size_t j = 0; j < BYTES; j++) region[j] = pattern(rank, version, j);
}

/* Prints the outcome of a collective call on rank 0 ("<what> status=<status> message=<m>"). */
static int report(const char *what, nam_status_t status) {
    if (rank == 0) {
        printf("%s status=%s", what, nam_status_string(status));
        if (status != NAM_OK) printf(" message=%s", nam_last_error_message());
        printf("\n");
    }
    return status == NAM_OK;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    const char *mode = argc > 1 ? argv[1] : "";
    nam_ckpt_t *ckpt = NULL;
    if (!report("init", nam_ckpt_init(MPI_COMM_WORLD, NULL, &ckpt))) {
        MPI_Finalize();
        return 0;
    }
    nam_ckpt_protect(ckpt, 1, region, sizeof region);
    if (strcmp(mode, "write") == 0) {
        uint64_t n = strtoull(argv[2], NULL, 10);
        for (uint64_t v = 1; v <= n; v++) {
            fill(v);
            int level = -1;
            nam_status_t s = nam_ckpt_checkpoint(ckpt, "data", v, &level);
            if (report("checkpoint", s) && rank == 0) printf("checkpoint version=%" PRIu64 " level=%d\n", v, level);
        }
    } else if (strcmp(mode, "descriptor") == 0) {
        uint64_t v = strtoull(argv[3], NULL, 10);
        fill(v);
        int level = -1;
        if (report("descriptor", nam_ckpt_checkpoint_descriptor(ckpt, "data", v, argv[2], &level)) && rank == 0)
            printf("descriptor %s version=%" PRIu64 " level=%d\n", argv[2], v, level);
    } else if (strcmp(mode, "output") == 0) {
        uint64_t v = strtoull(argv[2], NULL, 10);
        fill(v);
        report("output", nam_ckpt_output(ckpt, "data", v));
    } else if (strcmp(mode, "restart") == 0) {
        memset(region, 0, sizeof region);
        uint64_t version = 0;
        if (report("restart", nam_ckpt_restart(ckpt, "data", NAM_CKPT_VERSION_LATEST, NULL, 0, &version))) {
            size_t bad = 0;
            for (size_t j = 0; j < BYTES; j++) bad += region[j] != pattern(rank, version, j);
            unsigned long long all_bad = 0, mine = bad;
            MPI_Allreduce(&mine, &all_bad, 1, MPI_UNSIGNED_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
            if (rank == 0) printf("restored version=%" PRIu64 " wrong_bytes=%llu\n", version, all_bad);
        }
    } else if (strcmp(mode, "current") == 0) {
        report("current", nam_ckpt_set_current(ckpt, "data", strtoull(argv[2], NULL, 10)));
    } else if (strcmp(mode, "forget") == 0) {
        report("forget", nam_ckpt_forget(ckpt, "data", strtoull(argv[2], NULL, 10)));
    } else if (strcmp(mode, "delete") == 0) {
        report("delete", nam_ckpt_delete(ckpt, "data", strtoull(argv[2], NULL, 10)));
    }
    report("finalize", nam_ckpt_finalize(ckpt));
    MPI_Finalize();
    return 0;
}

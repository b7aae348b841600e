/*
 * allreduce_mpi.c: an MPI program that uses nam's global addresses and its allreduce at the
 * memory server through the C API, and checks both against MPI.
 *
 *   nam serve --listen 127.0.0.1:13337 --capacity 64MiB &
 *   mpicc -o allreduce_mpi allreduce_mpi.c $(pkg-config --cflags --libs nam)
 *   NAM_SERVERS=127.0.0.1:13337 mpirun -np 4 -x NAM_SERVERS ./allreduce_mpi
 *
 * 1. Rank 0 allocates, broadcasts the allocation's global address with MPI_Bcast, and
 *    every rank adds to a word and writes its rank through that address.
 * 2. nam_allreduce for every operation and type, over a vector that needs several rounds,
 *    equals MPI_Allreduce of the same data.
 * 3. Ranks that disagree on the length all get NAM_ERR_REDUCE_MISMATCH, receive buffer
 *    untouched.
 * 4. Rank 0's mailbox (address through MPI_Bcast) receives every other rank's messages, each
 *    sender's in order, through back-pressure (4 slots).
 * Rank 0 prints "allreduce_mpi: all checks passed" when every check passed on every rank.
 */
#include <mpi.h>
#include <nam.h>

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define COUNT 1000       /* elements per vector: several 1 KiB rounds */
#define CHUNK_BYTES 1024 /* server memory per rank and round */

static int rank, ranks, failures;

static void check(int ok, const char *what) {
    if (!ok) {
        printf("FAIL rank %d: %s (last error: %s)\n", rank, what, nam_last_error_message());
        failures++;
    }
}

static void check_status(nam_status_t got, nam_status_t want, const char *what) {
    if (got != want) {
        printf("FAIL rank %d: %s -> %s, expected %s: %s\n", rank, what, nam_status_string(got),
               nam_status_string(want), nam_last_error_message());
        failures++;
    }
}

/* Element i of rank r's vector: small integers, so float sums are exact in any order. */
static double value(int r, int i) { return (double)(((i * 37 + r * 101) % 199) - 99); }

static void fill(void *buf, nam_dtype_t t, int r) {
    for (int i = 0; i < COUNT; i++) {
        double v = value(r, i);
        switch (t) {
        case NAM_INT32: ((int32_t *)buf)[i] = (int32_t)v; break;
        case NAM_INT64: ((int64_t *)buf)[i] = (int64_t)v; break;
        case NAM_FLOAT: ((float *)buf)[i] = (float)v; break;
        case NAM_DOUBLE: ((double *)buf)[i] = v; break;
        }
    }
}

static void global_address_through_mpi(nam_t *nam) {
    nam_alloc_t *alloc = NULL;
    nam_gaddr_t addr = {0, 0};
    if (rank == 0) {
        check_status(nam_malloc(nam, 4096, NULL, &alloc), NAM_OK, "nam_malloc");
        check_status(nam_gaddr_of(alloc, 0, &addr), NAM_OK, "nam_gaddr_of");
    }
    MPI_Bcast(&addr, 2, MPI_UINT64_T, 0, MPI_COMM_WORLD);
    uint64_t old = 0;
    check_status(nam_gaddr_fetch_add(nam, addr, 1, &old), NAM_OK, "nam_gaddr_fetch_add");
    nam_gaddr_t slot = addr;
    slot.lo += 8 * (uint64_t)(rank + 1); /* the offset is the low 40 bits */
    uint64_t mine = 1000 + (uint64_t)rank;
    check_status(nam_gaddr_put(nam, slot, &mine, sizeof mine), NAM_OK, "nam_gaddr_put");
    MPI_Barrier(MPI_COMM_WORLD);
    uint64_t words[65];
    check_status(nam_gaddr_get(nam, addr, words, 8 * (size_t)(ranks + 1)), NAM_OK, "nam_gaddr_get");
    check(words[0] == (uint64_t)ranks, "every rank's fetch-add arrived");
    for (int r = 0; r < ranks && r < 64; r++) check(words[r + 1] == 1000 + (uint64_t)r, "every rank's put arrived");
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) {
        check_status(nam_free(alloc), NAM_OK, "nam_free");
        nam_alloc_release(alloc);
    }
}

/* Rank 0 owns a 4-slot mailbox; every other rank sends it 3 messages (retrying while it is
 * full); rank 0 sees each sender's messages in order. */
static void mailbox_through_mpi(nam_t *nam) {
    enum { PER_SENDER = 3 };
    nam_mailbox_t *box = NULL;
    nam_gaddr_t addr = {0, 0};
    if (rank == 0) {
        check_status(nam_mailbox_create(nam, 4, 0, &box), NAM_OK, "nam_mailbox_create");
        check_status(nam_mailbox_address(box, &addr), NAM_OK, "nam_mailbox_address");
    }
    MPI_Bcast(&addr, 2, MPI_UINT64_T, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        int next[64] = {0};
        for (int m = 0; m < PER_SENDER * (ranks - 1); m++) {
            int32_t msg[2] = {-1, -1};
            size_t len = 0;
            uint32_t from = 0;
            char buf[64];
            check_status(nam_mailbox_recv(box, buf, sizeof buf, &len, &from, 10000), NAM_OK, "nam_mailbox_recv");
            memcpy(msg, buf, sizeof msg);
            check(len == sizeof msg && msg[0] > 0 && msg[0] < ranks && msg[0] < 64, "a whole message from a rank");
            if (msg[0] > 0 && msg[0] < 64) check(msg[1] == next[msg[0]]++, "each sender's messages in order");
        }
    } else {
        nam_mailbox_sender_t *sender = NULL;
        check_status(nam_mailbox_sender_open(nam, addr, &sender), NAM_OK, "nam_mailbox_sender_open");
        char big[65] = {0};
        check_status(nam_mailbox_send(sender, big, sizeof big), NAM_ERR_INVALID_ARGUMENT, "send beyond the slot size");
        for (int32_t i = 0; i < PER_SENDER && sender; i++) {
            int32_t msg[2] = {rank, i};
            nam_status_t s;
            double give_up = MPI_Wtime() + 10;
            while ((s = nam_mailbox_send(sender, msg, sizeof msg)) == NAM_ERR_MAILBOX_FULL && MPI_Wtime() < give_up) {
            }
            check_status(s, NAM_OK, "nam_mailbox_send");
        }
        MPI_Barrier(MPI_COMM_WORLD);
        if (sender) check_status(nam_mailbox_sender_close(sender), NAM_OK, "nam_mailbox_sender_close");
    }
    if (rank == 0) {
        MPI_Barrier(MPI_COMM_WORLD);
        check_status(nam_mailbox_destroy(box), NAM_OK, "nam_mailbox_destroy");
    }
}

static void allreduce_matches_mpi(nam_reduce_t *group) {
    const nam_op_t ops[] = {NAM_OP_SUM, NAM_OP_MIN, NAM_OP_MAX};
    const MPI_Op mpi_ops[] = {MPI_SUM, MPI_MIN, MPI_MAX};
    const nam_dtype_t types[] = {NAM_INT32, NAM_INT64, NAM_FLOAT, NAM_DOUBLE};
    const MPI_Datatype mpi_types[] = {MPI_INT32_T, MPI_INT64_T, MPI_FLOAT, MPI_DOUBLE};
    const size_t sizes[] = {4, 8, 4, 8};
    char send[COUNT * 8], got[COUNT * 8], want[COUNT * 8];
    for (int o = 0; o < 3; o++) {
        for (int t = 0; t < 4; t++) {
            fill(send, types[t], rank);
            MPI_Allreduce(send, want, COUNT, mpi_types[t], mpi_ops[o], MPI_COMM_WORLD);
            memset(got, 0, sizeof got);
            check_status(nam_allreduce(group, send, got, COUNT, types[t], ops[o]), NAM_OK, "nam_allreduce");
            char what[64];
            snprintf(what, sizeof what, "op %d type %d equals MPI_Allreduce", ops[o], types[t]);
            check(memcmp(got, want, COUNT * sizes[t]) == 0, what);
        }
    }
}

static void mismatch_fails_everyone(nam_reduce_t *group) {
    int32_t send[COUNT + 1] = {0}, got[COUNT + 1];
    memset(got, 0xEE, sizeof got);
    size_t count = rank == 0 ? COUNT + 1 : COUNT;
    check_status(nam_allreduce(group, send, got, count, NAM_INT32, NAM_OP_SUM), NAM_ERR_REDUCE_MISMATCH,
                 "nam_allreduce with rank 0 one element longer");
    for (size_t i = 0; i < count; i++) check(got[i] == (int32_t)0xEEEEEEEE, "no partial result");
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &ranks);
    nam_t *nam = NULL;
    nam_status_t s = nam_init(NULL, &nam);
    if (s != NAM_OK) {
        printf("FAIL rank %d: nam_init: %s: %s\n", rank, nam_status_string(s), nam_last_error_message());
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    global_address_through_mpi(nam);
    mailbox_through_mpi(nam);
    nam_reduce_t *group = NULL;
    check_status(nam_reduce_create(nam, "allreduce_mpi", (uint32_t)ranks, (uint32_t)rank, CHUNK_BYTES, &group), NAM_OK,
                 "nam_reduce_create");
    if (group) {
        allreduce_matches_mpi(group);
        mismatch_fails_everyone(group);
        check_status(nam_reduce_destroy(group), NAM_OK, "nam_reduce_destroy");
    }
    check_status(nam_finalize(nam), NAM_OK, "nam_finalize");
    int total = 0;
    MPI_Reduce(&failures, &total, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) printf(total == 0 ? "allreduce_mpi: all checks passed\n" : "allreduce_mpi: %d failures\n", total);
    MPI_Finalize();
    return total == 0 ? 0 : 1;
}

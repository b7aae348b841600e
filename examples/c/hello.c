/*
 * hello.c: a tour of the nam C API against a running memory server.
 *
 *   nam serve --listen 127.0.0.1:13337 --capacity 64MiB &
 *   make && NAM_SERVERS=127.0.0.1:13337 ./hello
 *
 * Two clients (as two ranks of a job would be) share a named allocation: put/get, atomics,
 * a signal, non-blocking transfers, OpenSHMEM's small calls, and the errors bad input gets.
 * Every result is checked; the program exits non-zero on the first unexpected one.
 */
#include <nam.h>

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SIZE (1u << 20)   /* bytes of the shared allocation */
#define CHUNK (64u << 10) /* bytes of one non-blocking transfer */
#define CHUNKS 8
#define DATA_OFFSET 4096 /* words 0..511 are atomics and signals, data starts here */

static int failures;

/* Checks that `got` is `want`; prints the call, both codes and the library's message. */
static void expect(const char *what, nam_status_t got, nam_status_t want) {
    if (got == want) {
        printf("ok   %-46s -> %s\n", what, nam_status_string(got));
        return;
    }
    printf("FAIL %-46s -> %d (%s), expected %d (%s): %s\n", what, got, nam_status_string(got), want,
           nam_status_string(want), nam_last_error_message());
    failures++;
}

static void expect_u64(const char *what, uint64_t got, uint64_t want) {
    if (got == want) {
        printf("ok   %-46s == %" PRIu64 "\n", what, got);
        return;
    }
    printf("FAIL %-46s == %" PRIu64 ", expected %" PRIu64 "\n", what, got, want);
    failures++;
}

static void expect_true(const char *what, int ok) {
    printf("%s %s\n", ok ? "ok  " : "FAIL", what);
    failures += !ok;
}

/* Stops at once: later steps depend on this one. */
static void require(const char *what, nam_status_t got) {
    expect(what, got, NAM_OK);
    if (got != NAM_OK) {
        exit(1);
    }
}

static void atomics(nam_alloc_t *mine, nam_alloc_t *theirs) {
    uint64_t old = 99;
    expect("fetch_add 5 (writer)", nam_atomic_fetch_add(mine, 0, 5, &old), NAM_OK);
    expect_u64("  old value", old, 0);
    expect("fetch_add 7 (reader)", nam_atomic_fetch_add(theirs, 0, 7, &old), NAM_OK);
    expect_u64("  old value", old, 5);
    expect("fetch", nam_atomic_fetch(mine, 0, &old), NAM_OK);
    expect_u64("  value", old, 12);
    expect("cswap 12 -> 40", nam_atomic_cswap(theirs, 0, 12, 40, &old), NAM_OK);
    expect_u64("  old value (swapped)", old, 12);
    expect("cswap 12 -> 41 (fails)", nam_atomic_cswap(theirs, 0, 12, 41, &old), NAM_OK);
    expect_u64("  old value (not swapped)", old, 40);
    expect("swap -> 3", nam_atomic_swap(mine, 0, 3, &old), NAM_OK);
    expect_u64("  old value", old, 40);
}

/* OpenSHMEM's typed atomics through nam_atomic: 32-bit signed and unsigned words side by
 * side at bytes 16 and 20, and nam_test_word, which compares without waiting. */
static void typed_atomics(nam_alloc_t *mine, nam_alloc_t *theirs) {
    uint64_t old = 99;
    int holds = -1;
    expect("atomic SET int32 -2 at 16",
           nam_atomic(mine, 16, NAM_AMO_INT32, NAM_AMO_SET, (uint64_t)(int64_t)-2, 0, NULL), NAM_OK);
    expect("atomic FETCH_ADD int32 +1 (reader)",
           nam_atomic(theirs, 16, NAM_AMO_INT32, NAM_AMO_FETCH_ADD, 1, 0, &old), NAM_OK);
    expect_u64("  old value, sign-extended", old, (uint64_t)(int64_t)-2);
    expect("atomic OR uint32 0xf0 at 20", nam_atomic(mine, 20, NAM_AMO_UINT32, NAM_AMO_OR, 0xf0, 0, NULL), NAM_OK);
    expect("atomic FETCH_XOR uint32 0xff (reader)",
           nam_atomic(theirs, 20, NAM_AMO_UINT32, NAM_AMO_FETCH_XOR, 0xff, 0, &old), NAM_OK);
    expect_u64("  old value", old, 0xf0);
    expect("atomic FETCH int32 at 16", nam_atomic(mine, 16, NAM_AMO_INT32, NAM_AMO_FETCH, 0, 0, &old), NAM_OK);
    expect_u64("  value, the other half untouched", old, (uint64_t)(int64_t)-1);
    expect("test_word int32 at 16 < 0 (reader)", nam_test_word(theirs, 16, NAM_AMO_INT32, NAM_CMP_LT, 0, &holds),
           NAM_OK);
    expect_u64("  holds", (uint64_t)holds, 1);
    expect("test_word uint32 at 16 < 0", nam_test_word(mine, 16, NAM_AMO_UINT32, NAM_CMP_LT, 0, &holds), NAM_OK);
    expect_u64("  holds", (uint64_t)holds, 0);
    expect("atomic uint32 at 18 (misaligned)", nam_atomic(mine, 18, NAM_AMO_UINT32, NAM_AMO_ADD, 1, 0, NULL),
           NAM_ERR_MISALIGNED);
    expect("atomic with op 99", nam_atomic(mine, 16, NAM_AMO_UINT32, (nam_amo_op_t)99, 1, 0, NULL),
           NAM_ERR_INVALID_ARGUMENT);
    /* shmem_ptr: a local pointer when the server's memory is mapped here, else NULL. */
    const uint32_t *local = nam_ptr(theirs, 20);
    expect_true("  nam_ptr is NULL or points at the word", local == NULL || *local == 0xf);
    expect_true("  nam_ptr out of bounds is NULL", nam_ptr(theirs, SIZE) == NULL);
}

/* Puts and gets without a handle, all completed by one nam_flush (shmem_quiet). */
static void without_handles(nam_t *writer, nam_t *reader, nam_alloc_t *mine, nam_alloc_t *theirs) {
    static unsigned char out[4][16384], in[4][16384];
    for (int i = 0; i < 4; i++) {
        memset(out[i], 0x30 + i, sizeof out[i]);
        expect("put_nbi 16 KiB", nam_put_nbi(mine, DATA_OFFSET + 65536 + (uint64_t)i * 16384, out[i], sizeof out[i]),
               NAM_OK);
    }
    expect("nam_flush (quiet) after the put_nbis", nam_flush(writer), NAM_OK);
    for (int i = 0; i < 4; i++) {
        expect("get_nbi 16 KiB (reader)",
               nam_get_nbi(theirs, DATA_OFFSET + 65536 + (uint64_t)i * 16384, in[i], sizeof in[i]), NAM_OK);
    }
    expect("nam_flush (quiet) after the get_nbis", nam_flush(reader), NAM_OK);
    expect_true("  the handle-less puts and gets moved every byte", memcmp(in, out, sizeof in) == 0);
    expect("put_nbi out of bounds", nam_put_nbi(mine, SIZE - 4, out[0], 8), NAM_ERR_OUT_OF_BOUNDS);
}

/* OpenSHMEM's small calls: shmem_p/shmem_g (nam_p, nam_g), shmem_iput/iget (nam_iput,
 * nam_iget), non-blocking fetching atomics completed by nam_flush (shmem_atomic_*_nbi), and
 * a group's barrier and broadcast (here a group of one rank: the calls are the same). */
static void shmem_calls(nam_t *writer, nam_t *reader, nam_alloc_t *mine, nam_alloc_t *theirs) {
    const uint64_t at = DATA_OFFSET + 200000; /* clear of the other sections' data */
    double pi = 3.25, back = 0;
    expect("nam_p double", nam_p(mine, at, &pi, sizeof pi), NAM_OK);
    expect("nam_flush after nam_p", nam_flush(writer), NAM_OK);
    expect("nam_g double (reader)", nam_g(theirs, at, &back, sizeof back), NAM_OK);
    expect_true("  nam_g sees what nam_p wrote", back == pi);
    expect("nam_p of 3 bytes", nam_p(mine, at, &pi, 3), NAM_ERR_INVALID_ARGUMENT);

    int32_t column[6] = {1, -1, 2, -1, 3, -1}, got[9];
    memset(got, 0, sizeof got);
    expect("nam_iput every 2nd int32 to every 3rd", nam_iput(mine, at + 64, 3, column, 2, sizeof(int32_t), 3), NAM_OK);
    expect("nam_flush after nam_iput", nam_flush(writer), NAM_OK);
    expect("nam_iget 9 int32 (reader)", nam_iget(theirs, at + 64, 1, got, 1, sizeof(int32_t), 9), NAM_OK);
    expect_true("  the strided elements landed",
                got[0] == 1 && got[3] == 2 && got[6] == 3 && got[1] == 0 && got[2] == 0 && got[8] == 0);
    expect("nam_iput past the end", nam_iput(mine, SIZE - 8, 2, column, 1, sizeof(int32_t), 3),
           NAM_ERR_OUT_OF_BOUNDS);
    expect("nam_iget with stride 0", nam_iget(theirs, at, 0, got, 1, sizeof(int32_t), 2), NAM_ERR_INVALID_ARGUMENT);

    uint64_t olds[16] = {0}, sum = 0;
    uint32_t small = 0;
    expect("nam_atomic SET uint64 at 32", nam_atomic(mine, 32, NAM_AMO_UINT64, NAM_AMO_SET, 100, 0, NULL), NAM_OK);
    for (int i = 0; i < 16; i++) {
        expect("nam_atomic_nbi FETCH_ADD uint64",
               nam_atomic_nbi(theirs, 32, NAM_AMO_UINT64, NAM_AMO_FETCH_ADD, 1, 0, &olds[i]), NAM_OK);
    }
    expect("nam_atomic_nbi FETCH_XOR uint32 at 40",
           nam_atomic_nbi(theirs, 40, NAM_AMO_UINT32, NAM_AMO_FETCH_XOR, 0xff, 0, &small), NAM_OK);
    expect("nam_atomic_nbi ADD (not fetching)",
           nam_atomic_nbi(theirs, 32, NAM_AMO_UINT64, NAM_AMO_ADD, 1, 0, &sum), NAM_ERR_INVALID_ARGUMENT);
    expect("nam_atomic_nbi misaligned", nam_atomic_nbi(theirs, 36, NAM_AMO_UINT64, NAM_AMO_FETCH, 0, 0, &sum),
           NAM_ERR_MISALIGNED);
    /* `theirs` belongs to the reader client: its quiet completes its atomics. */
    expect("nam_flush (reader's quiet) delivers the fetched words", nam_flush(reader), NAM_OK);
    sum = 0;
    for (int i = 0; i < 16; i++) {
        sum += olds[i];
    }
    expect_u64("  the 16 fetched words sum to 100 + ... + 115", sum, 1720);
    expect_u64("  the fetched 32-bit word", small, 0);
    expect("nam_atomic FETCH uint64 at 32", nam_atomic(mine, 32, NAM_AMO_UINT64, NAM_AMO_FETCH, 0, 0, &sum), NAM_OK);
    expect_u64("  the word after 16 adds", sum, 116);

    /* Atomics with a request: each completed on its own (nam_wait), or by the quiet. */
    nam_request_t *amo = NULL, *later = NULL;
    uint64_t amo_old = 0, later_old = 0;
    nam_status_t posted = nam_atomic_nb(theirs, 32, NAM_AMO_UINT64, NAM_AMO_FETCH_ADD, 4, 0, &amo_old, &amo);
    expect_true("nam_atomic_nb FETCH_ADD uint64 (done or in flight)",
                (posted == NAM_OK && amo == NULL) || (posted == NAM_IN_PROGRESS && amo != NULL));
    expect("nam_wait (the atomic's request)", nam_wait(amo), NAM_OK);
    expect_u64("  its fetched word", amo_old, 116);
    posted = nam_atomic_nb(theirs, 32, NAM_AMO_UINT64, NAM_AMO_SWAP, 7, 0, &later_old, &later);
    expect_true("nam_atomic_nb SWAP uint64", posted == NAM_OK || posted == NAM_IN_PROGRESS);
    expect("nam_flush completes it too", nam_flush(reader), NAM_OK);
    expect("nam_test then reports it done", nam_test(later), NAM_OK);
    expect("nam_wait releases it", nam_wait(later), NAM_OK);
    expect_u64("  the swapped-out word", later_old, 120);
    expect("nam_atomic_nb with an unknown op",
           nam_atomic_nb(theirs, 32, NAM_AMO_UINT64, 99, 0, 0, &later_old, &later), NAM_ERR_INVALID_ARGUMENT);
    expect("nam_atomic_nb misaligned",
           nam_atomic_nb(theirs, 36, NAM_AMO_UINT64, NAM_AMO_FETCH, 0, 0, &later_old, &later), NAM_ERR_MISALIGNED);

    /* A context: its own stream of operations (shmem_ctx_t), completed by its own quiet. */
    nam_ctx_t *ctx = NULL;
    static const char streamed[] = "through a context";
    char streamed_back[sizeof streamed] = {0};
    uint64_t ctx_old = 0;
    require("nam_ctx_create (writer)", nam_ctx_create(writer, &ctx));
    expect("nam_ctx_put_nbi", nam_ctx_put_nbi(ctx, mine, at + 256, streamed, sizeof streamed), NAM_OK);
    expect("nam_ctx_fence", nam_ctx_fence(ctx), NAM_OK);
    expect("nam_ctx_atomic FETCH_ADD uint64 at 48",
           nam_ctx_atomic(ctx, mine, 48, NAM_AMO_UINT64, NAM_AMO_FETCH_ADD, 2, 0, &ctx_old), NAM_OK);
    nam_request_t *ctx_amo = NULL;
    uint64_t ctx_amo_old = 0;
    posted = nam_ctx_atomic_nb(ctx, mine, 48, NAM_AMO_UINT64, NAM_AMO_FETCH_ADD, 3, 0, &ctx_amo_old, &ctx_amo);
    expect_true("nam_ctx_atomic_nb FETCH_ADD uint64 at 48", posted == NAM_OK || posted == NAM_IN_PROGRESS);
    expect("nam_ctx_quiet", nam_ctx_quiet(ctx), NAM_OK);
    expect("nam_test (the context's atomic, after its quiet)", nam_test(ctx_amo), NAM_OK);
    expect("nam_wait (the context's atomic)", nam_wait(ctx_amo), NAM_OK);
    expect_u64("  its fetched word", ctx_amo_old, ctx_old + 2);
    expect("nam_ctx_get", nam_ctx_get(ctx, mine, at + 256, streamed_back, sizeof streamed_back), NAM_OK);
    expect_true("  the context's put arrived", memcmp(streamed_back, streamed, sizeof streamed) == 0);
    expect("nam_ctx_put with the reader's allocation", nam_ctx_put(ctx, theirs, at, "x", 1), NAM_ERR_INVALID_ARGUMENT);
    expect("nam_ctx_destroy", nam_ctx_destroy(ctx), NAM_OK);

    nam_reduce_t *group = NULL;
    char text[13] = "from rank 0!";
    require("nam_reduce_create (a group of one rank)", nam_reduce_create(writer, "hello-group", 1, 0, 0, &group));
    expect("nam_barrier", nam_barrier(group), NAM_OK);
    expect("nam_broadcast 13 bytes from rank 0", nam_broadcast(group, 0, text, sizeof text), NAM_OK);
    expect_true("  the root keeps its bytes", strcmp(text, "from rank 0!") == 0);
    expect("nam_broadcast from rank 1 of 1", nam_broadcast(group, 1, text, sizeof text), NAM_ERR_INVALID_ARGUMENT);
    expect("nam_reduce_destroy", nam_reduce_destroy(group), NAM_OK);
}

static void signals(nam_alloc_t *mine, nam_alloc_t *theirs) {
    static const char message[] = "data before its signal";
    char back[sizeof message] = {0};
    uint64_t value = 0;
    expect("put_signal (ADD 1 to word 8)",
           nam_put_signal(mine, DATA_OFFSET + 512, message, sizeof message, mine, 8, 1, NAM_SIGNAL_ADD), NAM_OK);
    expect("wait_until word 8 >= 1 (reader)", nam_wait_until(theirs, 8, NAM_CMP_GE, 1, 5000, &value), NAM_OK);
    expect_u64("  signal value", value, 1);
    expect("get_sync the signalled data (reader)",
           nam_get_sync(theirs, DATA_OFFSET + 512, back, sizeof back), NAM_OK);
    expect_true("  the reader sees the data", memcmp(back, message, sizeof message) == 0);
    expect("put_signal (SET word 8 to 42)",
           nam_put_signal(mine, DATA_OFFSET, "x", 1, mine, 8, 42, NAM_SIGNAL_SET), NAM_OK);
    expect("wait_until word 8 == 42", nam_wait_until(theirs, 8, NAM_CMP_EQ, 42, 5000, &value), NAM_OK);
    expect("wait_until word 8 == 7 (times out)", nam_wait_until(theirs, 8, NAM_CMP_EQ, 7, 50, &value),
           NAM_ERR_WAIT_TIMEOUT);
    expect_u64("  last value seen", value, 42);
}

static void non_blocking(nam_t *nam, nam_alloc_t *mine, nam_alloc_t *theirs) {
    unsigned char *out = malloc((size_t)CHUNKS * CHUNK), *in = calloc(CHUNKS, CHUNK);
    nam_request_t *requests[CHUNKS];
    int ok = out && in;
    for (size_t i = 0; ok && i < (size_t)CHUNKS * CHUNK; i++) {
        out[i] = (unsigned char)(i * 7 + i / CHUNK);
    }
    /* Start every put; a request is NULL when its put completed at once. */
    for (unsigned i = 0; ok && i < CHUNKS; i++) {
        nam_status_t s = nam_put(mine, DATA_OFFSET + 8192 + i * CHUNK, out + i * CHUNK, CHUNK, &requests[i]);
        ok &= (s == NAM_OK && requests[i] == NULL) || (s == NAM_IN_PROGRESS && requests[i] != NULL);
    }
    expect_true("nam_put x8 started", ok);
    expect("nam_fence (orders the puts before what follows)", nam_fence(nam), NAM_OK);
    for (unsigned i = 0; ok && i < CHUNKS; i++) {
        ok &= nam_wait(requests[i]) == NAM_OK; /* buffer reusable; request released */
    }
    expect_true("nam_wait x8 (puts complete locally)", ok);
    expect("nam_flush (puts complete remotely)", nam_flush(nam), NAM_OK);
    /* The reader gets them back, polling with nam_test before releasing with nam_wait. */
    for (unsigned i = 0; ok && i < CHUNKS; i++) {
        nam_status_t s = nam_get(theirs, DATA_OFFSET + 8192 + i * CHUNK, in + i * CHUNK, CHUNK, &requests[i]);
        ok &= s == NAM_OK || s == NAM_IN_PROGRESS;
    }
    for (unsigned i = 0; ok && i < CHUNKS; i++) {
        nam_status_t s;
        while ((s = nam_test(requests[i])) == NAM_IN_PROGRESS) {
        }
        ok &= s == NAM_OK && nam_wait(requests[i]) == NAM_OK;
    }
    expect_true("nam_get x8 with nam_test/nam_wait", ok);
    expect_true("  the data arrived intact", ok && memcmp(in, out, (size_t)CHUNKS * CHUNK) == 0);
    free(out);
    free(in);
}

static void bad_input(nam_t *nam, nam_alloc_t *mine) {
    char before[16], after[16];
    uint64_t word;
    nam_alloc_t *none = NULL;
    expect("get_sync the last 16 bytes", nam_get_sync(mine, SIZE - 16, before, sizeof before), NAM_OK);
    expect("put_sync 8 bytes at size - 4", nam_put_sync(mine, SIZE - 4, "overflow", 8), NAM_ERR_OUT_OF_BOUNDS);
    printf("     (%s)\n", nam_last_error_message());
    expect("get_sync the last 16 bytes again", nam_get_sync(mine, SIZE - 16, after, sizeof after), NAM_OK);
    expect_true("  the failed put changed nothing", memcmp(before, after, sizeof before) == 0);
    expect("get_sync past the end", nam_get_sync(mine, SIZE, after, 1), NAM_ERR_OUT_OF_BOUNDS);
    expect("fetch_add at offset 4", nam_atomic_fetch_add(mine, 4, 1, &word), NAM_ERR_MISALIGNED);
    expect("put_sync from a NULL buffer", nam_put_sync(mine, 0, NULL, 8), NAM_ERR_INVALID_ARGUMENT);
    expect("wait_until with a bad comparison", nam_wait_until(mine, 0, (nam_cmp_t)77, 0, 10, &word),
           NAM_ERR_INVALID_ARGUMENT);
    expect("malloc of 0 bytes", nam_malloc(nam, 0, NULL, &none), NAM_ERR_INVALID_ARGUMENT);
    expect_true("  gives no allocation", none == NULL);
    expect("open an unknown name", nam_open(nam, "no-such-allocation", &none), NAM_ERR_NAME_NOT_FOUND);
}

int main(void) {
    nam_t *writer = NULL, *reader = NULL;
    nam_alloc_t *mine = NULL, *theirs = NULL;
    nam_alloc_params_t params = {.align = 4096, .flags = NAM_ALLOC_SHARED, .name = "hello", .server = NAM_SERVER_ANY};
    static const char greeting[] = "hello, network-attached memory";
    char back[sizeof greeting] = {0};

    require("nam_init (writer, from NAM_SERVERS)", nam_init(NULL, &writer));
    require("nam_init (reader)", nam_init(NULL, &reader));
    require("nam_malloc 1 MiB shared \"hello\"", nam_malloc(writer, SIZE, &params, &mine));
    expect_u64("nam_alloc_size", nam_alloc_size(mine), SIZE);
    require("nam_open \"hello\" (reader)", nam_open(reader, "hello", &theirs));
    expect_u64("nam_alloc_size (reader)", nam_alloc_size(theirs), SIZE);
    expect("malloc \"hello\" again", nam_malloc(writer, 64, &params, &(nam_alloc_t *){NULL}), NAM_ERR_NAME_EXISTS);

    expect("put_sync greeting", nam_put_sync(mine, DATA_OFFSET, greeting, sizeof greeting), NAM_OK);
    expect("get_sync greeting (reader)", nam_get_sync(theirs, DATA_OFFSET, back, sizeof back), NAM_OK);
    expect_true("  the reader sees the greeting", strcmp(back, greeting) == 0);

    atomics(mine, theirs);
    typed_atomics(mine, theirs);
    without_handles(writer, reader, mine, theirs);
    shmem_calls(writer, reader, mine, theirs);
    signals(mine, theirs);
    non_blocking(writer, mine, theirs);
    bad_input(writer, mine);

    /* A request left outstanding: nam_finalize waits for it and flushes before it leaves. */
    static unsigned char last[CHUNK], check[CHUNK];
    nam_request_t *left = NULL;
    memset(last, 0x5a, sizeof last);
    nam_status_t s = nam_put(theirs, DATA_OFFSET, last, sizeof last, &left);
    expect_true("nam_put left outstanding (reader)", s == NAM_OK || s == NAM_IN_PROGRESS);
    expect("nam_finalize (reader, completes the put)", nam_finalize(reader), NAM_OK);
    expect("get_sync what the reader put", nam_get_sync(mine, DATA_OFFSET, check, sizeof check), NAM_OK);
    expect_true("  the outstanding put arrived", memcmp(check, last, sizeof last) == 0);

    expect("nam_free", nam_free(mine), NAM_OK);
    expect("nam_free again (double free)", nam_free(mine), NAM_ERR_FREED);
    printf("     (%s)\n", nam_last_error_message());
    expect("put_sync after free", nam_put_sync(mine, 0, "x", 1), NAM_ERR_FREED);
    expect("nam_alloc_release", nam_alloc_release(mine), NAM_OK);
    expect("nam_finalize (writer)", nam_finalize(writer), NAM_OK);

    if (failures) {
        printf("hello: %d check(s) FAILED\n", failures);
        return 1;
    }
    printf("hello: all checks passed\n");
    return 0;
}

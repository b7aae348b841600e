/*
 * server_loss.c: what a client sees when its memory server dies.
 *
 *   NAM_SERVERS=127.0.0.1:13337 NAM_TIMEOUT_MS=2000 ./server_loss
 *
 * It allocates and writes, prints "ready", and waits for a line on standard input; kill
 * the server (kill -9) and then send the line. Every later call must fail with a transport
 * error (NAM_ERR_TRANSPORT, NAM_ERR_CONNECT or NAM_ERR_TIMEOUT) within its deadline, never
 * hang and never report success for data that cannot have arrived; nam_finalize must still
 * return. Exits non-zero otherwise.
 */
#define _POSIX_C_SOURCE 200809L
#include <nam.h>

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static int is_loss(nam_status_t s) {
    return s == NAM_ERR_TRANSPORT || s == NAM_ERR_CONNECT || s == NAM_ERR_TIMEOUT;
}

int main(void) {
    const char *timeout_env = getenv("NAM_TIMEOUT_MS");
    double deadline_s = 3.0 * (timeout_env ? atof(timeout_env) : 10000.0) / 1000.0 + 2.0;
    nam_t *nam = NULL;
    nam_alloc_t *a = NULL;
    char line[16], block[4096] = {1};
    uint64_t old = 0;

    if (nam_init(NULL, &nam) != NAM_OK || nam_malloc(nam, sizeof block, NULL, &a) != NAM_OK ||
        nam_put_sync(a, 0, block, sizeof block) != NAM_OK) {
        printf("FAIL setup: %s\n", nam_last_error_message());
        return 1;
    }
    printf("ready\n");
    fflush(stdout);
    if (!fgets(line, sizeof line, stdin)) {
        printf("FAIL no go-ahead on stdin\n");
        return 1;
    }

    /* The first calls may still be in flight when the loss is noticed; within a bounded
     * number of calls and the deadline, every call must report it. */
    double start = now_s();
    nam_status_t s = NAM_OK;
    int calls = 0;
    while (s == NAM_OK && calls < 1000 && now_s() - start < deadline_s) {
        s = nam_put_sync(a, 0, block, sizeof block);
        calls++;
    }
    printf("put_sync after the loss (call %d, %.2f s): %s: %s\n", calls, now_s() - start, nam_status_string(s),
           nam_last_error_message());
    int ok = is_loss(s);
    double t0 = now_s();
    s = nam_atomic_fetch_add(a, 0, 1, &old);
    printf("fetch_add: %s (%.2f s)\n", nam_status_string(s), now_s() - t0);
    ok &= is_loss(s);
    t0 = now_s();
    s = nam_get_sync(a, 0, block, sizeof block);
    printf("get_sync: %s (%.2f s)\n", nam_status_string(s), now_s() - t0);
    ok &= is_loss(s);
    t0 = now_s();
    s = nam_finalize(nam);
    printf("nam_finalize: %s (%.2f s)\n", nam_status_string(s), now_s() - t0);
    ok &= now_s() - start < 4 * deadline_s;
    printf("server_loss: %s\n", ok ? "all checks passed" : "FAILED");
    return ok ? 0 : 1;
}

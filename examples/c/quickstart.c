/*
 * quickstart.c: the nam C API in one page. Allocate memory on a memory server, write an array
 * there and read it back, count with a remote fetch-and-add, see bad input refused, free.
 *
 *   nam serve --listen 127.0.0.1:13337 --capacity 64MiB &
 *   cc -o quickstart quickstart.c $(pkg-config --cflags --libs nam)
 *   NAM_SERVERS=127.0.0.1:13337 ./quickstart
 */
#include <nam.h>

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N 1024

/* Every call returns a status: NAM_OK (0), or a negative code with the exact cause. */
static void check(nam_status_t status, const char *what) {
    if (status != NAM_OK) {
        fprintf(stderr, "%s: %s: %s\n", what, nam_status_string(status), nam_last_error_message());
        exit(1);
    }
}

int main(void) {
    nam_t *nam = NULL;
    check(nam_init(NULL, &nam), "nam_init"); /* servers from NAM_SERVERS */

    nam_alloc_t *alloc = NULL;
    check(nam_malloc(nam, N * sizeof(uint64_t) + 8, NULL, &alloc), "nam_malloc");

    uint64_t sent[N], received[N];
    for (uint64_t i = 0; i < N; i++) {
        sent[i] = i * i;
    }
    check(nam_put_sync(alloc, 0, sent, sizeof sent), "nam_put_sync"); /* at the server on return */
    check(nam_get_sync(alloc, 0, received, sizeof received), "nam_get_sync");
    printf("array %s\n", memcmp(sent, received, sizeof sent) == 0 ? "intact" : "CHANGED");

    uint64_t old = 0; /* the counter is the word after the array */
    for (int i = 0; i < 3; i++) {
        check(nam_atomic_fetch_add(alloc, sizeof sent, 5, &old), "nam_atomic_fetch_add");
    }
    printf("counter was %" PRIu64 " before the third add\n", old);

    nam_status_t refused = nam_put_sync(alloc, nam_alloc_size(alloc) - 4, sent, 8);
    printf("put past the end: %s (%s)\n", nam_status_string(refused), nam_last_error_message());

    check(nam_free(alloc), "nam_free");
    nam_alloc_release(alloc);
    check(nam_finalize(nam), "nam_finalize");
    return 0;
}

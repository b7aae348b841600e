/* Far memory from C: the explicit cache and a paged region over the servers in NAM_SERVERS,
 * checked against a local copy, and the typed errors. Built and run by tests/farmem_c.rs. */
#include <nam.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CHECK(call)                                                                        \
    do {                                                                                   \
        nam_status_t s_ = (call);                                                          \
        if (s_ != NAM_OK) {                                                                \
            fprintf(stderr, "%s: %s (%s)\n", #call, nam_status_string(s_), nam_last_error_message()); \
            return 1;                                                                      \
        }                                                                                  \
    } while (0)

/* The CPU latency bound in force (microseconds), or -1 if the device cannot be read. */
static int cpu_latency_in_force(void) {
    int value = -1;
    FILE *f = fopen("/dev/cpu_dma_latency", "rb");
    if (f != NULL) {
        if (fread(&value, sizeof value, 1, f) != 1) value = -1;
        fclose(f);
    }
    return value;
}

int main(void) {
    enum { FAR = 1 << 20, LOCAL = 64 << 10 };
    unsigned char *model = malloc(FAR), *back = malloc(FAR);
    for (size_t i = 0; i < FAR; i++) model[i] = (unsigned char)(i * 31 + 7);

    nam_farmem_params_t params = {.far_bytes = FAR, .local_bytes = LOCAL};
    nam_farmem_t *far = NULL;
    CHECK(nam_farmem_create(NULL, &params, &far));
    CHECK(nam_farmem_write(far, 0, model, FAR));
    CHECK(nam_farmem_flush(far));
    CHECK(nam_farmem_read(far, 0, back, FAR));
    if (memcmp(model, back, FAR) != 0) { fprintf(stderr, "explicit: data differs\n"); return 1; }
    nam_farmem_stats_t stats;
    CHECK(nam_farmem_stats(far, &stats));
    if (stats.misses == 0 || stats.evictions == 0 || stats.writebacks == 0) {
        fprintf(stderr, "explicit: counters %llu misses, %llu evictions, %llu write-backs\n",
                (unsigned long long)stats.misses, (unsigned long long)stats.evictions, (unsigned long long)stats.writebacks);
        return 1;
    }
    if (nam_farmem_read(far, FAR - 4, back, 8) != NAM_ERR_OUT_OF_BOUNDS) { fprintf(stderr, "no bounds check\n"); return 1; }
    CHECK(nam_farmem_destroy(far));

    nam_farmem_params_t tiny = {.far_bytes = FAR, .local_bytes = 100};
    if (nam_farmem_create(NULL, &tiny, &far) != NAM_ERR_BUDGET_TOO_SMALL || far != NULL) {
        fprintf(stderr, "a 100-byte budget was accepted\n");
        return 1;
    }

    nam_region_t *region = NULL;
    void *mem = NULL;
    CHECK(nam_region_create(NULL, &params, &region, &mem));
    memcpy(mem, model, FAR); /* evictions: only LOCAL bytes stay resident */
    CHECK(nam_region_flush(region));
    if (memcmp(mem, model, FAR) != 0) { fprintf(stderr, "paged: data differs\n"); return 1; }
    /* Asking for pages and dropping them: everything resident is written back and dropped,
     * the last two pages come back in one call, and ranges past the end are refused. */
    uint64_t pages = 0;
    CHECK(nam_region_evict(region, 0, FAR, &pages));
    if (pages == 0 || pages > LOCAL / 4096) { fprintf(stderr, "evicted %llu pages\n", (unsigned long long)pages); return 1; }
    uint64_t resident = 0, prefetched = 0;
    CHECK(nam_region_stats(region, &stats, &resident));
    if (resident != 0) { fprintf(stderr, "%llu pages resident after dropping all\n", (unsigned long long)resident); return 1; }
    prefetched = stats.prefetches;
    CHECK(nam_region_fetch(region, FAR - 8192, 8192, &pages));
    if (pages != 2) { fprintf(stderr, "fetched %llu pages, not 2\n", (unsigned long long)pages); return 1; }
    CHECK(nam_region_stats(region, &stats, &resident));
    if (resident != 2 || stats.prefetches != prefetched + 2 || stats.misses == 0) {
        fprintf(stderr, "after a fetch of 2 pages: %llu resident, %llu prefetches (%llu before)\n",
                (unsigned long long)resident, (unsigned long long)stats.prefetches, (unsigned long long)prefetched);
        return 1;
    }
    if (memcmp((char *)mem + FAR - 8192, model + FAR - 8192, 8192) != 0) { fprintf(stderr, "fetched: data differs\n"); return 1; }
    if (nam_region_fetch(region, FAR - 4, 8, &pages) != NAM_ERR_OUT_OF_BOUNDS ||
        nam_region_evict(region, FAR, 1, NULL) != NAM_ERR_OUT_OF_BOUNDS) {
        fprintf(stderr, "a range past the region's end was accepted\n");
        return 1;
    }
    CHECK(nam_region_destroy(region));

    /* Handler-thread faults: a system call may write into a page that is not resident
     * (in the default signal mode it would fail with EFAULT). */
    nam_farmem_params_t threaded = params;
    threaded.fault_thread = 1;
    CHECK(nam_region_create(NULL, &threaded, &region, &mem));
    memcpy(mem, model, FAR); /* the first pages are evicted by the time this ends */
    int fds[2];
    if (pipe(fds) != 0 || write(fds[1], model + FAR - 4096, 4096) != 4096) { perror("pipe"); return 1; }
    if (read(fds[0], mem, 4096) != 4096) { perror("read(2) into a far page"); return 1; }
    if (memcmp(mem, model + FAR - 4096, 4096) != 0 || memcmp((char *)mem + 4096, model + 4096, FAR - 4096) != 0) {
        fprintf(stderr, "paged, handler thread: data differs\n");
        return 1;
    }
    CHECK(nam_region_destroy(region));

    /* Idle cores polling while a handler-thread region lives: the kernel's CPU latency bound
     * is 0 while it lives and back to what it was after; without root the region is refused
     * with NAM_ERR_SYSTEM. */
    threaded.poll_idle_cores = 1;
    int before = cpu_latency_in_force();
    nam_status_t s = nam_region_create(NULL, &threaded, &region, &mem);
    if (s == NAM_OK) {
        if (cpu_latency_in_force() != 0) { fprintf(stderr, "poll_idle_cores: bound not in force\n"); return 1; }
        memcpy(mem, model, FAR);
        if (memcmp(mem, model, FAR) != 0) { fprintf(stderr, "paged, polling: data differs\n"); return 1; }
        CHECK(nam_region_destroy(region));
        if (cpu_latency_in_force() != before) { fprintf(stderr, "poll_idle_cores: bound outlived the region\n"); return 1; }
    } else if (s != NAM_ERR_SYSTEM || strstr(nam_last_error_message(), "/dev/cpu_dma_latency") == NULL) {
        fprintf(stderr, "poll_idle_cores refused without naming the device: %s\n", nam_last_error_message());
        return 1;
    }

    /* A region on huge pages: 4 of them resident at most, 8 in far memory. Where too few are
     * reserved and free, the refusal must say how to reserve them. */
    enum { HUGE_FAR = 16 << 20 };
    unsigned char *huge_model = malloc(HUGE_FAR);
    for (size_t i = 0; i < HUGE_FAR; i++) huge_model[i] = (unsigned char)(i * 13 + i / 4096);
    nam_farmem_params_t huge = {.far_bytes = HUGE_FAR, .local_bytes = HUGE_FAR / 2, .huge_pages = 1};
    s = nam_region_create(NULL, &huge, &region, &mem);
    if (s == NAM_OK) {
        memcpy(mem, huge_model, HUGE_FAR); /* the first half is evicted by the time this ends */
        CHECK(nam_region_flush(region));
        if (memcmp(mem, huge_model, HUGE_FAR) != 0) { fprintf(stderr, "paged, huge pages: data differs\n"); return 1; }
        CHECK(nam_region_destroy(region));
    } else if (s != NAM_ERR_HUGE_PAGES_UNAVAILABLE || strstr(nam_last_error_message(), "vm.nr_hugepages") == NULL) {
        fprintf(stderr, "huge pages refused without saying how to reserve them: %s (%s)\n", nam_status_string(s),
                nam_last_error_message());
        return 1;
    } else {
        printf("farmem.c: no free huge pages, refusal checked\n");
    }
    free(huge_model);
    printf("farmem.c: ok\n");
    free(model);
    free(back);
    return 0;
}

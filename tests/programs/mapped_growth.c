/* Mappings made in the warm-up (the first epoch) and grown by mremap by a
 * fixed amount every epoch after it: one page of anonymous memory grown by
 * 256 KiB, a 64 KiB one grown by 64 KiB, and one page of a memfd mapped
 * shared grown by 128 KiB (shared memory). The warm-up is sampled by
 * default: the mappings may or may not have been drawn, and what they
 * grow by is recorded whole after it either way. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include "mark.h"

#define KIB 1024
#define PAGE 4096

struct grown {
    char *start;
    size_t len;
};

static void check(int ok, const char *what) {
    if (!ok) {
        perror(what);
        exit(1);
    }
}

static struct grown map_anonymous(size_t len) {
    char *start = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    check(start != MAP_FAILED, "mmap");
    return (struct grown){start, len};
}

__attribute__((noinline)) static void grow_page(struct grown *g) {
    g->start = mremap(g->start, g->len, g->len + 256 * KIB, MREMAP_MAYMOVE); /* grows a page */
    check(g->start != MAP_FAILED, "mremap page");
    g->len += 256 * KIB;
    memset(g->start, 1, g->len);
}

__attribute__((noinline)) static void grow_block(struct grown *g) {
    g->start = mremap(g->start, g->len, g->len + 64 * KIB, MREMAP_MAYMOVE); /* grows a block */
    check(g->start != MAP_FAILED, "mremap block");
    g->len += 64 * KIB;
    memset(g->start, 2, g->len);
}

__attribute__((noinline)) static void grow_shared(struct grown *g, int fd) {
    check(ftruncate(fd, g->len + 128 * KIB) == 0, "ftruncate");
    g->start = mremap(g->start, g->len, g->len + 128 * KIB, MREMAP_MAYMOVE); /* grows shared memory */
    check(g->start != MAP_FAILED, "mremap shared");
    g->len += 128 * KIB;
    memset(g->start, 3, g->len);
}

int main(void) {
    struct grown page = map_anonymous(PAGE);
    struct grown block = map_anonymous(64 * KIB);
    int fd = memfd_create("mapped_growth", 0);
    check(fd >= 0 && ftruncate(fd, PAGE) == 0, "memfd");
    char *shared_start = mmap(NULL, PAGE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    check(shared_start != MAP_FAILED, "mmap shared");
    struct grown shared = {shared_start, PAGE};
    for (int epoch = 0; epoch < 8; epoch++) {
        if (epoch > 0) {
            grow_page(&page);
            grow_block(&block);
            grow_shared(&shared, fd);
        }
        mark_epoch(epoch);
    }
    printf("mapped_growth: %zu %zu %zu\n", page.len, block.len, shared.len);
    return 0;
}

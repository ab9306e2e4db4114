/* Small anonymous mappings by the hundred, as CPython maps the 16 KiB
 * chunks of its frame stack: each epoch maps 256 chunks, unmaps 192 of
 * them and keeps 64 (1 MiB), next to one 4 MiB mapping kept per epoch. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include "mark.h"

#define KIB 1024
#define CHUNK (16 * KIB)
#define CHUNKS 256
#define KEPT 64

static void *map_pages(size_t len) {
    void *region = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (region == MAP_FAILED) {
        perror("mmap");
        exit(1);
    }
    memset(region, 1, len);
    return region;
}

__attribute__((noinline)) static void *map_chunk(void) { return map_pages(CHUNK); }

__attribute__((noinline)) static void keep_big_mapping(void) { map_pages(4096 * KIB); }

int main(void) {
    for (int epoch = 0; epoch < 8; epoch++) {
        void *chunks[CHUNKS];
        for (int i = 0; i < CHUNKS; i++) chunks[i] = map_chunk();
        for (int i = KEPT; i < CHUNKS; i++) {
            if (munmap(chunks[i], CHUNK) != 0) {
                perror("munmap");
                return 1;
            }
        }
        keep_big_mapping();
        mark_epoch(epoch);
    }
    printf("mapped_chunks: done\n");
    return 0;
}

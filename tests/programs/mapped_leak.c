/* Anonymous mappings left behind every epoch, cut by partial munmaps and
 * moved or resized by mremap, next to mappings that are not leaks: one
 * mapped and unmapped within the epoch, one split and unmapped in one call
 * an epoch later, and file mappings (one of them over anonymous pages with
 * MAP_FIXED), which are not anonymous memory. A large malloc block, which
 * glibc maps itself, must count as heap only. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include "mark.h"

#define KIB 1024
#define PAGE 4096

/* A macro, not a function, so that each mapping's stack starts in its caller. */
#define MAP_ANONYMOUS_PAGES(len, prot) mmap(NULL, (len), (prot), MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)

static void check(int ok, const char *what) {
    if (!ok) {
        perror(what);
        exit(1);
    }
}

/* 512 KiB mapped; 64 KiB unmapped at each end and one page in the middle: 380 KiB stay. */
__attribute__((noinline)) static void leak_mapped_pages(void) {
    char *region = MAP_ANONYMOUS_PAGES(512 * KIB, PROT_READ | PROT_WRITE);
    check(region != MAP_FAILED, "mmap");
    memset(region, 1, 512 * KIB);
    check(munmap(region, 64 * KIB) == 0, "munmap head");
    check(munmap(region + 448 * KIB, 64 * KIB) == 0, "munmap tail");
    check(munmap(region + 256 * KIB, PAGE) == 0, "munmap middle");
}

/* 32 KiB mapped, then moved onto a reserved range and grown to 96 KiB, and
 * the first page unmapped at its new place: 28 KiB stay with the mmap, the
 * 64 KiB it grew by with the mremap. */
__attribute__((noinline)) static void grow_mapping(void) {
    char *region = MAP_ANONYMOUS_PAGES(32 * KIB, PROT_READ | PROT_WRITE);
    check(region != MAP_FAILED, "mmap");
    memset(region, 2, 32 * KIB);
    char *target = MAP_ANONYMOUS_PAGES(96 * KIB, PROT_NONE);
    check(target != MAP_FAILED, "mmap");
    char *moved = mremap(region, 32 * KIB, 96 * KIB, MREMAP_MAYMOVE | MREMAP_FIXED, target);
    check(moved == target, "mremap");
    memset(moved, 3, 96 * KIB);
    check(munmap(moved, PAGE) == 0, "munmap moved");
}

/* 128 KiB mapped and shrunk in place to 48 KiB. */
__attribute__((noinline)) static void shrink_mapping(void) {
    char *region = MAP_ANONYMOUS_PAGES(128 * KIB, PROT_READ | PROT_WRITE);
    check(region != MAP_FAILED, "mmap");
    memset(region, 4, 128 * KIB);
    check(mremap(region, 128 * KIB, 48 * KIB, 0) == region, "mremap shrink");
}

/* Mapped and unmapped within the epoch. */
__attribute__((noinline)) static void scratch_mapping(void) {
    char *region = MAP_ANONYMOUS_PAGES(1024 * KIB, PROT_READ | PROT_WRITE);
    check(region != MAP_FAILED, "mmap");
    memset(region, 5, 1024 * KIB);
    check(munmap(region, 1024 * KIB) == 0, "munmap scratch");
}

/* 2 MiB split by unmapping a middle page, kept for one epoch, then unmapped
 * in one call that covers both pieces and the hole. */
__attribute__((noinline)) static void rotate_mapping(void) {
    static char *previous;
    char *region = MAP_ANONYMOUS_PAGES(2048 * KIB, PROT_READ | PROT_WRITE);
    check(region != MAP_FAILED, "mmap");
    memset(region, 6, 2048 * KIB);
    check(munmap(region + 1024 * KIB, PAGE) == 0, "munmap split");
    if (previous) check(munmap(previous, 2048 * KIB) == 0, "munmap previous");
    previous = region;
}

/* File pages left mapped every epoch, half of them over anonymous pages
 * that MAP_FIXED replaces: none of it is anonymous memory. */
__attribute__((noinline)) static void map_file_pages(int fd) {
    char *file = mmap(NULL, 64 * KIB, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
    check(file != MAP_FAILED, "mmap file");
    memset(file, 7, 64 * KIB);
    char *anonymous = MAP_ANONYMOUS_PAGES(64 * KIB, PROT_READ | PROT_WRITE);
    check(anonymous != MAP_FAILED, "mmap");
    char *over = mmap(anonymous, 64 * KIB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_FIXED, fd, 0);
    check(over == anonymous, "mmap fixed");
    memset(over, 8, 64 * KIB);
}

/* 256 KiB from malloc, above its mmap threshold: glibc maps it with its own internal mmap. */
__attribute__((noinline)) static void leak_big_block(void) {
    char *block = malloc(256 * KIB);
    check(block != NULL, "malloc");
    memset(block, 9, 256 * KIB);
}

int main(void) {
    FILE *file = tmpfile();
    check(file != NULL && ftruncate(fileno(file), 64 * KIB) == 0, "tmpfile");
    for (int epoch = 0; epoch < 8; epoch++) {
        leak_mapped_pages();
        grow_mapping();
        shrink_mapping();
        scratch_mapping();
        rotate_mapping();
        map_file_pages(fileno(file));
        leak_big_block();
        mark_epoch(epoch);
    }
    printf("mapped_leak: done\n");
    return 0;
}

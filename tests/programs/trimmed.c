/* RSS grows every epoch by thread stacks, while the program hands the
 * memory it freed back to the system. Each epoch frees a batch of blocks
 * larger than the last, with a small block kept past them, so that the
 * freed ones merge into free space below it rather than into the top of
 * the heap; malloc_trim(0) then gives those pages back (MADV_DONTNEED),
 * though glibc still counts them as its free space. Each epoch also
 * starts a thread that stays alive and writes 2 MiB of its stack: the
 * growth, which the tracer cannot see. With "handle", malloc_trim is
 * looked up on libc's handle, as Python's ctypes does. */
#include <dlfcn.h>
#include <malloc.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "mark.h"

#define EPOCHS 10
#define BLOCK 4000
#define STACK_WRITTEN (2 << 20)

void *volatile kept[EPOCHS];
static sem_t stack_written;

static void *hold_stack(void *arg) {
    (void)arg;
    volatile char used[STACK_WRITTEN];
    for (size_t i = 0; i < sizeof used; i += 512) {
        used[i] = 1;
    }
    sem_post(&stack_written);
    for (;;) {
        pause();
    }
    return NULL;
}

static void free_batch(int epoch) {
    int count = 800 * (epoch + 1);
    void **blocks = malloc(count * sizeof *blocks);
    for (int i = 0; i < count; i++) {
        blocks[i] = malloc(BLOCK);
        memset(blocks[i], 1, BLOCK);
    }
    kept[epoch] = malloc(3000);
    for (int i = 0; i < count; i++) {
        free(blocks[i]);
    }
    free(blocks);
}

int main(int argc, char **argv) {
    int (*trim)(size_t) = malloc_trim;
    if (argc > 1 && strcmp(argv[1], "handle") == 0) {
        void *libc = dlopen("libc.so.6", RTLD_NOW);
        trim = libc ? (int (*)(size_t))dlsym(libc, "malloc_trim") : NULL;
        if (!trim) {
            fprintf(stderr, "no malloc_trim in libc.so.6\n");
            return 1;
        }
    }
    sem_init(&stack_written, 0, 0);
    pthread_attr_t attributes;
    pthread_attr_init(&attributes);
    pthread_attr_setstacksize(&attributes, 2 * STACK_WRITTEN);
    for (int epoch = 0; epoch < EPOCHS; epoch++) {
        free_batch(epoch);
        pthread_t thread;
        if (pthread_create(&thread, &attributes, hold_stack, NULL) != 0) {
            perror("pthread_create");
            return 1;
        }
        sem_wait(&stack_written);
        trim(0);
        mark_epoch(epoch);
    }
    printf("trimmed: done\n");
    return 0;
}

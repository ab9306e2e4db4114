/* RSS grows every epoch while the live heap stays flat: glibc's malloc
 * keeps memory the program freed. Each epoch starts a thread that stays
 * alive (glibc gives each new thread an arena of its own, up to eight per
 * CPU) and allocates 100 blocks of 40 KiB, each followed by a small block
 * it keeps, then frees the large ones. The kept blocks stop the freed ones
 * from merging back into free space the arena can hand back, and no other
 * thread allocates there: most of the 4 MB freed an epoch stays with
 * malloc, written and resident. The kept blocks add 1.6 KB an epoch, below the noise floor. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "mark.h"

#define BLOCKS 100
#define BLOCK (40 * 1024)

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t changed = PTHREAD_COND_INITIALIZER;
static int fragmented;
static int exiting;
void *volatile sink;

static void *fragment(void *arg) {
    (void)arg;
    void *blocks[BLOCKS];
    void **kept = malloc(BLOCKS * sizeof *kept);
    for (int i = 0; i < BLOCKS; i++) {
        blocks[i] = malloc(BLOCK);
        memset(blocks[i], 1, BLOCK);
        kept[i] = malloc(16);
    }
    for (int i = 0; i < BLOCKS; i++) {
        free(blocks[i]);
    }
    sink = kept;
    pthread_mutex_lock(&lock);
    fragmented++;
    pthread_cond_broadcast(&changed);
    while (!exiting) { /* keeps its arena to itself until the program ends */
        pthread_cond_wait(&changed, &lock);
    }
    pthread_mutex_unlock(&lock);
    return NULL;
}

int main(void) {
    for (int epoch = 0; epoch < 9; epoch++) {
        pthread_t thread;
        if (pthread_create(&thread, NULL, fragment, NULL) != 0) {
            perror("pthread_create");
            return 1;
        }
        pthread_detach(thread);
        pthread_mutex_lock(&lock);
        while (fragmented <= epoch) {
            pthread_cond_wait(&changed, &lock);
        }
        pthread_mutex_unlock(&lock);
        mark_epoch(epoch);
    }
    pthread_mutex_lock(&lock);
    exiting = 1;
    pthread_cond_broadcast(&changed);
    pthread_mutex_unlock(&lock);
    printf("fragmented: done\n");
    return 0;
}

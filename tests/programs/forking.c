/* A multi-threaded parent that keeps allocating while it forks children that
 * end in every way a DataLoader worker or a subprocess does: exit, _exit,
 * exec, and exec of a missing program followed by _exit. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "mark.h"

#define EPOCHS 6
void *volatile sink;
void *parent_leaks[EPOCHS * 50];
int parent_leak_count;
volatile int stopping;

static void *allocator_thread(void *arg) {
    (void)arg;
    while (!stopping) {
        void *p = malloc(100);
        sink = p;
        free(p);
    }
    return NULL;
}

__attribute__((noinline)) void child_work(void) {
    void *keep[100];
    for (int i = 0; i < 100; i++) keep[i] = malloc(2048);
    for (int i = 0; i < 50; i++) free(keep[i]);
    sink = keep[99];
}

__attribute__((noinline)) void parent_leak(void) {
    for (int i = 0; i < 50; i++) parent_leaks[parent_leak_count++] = malloc(4096);
}

int main(void) {
    pthread_t threads[3];
    for (int t = 0; t < 3; t++) pthread_create(&threads[t], NULL, allocator_thread, NULL);
    int failures = 0;
    for (int epoch = 0; epoch < EPOCHS; epoch++) {
        parent_leak();
        pid_t child = fork();
        if (child == 0) {
            child_work();
            mark_epoch(0);
            child_work();
            switch (epoch % 4) {
            case 0: exit(0);
            case 1: _exit(0);
            case 2: execl("/bin/true", "true", (char *)NULL); _exit(3);
            default: execl("/nonexistent/program", "x", (char *)NULL); _exit(0);
            }
        }
        int status = 0;
        if (waitpid(child, &status, 0) != child || !WIFEXITED(status) || WEXITSTATUS(status) != 0) failures++;
        mark_epoch(epoch);
    }
    stopping = 1;
    for (int t = 0; t < 3; t++) pthread_join(threads[t], NULL);
    printf("forking: %d failures\n", failures);
    return failures != 0;
}

/* malloc, realloc and free on 8 KiB stacks: a makecontext coroutine's
   ("coroutine"), and a SA_ONSTACK handler's sigaltstack ("altstack", the
   kernel's signal frame on it too); epochs marked from the coroutine, or
   between signals. Prints a checksum of what it wrote in the blocks. */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ucontext.h>

#include "mark.h"

#define STACK_BYTES 8192
#define ROUNDS 2000
#define MARK_EVERY 500

static unsigned long checksum;

/* Each size class from a call site of its own: new stacks, new unwind rules. */
static __attribute__((noinline)) char *small(int i) { return malloc(16 + i % 64); }
static __attribute__((noinline)) char *medium(int i) { return malloc(1000 + i % 3000); }
static __attribute__((noinline)) char *grown(char *p, int i) { return realloc(p, 5000 + i % 2000); }

static void allocate_round(int i) {
    char *a = small(i), *b = medium(i);
    a[0] = (char)i;
    b[0] = (char)(i >> 3);
    b = grown(b, i);
    checksum += (unsigned char)a[0] + (unsigned char)b[0];
    free(a);
    free(b);
}

static ucontext_t main_context, coroutine_context;

static void coroutine(void) {
    for (int i = 0; i < ROUNDS; i++) {
        allocate_round(i);
        if (i % MARK_EVERY == 0) mark_epoch(i / MARK_EVERY);
    }
}

static volatile int handled;

static void handler(int signal) {
    (void)signal;
    allocate_round(handled);
    handled++;
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "";
    char *stack = malloc(STACK_BYTES);
    if (!strcmp(mode, "coroutine")) {
        getcontext(&coroutine_context);
        coroutine_context.uc_stack.ss_sp = stack;
        coroutine_context.uc_stack.ss_size = STACK_BYTES;
        coroutine_context.uc_link = &main_context;
        makecontext(&coroutine_context, coroutine, 0);
        swapcontext(&main_context, &coroutine_context);
    } else if (!strcmp(mode, "altstack")) {
        stack_t alternate = {.ss_sp = stack, .ss_size = STACK_BYTES};
        sigaltstack(&alternate, NULL);
        struct sigaction action;
        memset(&action, 0, sizeof action);
        action.sa_handler = handler;
        action.sa_flags = SA_ONSTACK;
        sigaction(SIGUSR1, &action, NULL);
        for (int i = 0; i < ROUNDS; i++) {
            raise(SIGUSR1);
            if (i % MARK_EVERY == 0) mark_epoch(i / MARK_EVERY);
        }
    } else {
        fprintf(stderr, "usage: small_stacks coroutine|altstack\n");
        return 2;
    }
    printf("%s: %d rounds, checksum %lu\n", mode, ROUNDS, checksum);
    return 0;
}

/* A plugin laid out unlike parser_plugin.c but as large, so that the loader
 * places it where that one was: its leaking call lies at another offset, and
 * a stack through one never has the other's return addresses. */
#include <stdlib.h>
#include <string.h>

static int counter;

__attribute__((noinline)) int encoder_mix(int x) {
    counter += x;
    return counter * 3 + x / 7;
}

__attribute__((noinline)) int encoder_mix_twice(int x) {
    return encoder_mix(x) ^ encoder_mix(x + 1);
}

__attribute__((noinline)) static char *encoder_frame(int i) {
    char *frame = calloc(1, 2500 + encoder_mix_twice(i) % 2); /* the encoder's leak */
    memset(frame, i, 100);
    return frame;
}

__attribute__((noinline)) void encoder_run(void *(*keep)(void *)) {
    for (int i = 0; i < 12; i++) keep(encoder_frame(i));
}

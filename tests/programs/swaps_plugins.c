/* Loads the parser plugin (argv[2]) and the encoder plugin (argv[3]), which
 * the loader places at the same address, and keeps what they leak:
 *   probe: each epoch the parser runs and is closed, then the encoder is
 *          opened and closed at once (a version probe);
 *   alt:   each epoch the parser runs and is closed, then the encoder;
 *   aba:   the parser runs for four epochs, the encoder for four, then the
 *          parser, loaded again, for four.
 * Exits with 3 when a plugin is not loaded where the parser first was. */
#define _GNU_SOURCE /* dladdr */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "mark.h"

typedef void (*run_fn)(void *(*)(void *));

static void *kept[4096];
static int kept_count;
static const char *parser_path, *encoder_path;
static void *parser_base;

static void *keep(void *block) {
    if (kept_count < 4096) kept[kept_count++] = block;
    return block;
}

/* Opens `path` and finds `function`, exiting unless it lies in an object
 * loaded where the parser was first. */
static void *open_plugin(const char *path, const char *function, run_fn *run) {
    void *plugin = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!plugin) {
        fprintf(stderr, "%s\n", dlerror());
        exit(1);
    }
    Dl_info info;
    *run = (run_fn)dlsym(plugin, function);
    if (!*run || !dladdr((void *)*run, &info)) exit(1);
    if (!parser_base) parser_base = info.dli_fbase;
    if (info.dli_fbase != parser_base) {
        fprintf(stderr, "swaps_plugins: %s was loaded at %p, not at %p where the parser was\n", path, info.dli_fbase,
                parser_base);
        exit(3);
    }
    return plugin;
}

static void run_and_close(const char *path, const char *function) {
    run_fn run;
    void *plugin = open_plugin(path, function, &run);
    run(keep);
    dlclose(plugin);
}

int main(int argc, char **argv) {
    if (argc < 4) return 2;
    const char *mode = argv[1];
    parser_path = argv[2];
    encoder_path = argv[3];
    run_fn run;
    if (!strcmp(mode, "probe")) {
        for (int epoch = 0; epoch < 10; epoch++) {
            run_and_close(parser_path, "parser_run");
            dlclose(open_plugin(encoder_path, "encoder_run", &run));
            mark_epoch(epoch);
        }
    } else if (!strcmp(mode, "alt")) {
        for (int epoch = 0; epoch < 10; epoch++) {
            run_and_close(parser_path, "parser_run");
            run_and_close(encoder_path, "encoder_run");
            mark_epoch(epoch);
        }
    } else if (!strcmp(mode, "aba")) {
        int epoch = 0;
        void *parser = open_plugin(parser_path, "parser_run", &run);
        for (; epoch < 4; epoch++) {
            run(keep);
            mark_epoch(epoch);
        }
        dlclose(parser);
        void *encoder = open_plugin(encoder_path, "encoder_run", &run);
        for (; epoch < 8; epoch++) {
            run(keep);
            mark_epoch(epoch);
        }
        dlclose(encoder);
        parser = open_plugin(parser_path, "parser_run", &run);
        for (; epoch < 12; epoch++) {
            run(keep);
            mark_epoch(epoch);
        }
    } else {
        return 2;
    }
    printf("swaps_plugins %s: both plugins were loaded at the same address\n", mode);
    return 0;
}

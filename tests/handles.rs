//! The allocator's functions looked up on a handle to the library that
//! defines them, as `dlsym(dlopen("libc.so.6"), "malloc")` or Python's
//! `ctypes.CDLL(ctypes.util.find_library("c")).malloc` do: the blocks are
//! recorded as the program's other blocks are, and a block freed through
//! such a `free` leaves the live table. A library's own malloc is still
//! its own, and a library preloaded after the tracer still finds the next
//! definitions with `dlsym(RTLD_NEXT)`.

use integration_tests::*;

#[test]
fn a_leak_through_mallocs_looked_up_on_libcs_handle_is_ranked_first() {
    let program = compile("libc_handle.c");
    let run = run_traced(&program, &[]).succeeded();
    assert_eq!(
        run.stdout(),
        "libc_handle: 14 of 14 lookups on the handle give the program's functions, 800 blocks leaked\n",
        "each lookup on libc's handle gives the function the program's calls reach"
    );
    let report = report_json(&run.trace);
    let line = &report["lines"][0];
    let leak_line = line_of("programs/libc_handle.c", "the leaking line");
    assert_eq!(
        (&line["frame"]["function"], &line["frame"]["line"]),
        (&"leak_through_handle".into(), &leak_line.into())
    );
    // 100 blocks of 2000..2099 bytes an epoch.
    assert_eq!(line["growth_bytes_per_epoch"], 100 * 2000 + 4950, "{line:#}");
    // Blocks freed through the handle's free, whichever malloc made them, are gone.
    for freed in ["free_through_handle", "temporaries_through_handle"] {
        assert!(!suspects(&report).iter().any(|s| mentions(s, freed)), "{freed} reported: {report:#}");
    }
    assert_eq!(report["verdict"]["kind"], "heap_leak");
}

#[test]
fn a_leak_through_ctypes_malloc_of_libc_is_named_at_its_python_line() {
    let python = python_interpreter("3.12");
    let script = python_script("ctypes_libc.py");
    let run = run_traced(&python, &[script.to_str().unwrap()]).succeeded();
    assert_eq!(run.stdout(), "ctypes_libc: 800 blocks kept\n");
    let report = report_json(&run.trace);
    let line = &report["lines"][0];
    let leak_line = line_of("python/ctypes_libc.py", "the leaking line");
    assert_eq!((&line["frame"]["function"], &line["frame"]["line"]), (&"stage_blocks".into(), &leak_line.into()));
    assert!(line["frame"]["file"].as_str().unwrap_or_default().ends_with("ctypes_libc.py"), "{line:#}");
    // Blocks of the global malloc freed through libc's handle are gone.
    let freed = report["lines"].as_array().unwrap().iter().any(|l| l["frame"]["function"] == "free_through_handle");
    assert!(!freed, "{:#}", report["lines"]);
    let verdict = report["verdict"]["message"].as_str().unwrap();
    assert!(verdict.starts_with(&format!("stage_blocks (ctypes_libc.py:{leak_line}) keeps about ")), "{verdict}");
}

#[test]
fn a_librarys_own_malloc_looked_up_on_its_handle_stays_its_own() {
    let program = compile("loads_own_heap.c");
    let library = compile_library("own_heap.c");
    let run = run_traced(&program, &[library.to_str().unwrap()]).succeeded();
    assert_eq!(run.stdout(), "loads_own_heap: the block is the library's\n");
}

/// Its functions find glibc's with dlsym(RTLD_NEXT), which glibc answers
/// for the library that called: were the tracer's dlsym to ask for itself,
/// they would find their own and call themselves until the stack ran out.
#[test]
fn a_library_preloaded_after_the_tracer_finds_the_next_definitions() {
    let program = compile("other_allocator.c");
    let wrapper = compile_library("next_wrapper.c");
    let preload = preload_after_tracer(Some(&wrapper));
    let run = run_traced_with(&program, &["8"], &[("LD_PRELOAD", &preload)]).succeeded();
    let report = report_json(&run.trace);
    assert!(mentions(&suspects(&report)[0], "leak_through_every_entry"), "{report:#}");
    assert_eq!(report["process"]["settings"]["allocator"], wrapper.display().to_string(), "{report:#}");
}

//! The planted leak is found, and none of the decoys next to it is reported.

use std::path::Path;

use integration_tests::*;
use trace_format::{Frame, Record};

const DECOYS: [&str; 4] = ["warm_up_once", "fill_cache", "rotate_buffer", "step_temporaries"];

fn assert_only_suspect_is(report: &serde_json::Value, leak: &str, decoys: &[&str]) {
    let suspects = suspects(report);
    assert!(!suspects.is_empty(), "no suspect reported: {report:#}");
    assert!(mentions(&suspects[0], leak), "top suspect is not {leak}: {:?}", suspects[0]);
    for suspect in &suspects {
        for decoy in decoys {
            assert!(!mentions(suspect, decoy), "decoy {decoy} reported as a suspect: {suspect:?}");
        }
    }
}

#[test]
fn planted_leak_is_the_top_suspect_and_no_decoy_is_listed() {
    let program = compile("leaky.c");
    let run = run_traced(&program, &["8"]).succeeded();
    assert_eq!(run.stdout(), "leaky: 8 epochs, 1600 blocks leaked\n", "the tracer changed the program's output");
    let report = report_json(&run.trace);
    assert_eq!(report["epochs"].as_array().unwrap().len(), 9, "8 marks and the exit snapshot");
    assert_only_suspect_is(&report, "leak_per_epoch", &DECOYS);
    assert_eq!(suspects(&report).len(), 1, "{report:#}");
    let top = &report["suspects"][0];
    // 200 blocks of 1000..1199 bytes per epoch.
    let growth = top["growth_bytes_per_epoch"].as_f64().unwrap();
    assert!((200.0 * 1000.0..=200.0 * 1200.0).contains(&growth), "growth {growth}");
    let own =
        top["frames"].as_array().unwrap().iter().find(|f| f["own_code"] == true).expect("an own-code frame is marked");
    assert_eq!(own["function"], "leak_per_epoch");
    assert!(own["file"].as_str().unwrap_or_default().ends_with("leaky.c"), "{own}");
    assert_eq!(report["verdict"]["kind"], "heap_leak");
}

#[test]
fn text_report_names_the_leak_and_the_flamegraph_shows_only_it() {
    let program = compile("leaky.c");
    let run = run_traced(&program, &["8"]);
    let svg = run.dir.path().join("leaks.svg");
    let output =
        std::process::Command::new(analyzer()).arg("report").arg(&run.trace).arg("-o").arg(&svg).output().unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(text.contains("leak_per_epoch"), "{text}");
    assert!(text.contains(&svg.display().to_string()), "the report prints the flamegraph's path: {text}");
    let drawing = std::fs::read_to_string(&svg).unwrap();
    assert!(drawing.starts_with("<?xml") && drawing.contains("<svg"), "not an SVG");
    assert!(drawing.contains("leak_per_epoch"));
    for decoy in DECOYS {
        assert!(!drawing.contains(decoy), "the leak flamegraph draws the decoy {decoy}");
    }
}

/// Exact whether every allocation is recorded or only those after the
/// warm-up (the default).
#[test]
fn threads_allocating_at_once_are_all_traced() {
    let program = compile("threads.c");
    for env in [&[FULL_CAPTURE][..], &[]] {
        let run = run_traced_with(&program, &[], env).succeeded();
        let report = report_json(&run.trace);
        assert_only_suspect_is(&report, "thread_leak", &["churn"]);
        // 4 threads x 100 blocks x 512 bytes per epoch.
        let growth = report["suspects"][0]["growth_bytes_per_epoch"].as_f64().unwrap();
        assert_eq!(growth, 4.0 * 100.0 * 512.0, "{env:?}: {report:#}");
    }
}

/// Under glibc, libstdc++'s operator new and delete reach malloc and free;
/// jemalloc and tcmalloc, preloaded after the tracer, define operators of
/// their own that do not, and the tracer's stand in front of them. Each
/// of the twenty operators runs in the program.
#[test]
fn cxx_objects_are_recorded_whichever_allocator_defines_operator_new() {
    let program = compile("cxx_leak.cpp");
    for allocator in [None, Some(jemalloc()), Some(tcmalloc())] {
        let preload = preload_after_tracer(allocator.as_deref());
        let run = run_traced_with(&program, &[], &[("LD_PRELOAD", &preload)]).succeeded();
        assert_eq!(run.stdout(), "cxx_leak: bad_alloc caught\ncxx_leak: done\n", "{allocator:?}");
        assert_eq!(run.stderr(), "", "{allocator:?}");
        let report = report_json(&run.trace);
        assert_only_suspect_is(&report, "leak_nodes", &["balanced_work", "every_operator_balanced"]);
        let expected = [("leak_nodes", 200 * 488), ("leak_aligned", 16 * 1024), ("leak_aligned", 16 * 1000)];
        let found = suspects(&report);
        assert_eq!(found.len(), expected.len(), "{allocator:?}: {report:#}");
        for (i, (function, bytes)) in expected.into_iter().enumerate() {
            assert!(mentions(&found[i], function), "{allocator:?}: {:?}", found[i]);
            assert_eq!(report["suspects"][i]["growth_bytes_per_epoch"], bytes, "{allocator:?}: {report:#}");
        }
    }
}

/// A C++ program built without debug information, optimized or not: the
/// standard library's templates it instantiates (std::map's insertion, a
/// clone of it at -O2) are no own code, so its two registries are two
/// leaking lines, each named by the program's function, and so is the
/// verdict.
#[test]
fn cxx_without_debug_info_names_its_own_functions_not_the_standard_librarys() {
    for optimized in [true, false] {
        let program = compile_without_debug_info("cxx_registries.cpp", optimized);
        let run = run_traced(&program, &[]).succeeded();
        assert_eq!(run.stdout(), "cxx_registries: 6000 users, 2000 sessions\n");
        let report = report_json(&run.trace);
        let lines: Vec<(&str, u64)> = report["lines"]
            .as_array()
            .unwrap()
            .iter()
            .map(|line| {
                (
                    line["frame"]["function"].as_str().unwrap_or_default(),
                    line["growth_bytes_per_epoch"].as_u64().unwrap(),
                )
            })
            .collect();
        // A node of std::map<int, std::string> is 72 bytes.
        assert_eq!(
            lines,
            [("register_user()", 600 * 72), ("register_session()", 200 * 72)],
            "-O{}: {report:#}",
            if optimized { 2 } else { 0 }
        );
        let frames = report["suspects"][0]["frames"].as_array().unwrap();
        let std_frames: Vec<&serde_json::Value> =
            frames.iter().filter(|f| f["function"].as_str().unwrap().contains("std::")).collect();
        assert!(!std_frames.is_empty(), "the standard library's frames are shown: {frames:#?}");
        assert!(std_frames.iter().all(|f| f["own_code"] == false), "{frames:#?}");
        let message = report["verdict"]["message"].as_str().unwrap();
        assert!(message.starts_with("register_user() keeps about 42.2 KiB/epoch alive"), "{message}");
        // A suspect's own frame without a line says where its call lies,
        // for addr2line; the line it is summed under names the function.
        let text = report_text(&run.trace);
        let module = program.file_name().unwrap().to_string_lossy();
        let marked: Vec<&str> = text.lines().filter(|l| l.trim_start().starts_with("> register_user()")).collect();
        let own_frame = frames.iter().find(|f| f["own_code"] == true).expect("an own frame");
        let offset = own_frame["module_offset"].as_str().expect("a native frame's module offset");
        let at_call = format!("  ({module}+{offset})");
        assert!(marked.iter().any(|l| l.ends_with(&at_call)), "{at_call}: {text}");
        assert!(marked.iter().any(|l| l.ends_with(&format!("  ({module})"))), "{text}");
    }
}

/// A C++ library loaded with RTLD_LOCAL, as Python loads torch's and
/// numpy's extension modules, brings a libstdc++ that the global scope does
/// not hold: its objects are recorded all the same, and its new still
/// throws std::bad_alloc.
#[test]
fn cxx_objects_of_a_library_loaded_locally_are_recorded_and_its_new_still_throws() {
    let program = compile("loads_cxx_plugin.c");
    let plugin = compile_library("cxx_plugin.cpp");
    for allocator in [None, Some(jemalloc())] {
        let preload = preload_after_tracer(allocator.as_deref());
        let args = [plugin.to_str().unwrap()];
        let run = run_traced_with(&program, &args, &[("LD_PRELOAD", &preload)]).succeeded();
        assert_eq!(run.stdout(), "loads_cxx_plugin: bad_alloc caught\n", "{allocator:?}");
        let report = report_json(&run.trace);
        assert_eq!(suspects(&report).len(), 1, "{allocator:?}: {report:#}");
        assert!(mentions(&suspects(&report)[0], "plugin_leak"), "{allocator:?}: {report:#}");
        assert_eq!(report["suspects"][0]["growth_bytes_per_epoch"], 50 * 1008, "{allocator:?}: {report:#}");
    }
}

/// A plugin loaded, called and unloaded within every epoch: no snapshot
/// sees it loaded, yet its module is in the trace and its leak is named
/// by function, file and line.
#[test]
fn a_library_unloaded_between_two_snapshots_still_names_its_frames() {
    let program = compile("loads_and_unloads.c");
    let plugin = compile_library("unloaded_plugin.c");
    for env in [&[][..], &[FULL_CAPTURE]] {
        let run = run_traced_with(&program, &[plugin.to_str().unwrap()], env).succeeded();
        assert_eq!(run.stdout(), "loads_and_unloads: done\n");
        let report = report_json(&run.trace);
        let top = &report["suspects"][0];
        assert_eq!(top["growth_bytes_per_epoch"], 20 * 1500, "{env:?}: {report:#}");
        let own = top["frames"].as_array().unwrap().iter().find(|f| f["function"] == "unloaded_plugin_leak");
        let own = own.unwrap_or_else(|| panic!("{env:?}: no frame names the plugin's function: {top:#}"));
        assert!(own["file"].as_str().unwrap_or_default().ends_with("unloaded_plugin.c"), "{own}");
        assert_eq!(own["line"], line_of("programs/unloaded_plugin.c", "/* the plugin's leak */"), "{own}");
        assert_eq!(own["module"], plugin.display().to_string(), "{own}");
    }
}

/// A plugin whose debug information was split into a file beside it,
/// which its `.gnu_debuglink` names, is named by file and line as gdb
/// names it, the file found in the plugin's directory or its `.debug/`; a
/// debug file there that is not the one the link's CRC records (another
/// build's) gives no lines, and one warning.
#[test]
fn a_library_whose_debug_info_was_split_off_is_named_by_line_through_its_debuglink() {
    let program = compile("loads_and_unloads.c");
    let dir = tempfile::tempdir().unwrap();
    let plugin = split_debug_info(&compile_library("unloaded_plugin.c"), dir.path());
    let run = run_traced(&program, &[plugin.to_str().unwrap()]).succeeded();
    let leak_frame = |report: &serde_json::Value| {
        let top = &report["suspects"][0];
        let own = top["frames"].as_array().unwrap().iter().find(|f| f["function"] == "unloaded_plugin_leak");
        own.unwrap_or_else(|| panic!("no frame names the plugin's function: {top:#}")).clone()
    };
    let leak_line = line_of("programs/unloaded_plugin.c", "/* the plugin's leak */");
    let debug = debug_file_of(&plugin);
    let in_debug_directory = dir.path().join(".debug").join(debug.file_name().unwrap());
    for place in [&debug, &in_debug_directory] {
        if place != &debug {
            std::fs::create_dir(dir.path().join(".debug")).unwrap();
            std::fs::rename(&debug, place).unwrap();
        }
        let report = report_json(&run.trace);
        let own = leak_frame(&report);
        assert!(own["file"].as_str().unwrap_or_default().ends_with("unloaded_plugin.c"), "{}: {own}", place.display());
        assert_eq!(own["line"], leak_line, "{}: {own}", place.display());
        assert_eq!(report["warnings"], serde_json::json!([]), "{}", place.display());
    }
    binutils("objcopy", &["--remove-section=.comment".as_ref(), in_debug_directory.as_os_str()]);
    let report = report_json(&run.trace);
    let own = leak_frame(&report);
    assert_eq!((&own["file"], &own["line"]), (&serde_json::Value::Null, &serde_json::Value::Null), "{own}");
    let about_it: Vec<&serde_json::Value> = report["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|w| w.as_str().unwrap().contains(&*in_debug_directory.to_string_lossy()))
        .collect();
    assert_eq!(about_it.len(), 1, "{:#}", report["warnings"]);
}

/// A plugin unloaded after six epochs, and a second one loaded at its
/// addresses for seven more: each plugin's memory is named by its own
/// module, function and line, though the second's code lies where the
/// first's was.
#[test]
fn a_library_loaded_where_an_unloaded_one_was_names_only_its_own_stacks() {
    let program = compile("replaces_plugin.c");
    let (first, second) = (compile_library("first_plugin.c"), compile_library("second_plugin.c"));
    let line = line_of("programs/replaced_plugin.h", "/* the plugin's leak */");
    for env in [&[][..], &[FULL_CAPTURE]] {
        let run = run_traced_with(&program, &[first.to_str().unwrap(), second.to_str().unwrap()], env);
        assert_ne!(run.output.status.code(), Some(3), "the test needs the loader to reuse the range: {}", run.stderr());
        let run = run.succeeded();
        assert_eq!(run.stdout(), "replaces_plugin: the second plugin took the first's addresses\n");
        let report = report_json(&run.trace);
        // The first plugin leaks in epochs 0 to 5, the second from epoch 6
        // on. The first stopped leaking when it was closed: the second's
        // stacks are the suspects, and the live bytes at the end name each
        // with its own epochs' blocks (30,000 B an epoch): named the
        // first's, the second's would leave it none. By default the
        // warm-up, epoch 0, is sampled: the first's bytes are then an
        // estimate.
        let second_live = live_bytes_of(&run.trace, "second_plugin_leak");
        assert_eq!(second_live, 7 * 30_000, "{env:?}");
        if env == [FULL_CAPTURE] {
            assert_eq!(live_bytes_of(&run.trace, "first_plugin_leak"), 6 * 30_000);
        }
        let suspects = report["suspects"].as_array().unwrap();
        let of_its_epochs = suspects.iter().find(|s| {
            s["survivors"].as_array().unwrap().iter().all(|survivor| survivor["birth_epoch"].as_u64() >= Some(6))
        });
        let suspect = of_its_epochs.unwrap_or_else(|| panic!("{env:?}: no suspect born from epoch 6: {report:#}"));
        // The innermost frame, the allocator's trimmed: the plugin's own.
        let own = &suspect["frames"][0];
        assert_eq!(own["function"], "second_plugin_leak", "{env:?}: {suspect:#}");
        assert_eq!(own["module"], second.display().to_string(), "{env:?}: {own}");
        assert!(own["file"].as_str().unwrap_or_default().ends_with("replaced_plugin.h"), "{own}");
        assert_eq!(own["line"], line, "{own}");
    }
}

/// The bytes alive at the end of the run under `function`, as the live
/// flamegraph draws them.
fn live_bytes_of(trace: &Path, function: &str) -> u64 {
    let svg = trace.with_extension(format!("{function}.live.svg"));
    let drawn = std::process::Command::new(analyzer())
        .args(["flamegraph".as_ref(), trace.as_os_str(), "--weigh".as_ref(), "live".as_ref()])
        .args(["-o".as_ref(), svg.as_os_str()])
        .output()
        .unwrap();
    assert!(drawn.status.success(), "{drawn:?}");
    let drawing = std::fs::read_to_string(&svg).unwrap();
    let at = drawing.find(&format!("{function} (")).unwrap_or_else(|| panic!("{function} not drawn: {drawing}"));
    let count = drawing[at + function.len() + 2..].split(" bytes").next().unwrap();
    count.replace(',', "").parse().unwrap()
}

/// Two plugins laid out differently, loaded one after the other at the same
/// address: the encoder only opened and closed after the parser ran (a
/// version probe), each run in turn every epoch, or the parser loaded
/// again after the encoder. Each suspect is named by the function, line
/// and module of the plugin its stack ran through, whichever library
/// later took its addresses. After A-B-A the parser's first load and the
/// encoder stopped leaking when they were closed (nothing of theirs born in
/// the four epochs before the reference): the parser's second load, which
/// goes on, is ranked.
#[test]
fn each_plugin_at_a_reused_address_names_its_own_leak() {
    let program = compile("swaps_plugins.c");
    let (parser, encoder) = (compile_library("parser_plugin.c"), compile_library("encoder_plugin.c"));
    let plugins = swapped_plugins(parser.display().to_string(), encoder.display().to_string());
    let args = |mode| [mode, parser.to_str().unwrap(), encoder.to_str().unwrap()];
    for (mode, leaking) in
        [("probe", &["parser_token"][..]), ("alt", &["parser_token", "encoder_frame"]), ("aba", &["parser_token"])]
    {
        for env in [&[][..], &[FULL_CAPTURE]] {
            let run = run_traced_with(&program, &args(mode), env);
            assert_ne!(
                run.output.status.code(),
                Some(3),
                "the test needs the loader to reuse the range: {}",
                run.stderr()
            );
            let run = run.succeeded();
            assert_eq!(run.stdout(), format!("swaps_plugins {mode}: both plugins were loaded at the same address\n"));
            let report = report_json(&run.trace);
            let mut expected = leaking.to_vec();
            expected.sort_unstable();
            assert_eq!(leaking_plugins(&report, &plugins, &format!("{mode} {env:?}")), expected, "{report:#}");
            if mode == "aba" {
                // Stacks of the parser loaded again, after the encoder took
                // its addresses, named the encoder's would double its bytes.
                let (parser, encoder) =
                    (live_bytes_of(&run.trace, "parser_token"), live_bytes_of(&run.trace, "encoder_frame"));
                assert!(parser > 3 * encoder / 2, "{env:?}: parser {parser} B, encoder {encoder} B");
            }
            assert_eq!(report["verdict"]["kind"], "heap_leak", "{mode} {env:?}: {:#}", report["verdict"]);
        }
    }
}

/// A plugin of swaps_plugins.c: its leaking function, the module path the
/// report names, its source file and the line of its leak.
type SwappedPlugin = (&'static str, String, &'static str, u64);

/// The parser and encoder plugins, named by these module paths.
fn swapped_plugins(parser: String, encoder: String) -> [SwappedPlugin; 2] {
    [
        ("parser_token", parser, "parser_plugin.c", line_of("programs/parser_plugin.c", "/* the parser's leak */")),
        (
            "encoder_frame",
            encoder,
            "encoder_plugin.c",
            line_of("programs/encoder_plugin.c", "/* the encoder's leak */"),
        ),
    ]
}

/// The leaking functions of `plugins` the report's suspects name, sorted,
/// once each, after checking that every suspect is a plugin's leak named
/// by its module, file and line.
fn leaking_plugins(report: &serde_json::Value, plugins: &[SwappedPlugin], run: &str) -> Vec<&'static str> {
    let mut named = Vec::new();
    for suspect in report["suspects"].as_array().unwrap() {
        // The innermost frame, the allocator's trimmed: the plugin's own.
        let own = &suspect["frames"][0];
        let plugin = plugins.iter().find(|plugin| own["function"] == plugin.0);
        let (function, module, source, line) =
            plugin.unwrap_or_else(|| panic!("{run}: not a plugin's leak: {suspect:#}"));
        assert_eq!(own["module"], *module, "{run}: {own}");
        assert!(own["file"].as_str().unwrap_or_default().ends_with(source), "{run}: {own}");
        assert_eq!(own["line"], *line, "{run}: {own}");
        named.push(*function);
    }
    named.sort_unstable();
    named.dedup();
    named
}

/// Plugins loaded by a relative path (`dlopen("./libparser_plugin.so")`,
/// as Python's `ctypes.CDLL("./libfeat.so")` loads), from the directory
/// they lie in, in turn at the same address each epoch: the trace names
/// them by their absolute paths, so that the report, read from another
/// directory, names each leak by its plugin's function, file and line, as
/// code of the program's own (the plugins lie beside it).
#[test]
fn plugins_loaded_by_a_relative_path_are_named_wherever_the_report_is_read() {
    let program = compile("swaps_plugins.c");
    let (parser, encoder) = (compile_library("parser_plugin.c"), compile_library("encoder_plugin.c"));
    let (mut command, dir) = traced_command(&program);
    // The analyzer below runs in the tests' directory, not this one.
    command.current_dir(parser.parent().unwrap()).args(["alt", "./libparser_plugin.so", "./libencoder_plugin.so"]);
    let output = command.output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_ne!(output.status.code(), Some(3), "the test needs the loader to reuse the range: {stderr}");
    assert!(output.status.success(), "{}: {stderr}", output.status);
    let trace = dir.path().join("trace.bin");
    let absolute = |library: &Path| std::fs::canonicalize(library).unwrap().display().to_string();
    let plugins = swapped_plugins(absolute(&parser), absolute(&encoder));
    let recorded: Vec<String> = read_trace(&trace)
        .0
        .into_iter()
        .filter_map(|record| match record {
            Record::Module(module) if module.path.ends_with("_plugin.so") => Some(module.path),
            _ => None,
        })
        .collect();
    assert!(!recorded.is_empty(), "no plugin's module recorded");
    assert!(recorded.iter().all(|path| plugins.iter().any(|plugin| *path == plugin.1)), "{recorded:?}");
    let report = report_json(&trace);
    assert_eq!(leaking_plugins(&report, &plugins, "alt"), ["encoder_frame", "parser_token"], "{report:#}");
    for suspect in report["suspects"].as_array().unwrap() {
        assert_eq!(suspect["frames"][0]["own_code"], true, "{suspect:#}");
    }
}

/// The first `operator new` looks up the operators' next definitions
/// (`dlopen` of the caller's object, `dladdr`, lookups in its scope): what
/// that allocates is the tracer's, not the program's, and no recorded stack
/// holds a frame of the tracer's own.
#[test]
fn the_tracers_own_lookups_for_operator_new_are_not_recorded() {
    let program = compile("loads_cxx_plugin.c");
    let plugin = compile_library("cxx_plugin.cpp");
    let run = run_traced_with(&program, &[plugin.to_str().unwrap()], &[FULL_CAPTURE]).succeeded();
    let (records, _) = read_trace(&run.trace);
    let own: Vec<(u64, u64)> = records
        .iter()
        .filter_map(|record| match record {
            Record::Module(module) if module.path.ends_with("libtracer.so") => Some(module.segments.clone()),
            _ => None,
        })
        .flatten()
        .collect();
    let inside_tracer: Vec<u64> = records
        .iter()
        .filter_map(|record| match record {
            Record::StackNodes(nodes) => Some(nodes.nodes.iter()),
            _ => None,
        })
        .flatten()
        .filter_map(|node| match node.frame {
            Frame::Native(address) => Some(address),
            _ => None,
        })
        .filter(|&address| own.iter().any(|&(start, end)| start <= address && address < end))
        .collect();
    assert!(inside_tracer.is_empty(), "return addresses inside libtracer.so {own:x?}: {inside_tracer:x?}");
}

#[test]
fn rss_growth_outside_the_heap_is_said_plainly() {
    let program = compile("shared_memory.c");
    let run = run_traced(&program, &["raw"]).succeeded();
    let report = report_json(&run.trace);
    assert!(suspects(&report).is_empty(), "a heap or mapping site was blamed: {report:#}");
    // Nor malloc's retention: its kept memory does not grow here.
    assert_eq!(report["verdict"]["kind"], "growth_outside_heap", "{report:#}");
    let message = report["verdict"]["message"].as_str().unwrap();
    assert!(message.contains("outside what the tracer sees"), "{message}");
}

/// The same memfd pages mapped through mmap: shared memory the program
/// keeps, ranked at the line that maps it.
#[test]
fn shared_memory_kept_is_ranked_at_the_line_that_maps_it() {
    let run = run_traced(&compile("shared_memory.c"), &[]).succeeded();
    let report = report_json(&run.trace);
    assert_eq!(report["verdict"]["kind"], "heap_leak", "{report:#}");
    let top = &report["suspects"][0];
    assert_eq!(top["memory"], "shared", "{top:#}");
    assert_eq!(top["growth_bytes_per_epoch"], 16 << 20, "{top:#}");
    assert!(top["explanation"].is_null(), "no DataLoader here: {top:#}");
    assert!(mentions(&suspects(&report)[0], "map_shared"), "{top:#}");
    let line = &report["lines"][0];
    assert_eq!((&line["memory"], &line["frame"]["function"]), (&"shared".into(), &"map_shared".into()), "{line:#}");
    let message = report["verdict"]["message"].as_str().unwrap();
    assert!(message.contains("16.0 MiB/epoch of shared memory alive"), "{message}");
}

/// A shared mapping grown by mremap: the pages it adds are shared memory
/// as well, ranked at the line that grows it.
#[test]
fn shared_memory_grown_by_mremap_stays_shared_memory() {
    let run = run_traced(&compile("shared_memory.c"), &["grow"]).succeeded();
    let report = report_json(&run.trace);
    assert_eq!(report["verdict"]["kind"], "heap_leak", "{report:#}");
    let ranked = report["suspects"].as_array().unwrap();
    assert_eq!(ranked.len(), 2, "the mapping and its growth: {report:#}");
    for suspect in ranked {
        assert_eq!(suspect["memory"], "shared", "{suspect:#}");
        assert_eq!(suspect["growth_bytes_per_epoch"], 8 << 20, "{suspect:#}");
    }
    let functions = suspects(&report);
    assert!(functions.iter().any(|s| mentions(s, "grow_shared")), "{report:#}");
    assert!(functions.iter().any(|s| mentions(s, "map_shared")), "{report:#}");
}

/// Freed memory that malloc keeps (a new arena per thread, each holding
/// 4 MB freed between blocks still in use) is told apart from memory the
/// tracer cannot see, by malloc's own count of the free memory it holds.
#[test]
fn freed_memory_that_malloc_keeps_is_said_plainly() {
    let program = compile("fragmented.c");
    let run = run_traced(&program, &[]).succeeded();
    let report = report_json(&run.trace);
    assert!(suspects(&report).is_empty(), "a heap or mapping site was blamed: {report:#}");
    assert_eq!(report["verdict"]["kind"], "allocator_retention", "{report:#}");
    let verdict = &report["verdict"];
    let (kept, epochs) =
        (verdict["allocator_free_growth_bytes"].as_i64().unwrap(), verdict["epochs"].as_i64().unwrap());
    // Of the 4 MB freed an epoch, what did not merge back into free space
    // the arena could hand back.
    assert!((3 << 19..5 << 20).contains(&(kept / epochs)), "{kept} over {epochs} epochs");
    let message = verdict["message"].as_str().unwrap();
    assert!(message.contains("malloc kept instead of handing it back"), "{message}");
    let epochs = report["epochs"].as_array().unwrap();
    assert!(epochs.iter().all(|e| e["allocator_free_bytes"].as_u64().unwrap() > 0), "{epochs:#?}");
}

/// Freed memory that malloc_trim handed back is not blamed on malloc,
/// though glibc still counts it as its free space: the growth is thread
/// stacks, outside what the tracer sees. Also where malloc_trim is looked
/// up on libc's handle, as Python's ctypes does.
#[test]
fn freed_memory_that_malloc_trim_handed_back_is_not_called_kept() {
    let program = compile("trimmed.c");
    for args in [&[][..], &["handle"]] {
        let run = run_traced(&program, args).succeeded();
        let report = report_json(&run.trace);
        assert!(suspects(&report).is_empty(), "{args:?}: a heap or mapping site was blamed: {report:#}");
        let verdict = &report["verdict"];
        assert_eq!(verdict["kind"], "growth_outside_heap", "{args:?}: {report:#}");
        let epochs = report["epochs"].as_array().unwrap();
        let (rss, kept): (Vec<u64>, Vec<u64>) = epochs
            .iter()
            .map(|e| (e["rss_bytes"].as_u64().unwrap(), e["allocator_free_bytes"].as_u64().unwrap()))
            .unzip();
        // Each epoch's batch, up to 32 MB, was freed and trimmed before its mark.
        assert!(kept.iter().all(|&bytes| bytes < 1 << 20), "{args:?}: malloc free {kept:?}, RSS {rss:?}");
    }
}

/// RSS that grows by the pages of a file the program maps and reads, 4 MiB
/// more an epoch, is told as such: no site is blamed.
#[test]
fn pages_of_a_mapped_file_are_said_plainly() {
    let program = compile("mapped_file.c");
    let scratch = tempfile::tempdir().unwrap();
    let run = run_traced(&program, &[scratch.path().to_str().unwrap()]).succeeded();
    let report = report_json(&run.trace);
    assert!(suspects(&report).is_empty(), "a heap or mapping site was blamed: {report:#}");
    let verdict = &report["verdict"];
    assert_eq!(verdict["kind"], "file_pages", "{report:#}");
    let (files, epochs) = (verdict["file_growth_bytes"].as_i64().unwrap(), verdict["epochs"].as_i64().unwrap());
    assert_eq!(files / epochs, 4 << 20, "{files} over {epochs} epochs");
    let message = verdict["message"].as_str().unwrap();
    assert!(message.contains("pages of mapped files, such as a dataset read through np.memmap"), "{message}");
    let epochs = report["epochs"].as_array().unwrap();
    let pages: Vec<u64> = epochs.iter().map(|e| e["rss_file_bytes"].as_u64().unwrap()).collect();
    assert!(pages.windows(2).take(6).all(|w| w[1] >= w[0] + (4 << 20)), "{pages:?}");
    assert!(report_text(&run.trace).contains("  file pages  "), "the epoch table shows them");
}

/// A file on disk mapped shared and writable, 4 MiB more of it written an
/// epoch through a mapping of the whole file made (or grown by mremap)
/// each epoch and kept: the pages are the file's, told as such, and no
/// site is blamed for shared memory.
#[test]
fn a_file_on_disk_mapped_shared_and_written_is_no_shared_memory() {
    let program = compile("mapped_shared_file.c");
    // Under the target directory, on the disk's filesystem: the program
    // checks that it is not tmpfs.
    let scratch = tempfile::tempdir_in(repo_root().join("target")).unwrap();
    for mode in [None, Some("grow")] {
        let args: Vec<&str> = [scratch.path().to_str()].into_iter().chain([mode]).flatten().collect();
        let run = run_traced(&program, &args);
        assert_ne!(run.output.status.code(), Some(3), "the test needs a file on disk: {}", run.stderr());
        let run = run.succeeded();
        assert_eq!(run.stdout(), "mapped_shared_file: 8 epochs, 32 MiB written\n");
        let report = report_json(&run.trace);
        assert!(suspects(&report).is_empty(), "{mode:?}: a heap or mapping site was blamed: {report:#}");
        assert_eq!(report["verdict"]["kind"], "file_pages", "{mode:?}: {report:#}");
    }
}

/// One sample per 16 KiB allocated on average: the leak (about 215 KiB per
/// epoch) is sampled many times an epoch, the decoys' bytes are estimated.
const SAMPLING: (&str, &str) = ("TRACER_SAMPLE_BYTES", "16k");

#[test]
fn sampling_still_names_the_planted_leak_first_and_no_decoy() {
    let program = compile("leaky.c");
    let run = run_traced_with(&program, &["8"], &[SAMPLING]).succeeded();
    assert!(!run.stderr().contains("tracer:"), "sampling the whole run is no conflict: {}", run.stderr());
    let report = report_json(&run.trace);
    let sampling = report["process"]["settings"]["sampling"].as_str().unwrap();
    assert!(sampling.starts_with("Poisson by bytes, one sample per 16384 bytes"), "{sampling}");
    assert!(report["notes"].as_array().unwrap().is_empty(), "sampling never ends");
    assert_only_suspect_is(&report, "leak_per_epoch", &DECOYS);
    // The estimate is unbiased; with ~13 samples an epoch it lands near the truth.
    let growth = report["suspects"][0]["growth_bytes_per_epoch"].as_f64().unwrap();
    assert!((100e3..=400e3).contains(&growth), "estimated growth {growth} for about 220 KB");
}

#[test]
fn sampling_threads_still_names_the_leaking_site() {
    let program = compile("threads.c");
    let run = run_traced_with(&program, &[], &[SAMPLING]).succeeded();
    assert_only_suspect_is(&report_json(&run.trace), "thread_leak", &["churn"]);
}

/// The warm-up sampled at 16 KiB, asked for beside whole-run sampling.
const WARM_UP_SAMPLING: (&str, &str) = ("TRACER_WARMUP_SAMPLE_BYTES", "16k");

/// Blocks the planted leak keeps per epoch, and their bytes.
const LEAKED_PER_EPOCH: (u64, u64) = (200, (1000 + 1199) * 200 / 2);

/// Each survivor is one epoch's leak, counted exactly.
fn assert_exact_survivors<'a>(survivors: impl IntoIterator<Item = &'a serde_json::Value>) {
    for survivor in survivors {
        assert_eq!((&survivor["count"], &survivor["bytes"]), (&LEAKED_PER_EPOCH.0.into(), &LEAKED_PER_EPOCH.1.into()));
    }
}

/// The one line the tracer printed on `stderr`.
fn only_warning(stderr: &str) -> &str {
    let warnings: Vec<_> = stderr.lines().filter(|l| l.starts_with("tracer:")).collect();
    assert_eq!(warnings.len(), 1, "{stderr}");
    warnings[0]
}

#[test]
fn by_default_the_warm_up_is_sampled_and_every_later_epoch_counted_exactly() {
    let program = compile("leaky.c");
    let run = run_traced(&program, &["8"]).succeeded();
    assert_eq!(run.stdout(), "leaky: 8 epochs, 1600 blocks leaked\n");
    assert!(!run.stderr().contains("tracer:"), "the default says nothing: {}", run.stderr());
    let report = report_json(&run.trace);
    let sampling = report["process"]["settings"]["sampling"].as_str().unwrap();
    assert!(sampling.starts_with("Poisson by bytes, one sample per 65536 bytes"), "{sampling}");
    assert!(sampling.contains("until the warm-up (the first epoch) ends"), "{sampling}");
    let notes = report["notes"].as_array().unwrap();
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert!(notes[0]["text"].as_str().unwrap().contains("every allocation is recorded from epoch 1 on"), "{notes:?}");
    assert_only_suspect_is(&report, "leak_per_epoch", &DECOYS);
    let survivors = report["suspects"][0]["survivors"].as_array().unwrap();
    let exact: Vec<_> = survivors.iter().filter(|s| s["birth_epoch"] != 0).collect();
    assert_eq!(exact.len(), 7, "{survivors:?}");
    assert_exact_survivors(exact);
}

#[test]
fn a_warm_up_rate_of_zero_records_every_allocation_from_the_start() {
    let program = compile("leaky.c");
    let run = run_traced_with(&program, &["8"], &[FULL_CAPTURE]).succeeded();
    let report = report_json(&run.trace);
    assert_eq!(report["process"]["settings"]["sampling"], "every allocation recorded");
    assert!(report["notes"].as_array().unwrap().is_empty(), "no warm-up sampled: {report:#}");
    assert_only_suspect_is(&report, "leak_per_epoch", &DECOYS);
    let survivors = report["suspects"][0]["survivors"].as_array().unwrap();
    assert_eq!(survivors.len(), 8, "epoch 0's survivors too: {survivors:?}");
    assert_exact_survivors(survivors);
}

#[test]
fn an_unreadable_warm_up_rate_is_said_once_and_the_default_kept() {
    let program = compile("leaky.c");
    let run = run_traced_with(&program, &["8"], &[("TRACER_WARMUP_SAMPLE_BYTES", "lots")]).succeeded();
    let stderr = run.stderr();
    let warning = only_warning(&stderr);
    assert!(warning.contains("TRACER_WARMUP_SAMPLE_BYTES=\"lots\" is not a number of bytes"), "{stderr}");
    assert!(warning.ends_with("using the default, 65536"), "{stderr}");
    let report = report_json(&run.trace);
    let sampling = report["process"]["settings"]["sampling"].as_str().unwrap();
    assert!(sampling.starts_with("Poisson by bytes, one sample per 65536 bytes"), "{sampling}");
    assert_only_suspect_is(&report, "leak_per_epoch", &DECOYS);
}

#[test]
fn both_sampling_variables_sample_the_whole_run_and_say_so() {
    let program = compile("leaky.c");
    let run = run_traced_with(&program, &["8"], &[WARM_UP_SAMPLING, SAMPLING]).succeeded();
    let stderr = run.stderr();
    assert!(
        only_warning(&stderr).contains("both TRACER_SAMPLE_BYTES and TRACER_WARMUP_SAMPLE_BYTES are set"),
        "{stderr}"
    );
    let report = report_json(&run.trace);
    let sampling = report["process"]["settings"]["sampling"].as_str().unwrap();
    assert!(sampling.ends_with("(TRACER_SAMPLE_BYTES); counts and bytes are estimates"), "{sampling}");
    assert!(report["notes"].as_array().unwrap().is_empty(), "sampling never ends");
}

/// The suspect whose own-code frame is `function` at `line`.
fn suspect_at<'a>(report: &'a serde_json::Value, function: &str, line: u64) -> &'a serde_json::Value {
    report["suspects"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| {
            let own = s["frames"].as_array().unwrap().iter().find(|f| f["own_code"] == true);
            own.is_some_and(|f| f["function"] == function && f["line"] == line)
        })
        .unwrap_or_else(|| panic!("no suspect at {function}:{line}: {report:#}"))
}

#[test]
fn anonymous_mappings_left_behind_are_ranked_as_mapped_memory() {
    let program = compile("mapped_leak.c");
    let run = run_traced(&program, &[]).succeeded();
    assert_eq!(run.stdout(), "mapped_leak: done\n", "the tracer changed the program's output");
    let report = report_json(&run.trace);
    let source = "programs/mapped_leak.c";
    const KIB: u64 = 1024;

    // 512 KiB mapped, 64 KiB unmapped at each end and a page in the middle.
    let top = &report["suspects"][0];
    assert_eq!(top["memory"], "mapped", "{top:#}");
    assert_eq!(top["growth_bytes_per_epoch"], 380 * KIB, "{top:#}");
    assert_eq!(top["live_count"], 8, "one mapping per epoch however it was cut: {top:#}");
    assert_eq!(top["frames"][0]["function"], "[anonymous mmap]");
    let leak_line = line_of(source, "MAP_ANONYMOUS_PAGES(512 * KIB");
    assert_eq!(suspect_at(&report, "leak_mapped_pages", leak_line)["stack_id"], top["stack_id"]);

    // mremap moved 32 KiB onto a reservation and grew them by 64 KiB; a page
    // unmapped at the new place comes off the moved part.
    let grown = |needle: &str| &suspect_at(&report, "grow_mapping", line_of(source, needle))["growth_bytes_per_epoch"];
    assert_eq!(*grown("MAP_ANONYMOUS_PAGES(32 * KIB"), 28 * KIB);
    assert_eq!(*grown("mremap(region, 32 * KIB"), 64 * KIB);
    let shrunk = suspect_at(&report, "shrink_mapping", line_of(source, "MAP_ANONYMOUS_PAGES(128 * KIB"));
    assert_eq!((&shrunk["memory"], &shrunk["growth_bytes_per_epoch"]), (&"mapped".into(), &(48 * KIB).into()));

    // glibc maps the big block itself: heap, and counted once.
    let block = suspect_at(&report, "leak_big_block", line_of(source, "malloc(256 * KIB)"));
    assert_eq!((&block["memory"], &block["growth_bytes_per_epoch"]), (&"heap".into(), &(256 * KIB).into()));
    assert_eq!(report["suspect_count"], 5, "{report:#}");
    for decoy in ["scratch_mapping", "rotate_mapping", "map_file_pages"] {
        assert!(!suspects(&report).iter().any(|s| mentions(s, decoy)), "decoy {decoy} reported: {report:#}");
    }

    // Each settled epoch adds the leaked mappings to the mapped total and the block to the heap only.
    let epoch = |i: usize, field: &str| report["epochs"][i][field].as_u64().unwrap();
    assert_eq!(epoch(4, "mapped_bytes") - epoch(3, "mapped_bytes"), (380 + 28 + 64 + 48) * KIB);
    assert_eq!(epoch(4, "live_bytes") - epoch(3, "live_bytes"), 256 * KIB);
    assert_eq!(epoch(4, "mapped_count") - epoch(3, "mapped_count"), 4);
    assert_eq!(report["verdict"]["kind"], "heap_leak");
    assert_eq!(report["verdict"]["mapped_growth_bytes"], 6 * (380 + 28 + 64 + 48) * KIB);
    let message = report["verdict"]["message"].as_str().unwrap();
    let at = format!("leak_mapped_pages (mapped_leak.c:{leak_line})");
    assert!(message.starts_with(&format!("{at} keeps about 380 KiB/epoch of anonymous mapped memory")), "{message}");

    let svg = run.dir.path().join("leaks.svg");
    let output =
        std::process::Command::new(analyzer()).arg("report").arg(&run.trace).arg("-o").arg(&svg).output().unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let text = String::from_utf8_lossy(&output.stdout);
    // The warm-up's mapping was drawn by its bytes: its share is said to be an estimate.
    let live = "live now 2.97 MiB (380 KiB of it estimated from the warm-up's samples) in 8 mappings";
    assert!(text.contains(&format!("#1  +380 KiB/epoch   mapped memory   {live}")), "{text}");
    assert!(std::fs::read_to_string(&svg).unwrap().contains("[anonymous mmap]"), "the flamegraph names the mappings");
}

/// Hundreds of 16 KiB mappings an epoch, most of them unmapped within it:
/// recorded exactly without sampling; with it, drawn by their bytes as
/// allocations are, the 1 MiB an epoch kept is estimated, and a 4 MiB
/// mapping, sure to be drawn, counts for itself.
#[test]
fn small_mappings_are_sampled_by_their_bytes_and_large_ones_stay_exact() {
    let program = compile("mapped_chunks.c");
    let suspect = |report: &serde_json::Value, function: &str| {
        let suspect = report["suspects"].as_array().unwrap().iter().find(|s| mentions(&suspect_functions(s), function));
        let suspect = suspect.unwrap_or_else(|| panic!("no suspect in {function}: {report:#}")).clone();
        assert_eq!(suspect["memory"], "mapped", "{suspect:#}");
        (suspect["growth_bytes_per_epoch"].as_f64().unwrap(), suspect["live_count"].as_u64().unwrap())
    };
    for (env, exact) in [(FULL_CAPTURE, true), (("TRACER_SAMPLE_BYTES", "64k"), false)] {
        let run = run_traced_with(&program, &[], &[env]).succeeded();
        assert_eq!(run.stdout(), "mapped_chunks: done\n");
        let report = report_json(&run.trace);
        assert_eq!(report["suspect_count"], 2, "{report:#}");
        assert_eq!(suspect(&report, "keep_big_mapping"), (f64::from(4 << 20), 8), "{env:?}");
        let (chunks, live) = suspect(&report, "map_chunk");
        if exact {
            assert_eq!((chunks, live), (f64::from(1 << 20), 8 * 64));
        } else {
            // About 14 of the 64 kept chunks drawn an epoch, each standing
            // for 1 / (1 - exp(-16/64)) = 4.52 chunks, 5 mappings.
            assert!((0.5e6..=1.6e6).contains(&chunks), "estimated {chunks} for 1 MiB an epoch");
            assert!(live > 0 && live % 5 == 0, "{live} live chunks, counted 5 at a time");
        }
    }
}

/// Mappings made in the warm-up and grown by mremap a fixed amount every
/// epoch after it: the pages each grows by are the mremap call's own, at
/// its line, exact after the warm-up whether or not the warm-up drew the
/// mapping (and standing for no more than themselves if it did), and of
/// the mapping's kind; sampled for the whole run, drawn by their own bytes.
#[test]
fn mappings_grown_by_mremap_after_the_warm_up_are_ranked_at_the_mremap() {
    let program = compile("mapped_growth.c");
    let source = "programs/mapped_growth.c";
    const KIB: f64 = 1024.0;
    let grown = [
        ("grow_page", "/* grows a page */", 256.0 * KIB, "mapped"),
        ("grow_block", "/* grows a block */", 64.0 * KIB, "mapped"),
        ("grow_shared", "/* grows shared memory */", 128.0 * KIB, "shared"),
    ];
    for (env, exact) in [(None, true), (Some(FULL_CAPTURE), true), (Some(("TRACER_SAMPLE_BYTES", "16k")), false)] {
        let run = run_traced_with(&program, &[], env.as_slice()).succeeded();
        assert_eq!(
            run.stdout(),
            format!("mapped_growth: {} {} {}\n", 4096 + 7 * 256 * 1024, 64 * 1024 * 8, 4096 + 7 * 128 * 1024)
        );
        let report = report_json(&run.trace);
        for (function, needle, bytes, memory) in grown {
            let suspect = suspect_at(&report, function, line_of(source, needle));
            assert_eq!(suspect["memory"], memory, "{env:?}: {suspect:#}");
            let estimate = suspect["growth_bytes_per_epoch"].as_f64().unwrap();
            if exact {
                assert_eq!(estimate, bytes, "{env:?} {function}: {suspect:#}");
            } else {
                // 256 and 128 KiB are always drawn at 16 KiB, each standing
                // for about itself; 64 KiB is drawn 98 times in 100.
                assert!((0.5 * bytes..=1.5 * bytes).contains(&estimate), "{env:?} {function}: {estimate} for {bytes}");
            }
        }
        if exact {
            assert_eq!(report["suspect_count"], 3, "{env:?}: {report:#}");
        }
    }
}

/// A line allocating along two paths (strdup's, and malloc's straight
/// from the line) leaves two suspects, ranked around a third leak of a
/// size between theirs; the report sums the two as one leaking line,
/// ranked first, and the verdict names it.
#[test]
fn suspects_of_one_line_are_summed_and_the_verdict_names_the_line() {
    let program = compile("one_line.c");
    let run = run_traced_with(&program, &["8"], &[FULL_CAPTURE]);
    assert_eq!(run.stdout(), "one_line: 8 epochs, 800 pairs and 800 blocks kept\n");
    let report = report_json(&run.trace);
    assert_eq!(suspects(&report).len(), 3, "{report:#}");
    let lines = report["lines"].as_array().expect("lines");
    assert_eq!(lines.len(), 2, "{lines:#?}");
    let growth = |v: &serde_json::Value| v["growth_bytes_per_epoch"].as_u64().unwrap();
    let (pairs, small) = (&lines[0], &lines[1]);
    assert_eq!(pairs["frame"]["function"], "keep_pairs");
    assert_eq!(pairs["frame"]["line"].as_u64(), Some(line_of("programs/one_line.c", "the leaking line")));
    assert_eq!(growth(pairs), 100 * (600 + 1000), "every pair of a settled epoch, exactly");
    assert_eq!(pairs["live_count"], 2 * 8 * 100);
    let ranks: Vec<u64> = pairs["suspect_ranks"].as_array().unwrap().iter().map(|r| r.as_u64().unwrap()).collect();
    assert_eq!(ranks, [1, 3], "the 1000-byte and the 600-byte strings, around the 800-byte leak");
    assert_eq!(small["frame"]["function"], "keep_small");
    assert_eq!(growth(small), 100 * 800);
    assert_eq!(report["suspects_in_lines"], 3);
    let verdict = report["verdict"]["message"].as_str().unwrap();
    let at = format!("keep_pairs (one_line.c:{})", line_of("programs/one_line.c", "the leaking line"));
    assert!(verdict.starts_with(&format!("{at} keeps about 156 KiB/epoch alive")), "{verdict}");
    // The other line's 800-byte strings too: 240,000 bytes an epoch in all.
    assert!(verdict.contains("through 2 stacks, 3 suspects in all keeping about 234 KiB/epoch"), "{verdict}");
}

/// One line with two calls of malloc, the first called in epochs 0 and 1,
/// the second from epoch 2 on: two stack ids whose frames symbolize the
/// same. Apart, the first would leave survivors of one settled epoch, no
/// suspect, and the second a suspect 20% low; together they are one
/// suspect with every epoch's blocks.
#[test]
fn two_calls_on_one_line_leaking_in_turn_are_one_suspect_with_all_the_bytes() {
    const BLOCK: u64 = 3000;
    const PER_EPOCH: u64 = 100;
    let program = compile("split_line.c");
    let run = run_traced_with(&program, &["8"], &[FULL_CAPTURE]).succeeded();
    assert_eq!(run.stdout(), "split_line: 8 epochs, 200 blocks kept from the first call, 600 from the second\n");

    // The birth epochs of each stack that allocated blocks of BLOCK bytes.
    let mut births: std::collections::BTreeMap<u32, std::collections::BTreeSet<u32>> = Default::default();
    for record in read_trace(&run.trace).0 {
        if let Record::Snapshot(snapshot) = record {
            for c in snapshot.counters {
                if c.allocated_count >= PER_EPOCH && c.allocated_bytes == c.allocated_count * BLOCK {
                    births.entry(c.stack).or_default().insert(c.birth_epoch);
                }
            }
        }
    }
    let mut epochs_apart: Vec<Vec<u32>> = births.values().map(|epochs| epochs.iter().copied().collect()).collect();
    epochs_apart.sort();
    assert_eq!(epochs_apart, [vec![0, 1], vec![2, 3, 4, 5, 6, 7]], "two stack ids, one for each call: {births:?}");

    let report = report_json(&run.trace);
    assert_eq!(suspects(&report).len(), 1, "{report:#}");
    let top = &report["suspects"][0];
    let mut ids = vec![top["stack_id"].as_u64().unwrap()];
    ids.extend(top["other_stack_ids"].as_array().unwrap().iter().map(|id| id.as_u64().unwrap()));
    ids.sort_unstable();
    let traced: Vec<u64> = births.keys().map(|&id| u64::from(id)).collect();
    assert_eq!(ids, traced, "the suspect counts both stacks");
    assert_eq!(top["growth_bytes_per_epoch"], PER_EPOCH * BLOCK, "every settled epoch's blocks: {top:#}");
    assert_eq!(top["settled_epochs_with_survivors"], 5, "{top:#}");
    assert_eq!((&top["live_bytes"], &top["live_count"]), (&(8 * PER_EPOCH * BLOCK).into(), &(8 * PER_EPOCH).into()));
    let line = line_of("programs/split_line.c", "the leaking line");
    let verdict = report["verdict"]["message"].as_str().unwrap();
    assert!(
        verdict.starts_with(&format!("keep_blocks (split_line.c:{line}) keeps about 293 KiB/epoch alive")),
        "{verdict}"
    );
    assert!(!verdict.contains("through 2 stacks"), "one site, not two stacks: {verdict}");
    let text = report_text(&run.trace);
    assert!(text.contains(&format!("   stacks {}, {}\n", ids[0], ids[1])), "the suspect names both stacks: {text}");
}

/// A helper allocating for three callers, one of which keeps what it gets:
/// the verdict names the helper's line and the caller the leak came
/// through. (One leaking through each of its callers is named alone: see
/// the next test.)
#[test]
fn a_helper_shared_by_several_callers_is_named_with_the_caller_that_leaks() {
    let run = run_traced(&compile("shared_helper.c"), &[]).succeeded();
    let report = report_json(&run.trace);
    let verdict = report["verdict"]["message"].as_str().unwrap();
    let helper = line_of("programs/shared_helper.c", "the helper's allocation");
    let caller = line_of("programs/shared_helper.c", "the caller that keeps them");
    let named = format!(
        "make_record (shared_helper.c:{helper}), called from ingest_batch (shared_helper.c:{caller}), keeps about 256 KiB/epoch"
    );
    assert!(verdict.starts_with(&named), "{verdict}");
    let line = &report["lines"][0];
    assert_eq!(
        (&line["caller"]["function"], &line["caller"]["line"]),
        (&"ingest_batch".into(), &caller.into()),
        "{line:#}"
    );
}

/// One helper leaking 1000-byte blocks, called from one caller in even
/// epochs and from another in odd ones: two stacks that differ above the
/// line, the odd epochs' with survivors of 3 of the 5 settled epochs, the
/// even epochs' of 2, each a suspect alone. The line counts both, with the
/// whole leak's bytes.
#[test]
fn a_helper_leaking_from_callers_in_turn_is_one_line_with_all_the_bytes() {
    const LEAK_PER_EPOCH: u64 = 50 * 1000;
    let program = compile("alt_callers.c");
    let run = run_traced_with(&program, &["8"], &[FULL_CAPTURE]).succeeded();
    assert_eq!(run.stdout(), "alt_callers: 8 epochs, 400 blocks kept\n");
    let report = report_json(&run.trace);
    assert_eq!(report["analysis"]["settled_birth_epochs"], serde_json::json!([1, 5]), "{report:#}");
    let lines = report["lines"].as_array().expect("lines");
    assert_eq!(lines.len(), 1, "{lines:#?}");
    let line = &lines[0];
    let leaking_line = line_of("programs/alt_callers.c", "the leaking line");
    assert_eq!((&line["frame"]["function"], &line["frame"]["line"]), (&"cache_result".into(), &leaking_line.into()));
    assert_eq!(line["growth_bytes_per_epoch"], LEAK_PER_EPOCH, "every settled epoch's blocks, exactly: {line:#}");
    assert_eq!((&line["live_bytes"], &line["live_count"]), (&(8 * LEAK_PER_EPOCH).into(), &400.into()));
    assert!(line.get("caller").is_none(), "leaking through each caller, it is named alone: {line:#}");
    let callers: Vec<(String, u64, bool)> = report["suspects"]
        .as_array()
        .expect("suspects")
        .iter()
        .map(|s| {
            let caller = suspect_functions(s).into_iter().skip_while(|f| f != "cache_result").nth(1);
            let settled = s["settled_epochs_with_survivors"].as_u64().unwrap();
            (caller.unwrap_or_default(), settled, s["piles_up_only_with_line"].as_bool().unwrap())
        })
        .collect();
    let expected = [("eval_step".to_string(), 3, false), ("train_step".to_string(), 2, false)];
    assert_eq!(callers, expected, "{report:#}");
    let verdict = report["verdict"]["message"].as_str().unwrap();
    // Through each of its callers: the helper is the leak, named alone.
    let named = format!(
        "cache_result (alt_callers.c:{leaking_line}) keeps about 48.8 KiB/epoch alive (391 KiB now) through 2 stacks;"
    );
    assert!(verdict.starts_with(&named), "{verdict}");
}

/// alt_callers.c run for `epochs` in `mode`, every allocation recorded:
/// its report, whose one line is the helper's, with that line's growth
/// per epoch, and the verdict.
fn alt_callers_line(epochs: &str, mode: &str, blocks_kept: u32) -> (serde_json::Value, u64, String) {
    let run = run_traced_with(&compile("alt_callers.c"), &[epochs, mode], &[FULL_CAPTURE]).succeeded();
    assert_eq!(run.stdout(), format!("alt_callers: {epochs} epochs, {blocks_kept} blocks kept\n"));
    let report = report_json(&run.trace);
    let lines = report["lines"].as_array().expect("lines");
    assert_eq!(lines.len(), 1, "{lines:#?}");
    let growth = lines[0]["growth_bytes_per_epoch"].as_u64().unwrap_or_default();
    let verdict = report["verdict"]["message"].as_str().unwrap().to_string();
    (report, growth, verdict)
}

/// The same helper called from one caller for the first 12 epochs of 16,
/// then from the other: the first stack's survivors stop four epochs
/// before the end, which alone reads as a pile that stopped, but the
/// line's go on: both stacks are its suspects, with the whole leak's
/// bytes, from the first settled epoch.
#[test]
fn a_helper_leaking_from_one_caller_then_another_is_one_line_with_all_the_bytes() {
    const LEAK_PER_EPOCH: u64 = 50 * 1000;
    let (report, growth, verdict) = alt_callers_line("16", "phases", 800);
    // Each stack's figure per epoch is rounded down.
    assert!((LEAK_PER_EPOCH - 2..=LEAK_PER_EPOCH).contains(&growth), "{growth}");
    assert_eq!(report["suspects"].as_array().expect("suspects").len(), 2, "{report:#}");
    assert!(!verdict.contains("since epoch") && verdict.contains("through 2 stacks"), "{verdict}");
}

/// The same helper called from train_step in every epoch and from
/// eval_step too in the first four of 12: eval_step's pile stopped beside
/// one that goes on from the first epoch, and is no part of the leak,
/// which the verdict names through train_step, at its rate alone.
#[test]
fn a_helper_whose_second_caller_stopped_is_named_through_the_one_that_goes_on() {
    const LEAK_PER_EPOCH: u64 = 50 * 1000;
    let (_, growth, verdict) = alt_callers_line("12", "one_stops", 800);
    assert_eq!(growth, LEAK_PER_EPOCH);
    let leaking_line = line_of("programs/alt_callers.c", "the leaking line");
    let named = format!("cache_result (alt_callers.c:{leaking_line}), called from train_step (alt_callers.c:");
    assert!(verdict.starts_with(&named) && !verdict.contains("may have stopped"), "{verdict}");
}

/// A std::vector filled by 1 MiB an epoch doubles its buffer at a few
/// epochs only: the live heap rises in steps while the RSS rises at every
/// epoch, and the line that fills it is the leak, its buffer grown in place.
#[test]
fn a_vector_doubling_its_buffer_at_a_few_epochs_is_ranked_first() {
    let program = compile("grows_vector.cpp");
    let run = run_traced(&program, &[]).succeeded();
    assert_eq!(run.stdout(), "grows_vector: 1835008 values\n");
    let report = report_json(&run.trace);
    assert_eq!(report["verdict"]["kind"], "heap_leak", "{:#}", report["verdict"]);
    let line = &report["lines"][0];
    let growing_line = line_of("programs/grows_vector.cpp", "the growing line");
    assert_eq!((&line["frame"]["function"], &line["frame"]["line"]), (&"record_history".into(), &growing_line.into()));
    let top = &report["suspects"][0];
    assert_eq!(top["grown_in_place"], true, "{top:#}");
    assert_eq!(top["live_count"], 1, "one buffer, its newest copy: {top:#}");
}

/// A buffer realloc'd larger every epoch leaves no allocations behind to
/// pile up, only its newest copy: the heap rising at every epoch makes its
/// line a suspect all the same, by exactly its growth.
#[test]
fn a_buffer_made_larger_every_epoch_is_ranked_by_its_growth() {
    let program = compile("grows_in_place.c");
    let run = run_traced(&program, &[]).succeeded();
    let report = report_json(&run.trace);
    assert_eq!(report["verdict"]["kind"], "heap_leak", "{report:#}");
    let line = &report["lines"][0];
    let growing_line = line_of("programs/grows_in_place.c", "the growing line");
    assert_eq!((&line["frame"]["function"], &line["frame"]["line"]), (&"append_history".into(), &growing_line.into()));
    assert_eq!(line["growth_bytes_per_epoch"], 64 << 10, "{line:#}");
    let top = &report["suspects"][0];
    assert_eq!(top["grown_in_place"], true, "{top:#}");
    assert_eq!(top["live_count"], 1, "one block, its newest copy: {top:#}");
    assert!(!suspects(&report).iter().any(|s| mentions(s, "step_temporaries")), "{report:#}");
    let message = report["verdict"]["message"].as_str().unwrap();
    assert!(message.contains("one block, larger at every epoch's end"), "{message}");
}

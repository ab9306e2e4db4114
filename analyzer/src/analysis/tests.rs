use super::*;
use crate::sites::SiteKeys;
use crate::symbolize::Symbolizer;
use crate::synth::{all_behaviours, write_temp, Sim};
use crate::trace::{load, LoadOptions};

fn run(sim: &Sim) -> (Trace, Analysis) {
    run_with_floor(sim, NoiseFloor::Scaled)
}

fn run_with_floor(sim: &Sim, floor: NoiseFloor) -> (Trace, Analysis) {
    let path = write_temp("trace.bin", &sim.bytes());
    let trace = load(&path, &LoadOptions::default()).expect("synthetic trace loads");
    let analysis = analyze_sites(&trace, floor);
    (trace, analysis)
}

/// The analysis with the stacks that pile up with their line made
/// suspects, as the report runs it.
fn run_by_line(sim: &Sim) -> Analysis {
    let path = write_temp("trace.bin", &sim.bytes());
    let trace = load(&path, &LoadOptions::default()).expect("synthetic trace loads");
    let mut symbolizer = Symbolizer::new(&trace.process, &trace.modules, &trace.pycode);
    crate::render::analyze_by_line(&trace, NoiseFloor::Scaled, &mut symbolizer)
}

/// The analysis with stacks grouped by their symbolized frames, as the
/// report runs it.
fn analyze_sites(trace: &Trace, floor: NoiseFloor) -> Analysis {
    let mut symbolizer = Symbolizer::new(&trace.process, &trace.modules, &trace.pycode);
    let mut keys = SiteKeys::new(trace, &mut symbolizer);
    analyze(trace, floor, |stack| keys.key(stack))
}

fn suspect_stacks(a: &Analysis) -> Vec<u32> {
    a.suspects.iter().map(|s| s.stack).collect()
}

/// `epochs` marked epochs, then exit; `body(sim, epoch)` runs in each.
fn scenario(epochs: u32, mut body: impl FnMut(&mut Sim, u32)) -> Sim {
    let mut sim = Sim::new("/opt/app/train");
    for e in 0..epochs {
        body(&mut sim, e);
        sim.mark(&format!("epoch {e}"));
    }
    sim.exit();
    sim
}

#[test]
fn a_leak_is_found_with_its_growth_and_survivors() {
    let sim = scenario(10, |sim, _| {
        sim.alloc_many(1, 100, 1024);
    });
    let (_, a) = run(&sim);
    assert_eq!(a.snapshots, 10, "the exit snapshot is dropped");
    assert!(a.dropped_exit);
    assert_eq!(a.settled, Some((1, 7)));
    assert_eq!(suspect_stacks(&a), vec![1]);
    let s = &a.suspects[0];
    assert_eq!(s.growth_bytes_per_epoch, 100 * 1024);
    assert_eq!(s.live_bytes, 10 * 100 * 1024);
    assert_eq!(s.live_count, 1000);
    assert_eq!(s.survivors.len(), 10);
    assert!(s.survivors.iter().enumerate().all(|(i, v)| v.birth_epoch == i as u32 && v.count == 100));
    assert_eq!(a.verdict.kind, VerdictKind::HeapLeak);
    let msg = a.verdict_message(Some(Culprit::suspect(&a.suspects[0], "load_batch")));
    assert!(msg.contains("load_batch") && msg.contains("100 KiB/epoch"), "{msg}");
}

#[test]
fn a_culprit_summing_several_suspects_says_through_how_many_stacks() {
    let sim = scenario(10, |sim, _| {
        for stack in 1..=3 {
            sim.alloc_many(stack, 100, 1024);
        }
    });
    let (_, a) = run(&sim);
    assert_eq!(a.suspects.len(), 3);
    let line = |suspects, memory| Culprit {
        name: "keep_history".into(),
        called_from: None,
        growth_bytes_per_epoch: 200 * 1024,
        live_bytes: 2000 * 1024,
        suspects,
        memory,
        known_as: None,
        born: Vec::new(),
        growth_since: 1,
    };
    let heap = LineMemory::Only(Memory::Heap);
    let msg = a.verdict_message(Some(line(2, heap)));
    assert!(msg.starts_with("keep_history keeps about 200 KiB/epoch alive ("), "{msg}");
    let all: u64 = a.suspects.iter().map(|s| s.growth_bytes_per_epoch).sum();
    let in_all = format!(" now) through 2 stacks, 3 suspects in all keeping about {}/epoch; ", bytes(all));
    assert!(msg.contains(&in_all), "{msg}");
    let msg = a.verdict_message(Some(line(3, heap)));
    assert!(msg.contains(" now) through 3 stacks; "), "every suspect is the line's: {msg}");
    let msg = a.verdict_message(Some(line(2, LineMemory::Mixed)));
    let mixed = "keep_history keeps about 200 KiB/epoch of several kinds of memory alive (";
    assert!(msg.starts_with(mixed), "{msg}");
}

#[test]
fn a_culprit_python_called_is_said_with_its_caller() {
    let sim = scenario(10, |sim, _| {
        sim.alloc_many(1, 100, 1024);
    });
    let (_, a) = run(&sim);
    let culprit = Culprit {
        name: "compute_features (featlib.c:12)".into(),
        called_from: Some("featurize (job.py:15)".into()),
        growth_bytes_per_epoch: 100 * 1024,
        live_bytes: 1000 * 1024,
        suspects: 1,
        memory: LineMemory::Only(Memory::Heap),
        known_as: None,
        born: Vec::new(),
        growth_since: 1,
    };
    let msg = a.verdict_message(Some(culprit.clone()));
    let named = "compute_features (featlib.c:12), called from featurize (job.py:15), keeps about 100 KiB/epoch alive (";
    assert!(msg.starts_with(named), "{msg}");
    assert_eq!(culprit.named(), "compute_features (featlib.c:12), called from featurize (job.py:15)");
}

#[test]
fn a_culprit_whose_memory_it_only_happened_to_need_is_not_said_to_keep_it() {
    let sim = scenario(10, |sim, _| {
        sim.alloc_many(1, 1, 1 << 20);
    });
    let (_, a) = run(&sim);
    let line = |incidental| Culprit {
        name: "churn (train.py:6)".into(),
        called_from: None,
        growth_bytes_per_epoch: 1 << 20,
        live_bytes: 10 << 20,
        suspects: 3,
        memory: LineMemory::Only(Memory::Mapped),
        known_as: Some(KnownAs { what: "pymalloc arenas", rank: 1, incidental }),
        born: Vec::new(),
        growth_since: 1,
    };
    let msg = a.verdict_message(Some(line(true)));
    let charged = "pymalloc arenas grew by about 1.00 MiB/epoch of anonymous mapped memory (10.0 MiB now), charged to churn (train.py:6) through 3 stacks: that line needed more of them, and need not be what holds them; ";
    assert!(msg.starts_with(charged), "{msg}");
    assert!(msg.ends_with(" (see suspect #1)") && !msg.contains(" keeps "), "{msg}");
    let msg = a.verdict_message(Some(line(false)));
    assert!(msg.starts_with("churn (train.py:6) keeps about 1.00 MiB/epoch"), "{msg}");
    assert!(msg.ends_with("; the memory is pymalloc arenas (see suspect #1)"), "{msg}");
}

#[test]
fn a_cache_filled_once_is_not_a_leak() {
    for fill_epoch in [0, 1] {
        let sim = scenario(10, |sim, e| {
            if e == fill_epoch {
                sim.alloc_many(2, 2000, 4096);
            }
        });
        let (_, a) = run(&sim);
        assert_eq!(suspect_stacks(&a), Vec::<u32>::new(), "cache filled in epoch {fill_epoch}");
        assert_eq!(a.verdict.kind, VerdictKind::NoGrowth);
    }
}

/// A cache filled a little at each of the first epochs, and no more once
/// full: its survivors are of the earlier half of the settled epochs only,
/// and the heap stopped growing. The same filling that goes on to the end
/// is a leak.
#[test]
fn a_cache_filled_over_the_first_half_of_the_run_is_not_a_leak() {
    for (filling_epochs, leak) in [(5, false), (10, true)] {
        let sim = scenario(10, |sim, e| {
            if e < filling_epochs {
                sim.alloc_many(2, 20, 64 << 10);
            }
        });
        let (_, a) = run(&sim);
        assert_eq!(a.settled, Some((1, 7)));
        let expected = if leak { vec![2] } else { vec![] };
        assert_eq!(suspect_stacks(&a), expected, "filled over {filling_epochs} epochs");
        assert!(a.grown_in_place.is_empty(), "no block grown in place");
        // The stopped pile waits for its line, with which it piles up no more.
        let few: Vec<u32> = a.few_settled_epochs.iter().map(|s| s.stack).collect();
        assert_eq!(few, if leak { vec![] } else { vec![2] });
        assert_eq!(suspect_stacks(&run_by_line(&sim)), expected, "filled over {filling_epochs} epochs, by line");
        assert_eq!(a.stopped.is_some(), !leak);
        let message = a.verdict_message(None);
        assert_eq!(
            message.contains("1 site piled up allocations in the earlier epochs, then stopped or slowed"),
            !leak,
            "{message}"
        );
    }

    // Beside a leak, the heap grows in the later half by the leak's 100 KiB
    // an epoch only, much less than the cache kept: it stopped all the same.
    let sim = scenario(10, |sim, e| {
        if e < 5 {
            sim.alloc_many(2, 20, 64 << 10);
        }
        sim.alloc_many(1, 100, 1024);
    });
    let (_, a) = run(&sim);
    assert_eq!(suspect_stacks(&a), vec![1]);

    // A large model freed at epoch 6 makes the heap fall in the later
    // half; the leak, judged by its own live bytes, is found all the same.
    let mut teacher = Vec::new();
    let sim = scenario(10, |sim, e| {
        if e == 0 {
            teacher = sim.alloc_many(5, 10, 1 << 20);
        }
        if e == 6 {
            sim.free_all(std::mem::take(&mut teacher));
        }
        sim.alloc_many(1, 100, 1024);
    });
    let (_, a) = run(&sim);
    assert_eq!(suspect_stacks(&a), vec![1]);

    // The best five checkpoints, kept from the first epochs, and each
    // epoch's latest, held until the next replaces it: survivors of four
    // settled epochs, none of the settled ones since the middle of the run.
    let mut latest = None;
    let sim = scenario(10, |sim, e| {
        let checkpoint = sim.alloc(2, 1 << 20);
        if e >= 5 {
            if let Some(previous) = latest.replace(checkpoint) {
                sim.free(previous);
            }
        }
    });
    let (_, a) = run(&sim);
    assert_eq!(suspect_stacks(&a), Vec::<u32>::new());
    assert_eq!(a.stopped.map(|s| s.sites), Some(1));
}

/// A buffer that, once full (at epoch 3), replaces entries at random (a
/// replay buffer by reservoir sampling) keeps survivors of every epoch
/// while its total stays put: it does not pile up.
#[test]
fn a_full_buffer_replacing_entries_at_random_is_not_a_leak() {
    let mut sim = Sim::new("/opt/app/train");
    let mut buffer: Vec<u64> = Vec::new();
    let mut next = 7u64;
    for e in 0..10 {
        for _ in 0..200 {
            let entry = sim.alloc(1, 6 << 10);
            if buffer.len() < 800 {
                buffer.push(entry);
            } else {
                next = next.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                let slot = (next >> 33) as usize % buffer.len();
                sim.free(std::mem::replace(&mut buffer[slot], entry));
            }
        }
        sim.mark(&format!("epoch {e}"));
    }
    sim.exit();
    let (_, a) = run(&sim);
    assert_eq!(suspect_stacks(&a), Vec::<u32>::new());
    assert_eq!(a.stopped.map(|s| s.sites), Some(1), "its survivors pile up, its total does not");
    assert_eq!(a.verdict.kind, VerdictKind::NoGrowth);
}

/// A leak of about one sample an epoch, sampled at 512 KiB, leaves too
/// few survivors to pile up: the verdict says so and what rate would
/// rank it; with every allocation recorded, nothing is said of samples.
#[test]
fn growth_of_a_few_samples_an_epoch_is_said_to_need_a_lower_rate() {
    let sampled_of = |sampling: Option<&str>, sample_bytes: u64, malloc_keeps: bool| {
        let mut sim = Sim::new("/opt/app/train");
        if let Some(sampling) = sampling {
            sim.process_mut().settings.push((trace_format::SAMPLING_SETTING.into(), sampling.into()));
        }
        for e in 0..10 {
            // One sample every third epoch: 192 KiB/epoch over the analysed
            // epochs for one of 512 KiB.
            if e % 3 == 0 {
                sim.alloc(1, sample_bytes);
            }
            if malloc_keeps {
                sim.rss_extra += 64 << 20;
                sim.allocator_free += 60 << 20;
            }
            sim.mark(&format!("epoch {e}"));
        }
        sim.exit();
        run(&sim).1
    };
    let sampled = |sampling: Option<&str>| sampled_of(sampling, 512 << 10, false);
    let rate = format!(
        "{}524288 bytes on average (TRACER_SAMPLE_BYTES); counts and bytes are estimates",
        trace_format::SAMPLED_BY_BYTES
    );
    let a = sampled(Some(&rate));
    let expected = Some(Sampling { mean_bytes: 512 << 10, whole_run: true });
    assert_eq!((a.sampling, a.verdict.kind), (expected, VerdictKind::NoGrowth), "{:?}", a.suspects);
    let msg = a.verdict_message(None);
    assert!(msg.contains("sampled, one per 512 KiB on average") && msg.contains("TRACER_SAMPLE_BYTES=24k"), "{msg}");
    assert!(msg.contains("about 0.4 samples an epoch"), "{msg}");
    // Beside freed memory malloc keeps, the leak may be there all the same.
    let a = sampled_of(Some(&rate), 512 << 10, true);
    assert_eq!(a.verdict.kind, VerdictKind::AllocatorRetention);
    let msg = a.verdict_message(None);
    assert!(msg.contains("glibc's malloc held") && msg.contains("TRACER_SAMPLE_BYTES=24k"), "{msg}");

    assert!(a.too_few_samples());

    // One sample that stayed, over the whole run, is chance.
    let mut sim = Sim::new("/opt/app/worker");
    sim.process_mut().settings.push((trace_format::SAMPLING_SETTING.into(), rate.clone()));
    for e in 0..10 {
        if e == 4 {
            sim.alloc(1, 512 << 10);
        }
        sim.mark(&format!("epoch {e}"));
    }
    sim.exit();
    let (_, once) = run(&sim);
    assert!(!once.too_few_samples(), "{}", once.verdict_message(None));

    // A leak no sample fell in: the heap flat, the RSS up by 128 KiB an
    // epoch (a quarter of a sample) with nothing else to explain it.
    let unseen = |rss_per_epoch: u64| {
        let mut sim = Sim::new("/opt/app/train");
        sim.process_mut().settings.push((trace_format::SAMPLING_SETTING.into(), rate.clone()));
        for e in 0..10 {
            sim.rss_extra += rss_per_epoch;
            sim.mark(&format!("epoch {e}"));
        }
        sim.exit();
        run(&sim).1
    };
    let msg = unseen(128 << 10).verdict_message(None);
    assert!(msg.contains("the RSS grew by 128 KiB/epoch, about 0.2 samples an epoch"), "{msg}");
    // Sampled, a block made larger every epoch is one only when several
    // samples large: a small one was likely sampled at one copy only.
    let grown_by = |step: u64| {
        let mut sim = Sim::new("/opt/app/train");
        sim.process_mut().settings.push((trace_format::SAMPLING_SETTING.into(), rate.clone()));
        let mut block = None;
        for e in 0..10 {
            if let Some(old) = block.replace(sim.alloc(1, (e + 1) * step)) {
                sim.free(old);
            }
            sim.mark(&format!("epoch {e}"));
        }
        sim.exit();
        run(&sim).1.grown_in_place.iter().map(|s| s.stack).collect::<Vec<u32>>()
    };
    assert_eq!(grown_by(64 << 10), Vec::<u32>::new());
    assert_eq!(grown_by(1 << 20), vec![1]);

    // A pile whose last settled epoch left no sample (a 64 KiB mapping an
    // epoch at 16 KiB, drawn 98 times in 100) has not stopped; unsampled,
    // the same quiet epoch ends it.
    let last_settled_undrawn = |sampling: Option<&str>| {
        let mut sim = Sim::new("/opt/app/train");
        if let Some(sampling) = sampling {
            sim.process_mut().settings.push((trace_format::SAMPLING_SETTING.into(), sampling.into()));
        }
        for e in 0..8 {
            if e != 5 {
                sim.alloc(1, 64 << 10);
            }
            sim.mark(&format!("epoch {e}"));
        }
        sim.exit();
        let (_, a) = run(&sim);
        assert_eq!(a.settled, Some((1, 5)));
        suspect_stacks(&a)
    };
    assert_eq!(last_settled_undrawn(Some(&rate)), vec![1]);
    assert_eq!(last_settled_undrawn(None), Vec::<u32>::new());

    // A drift of a few KiB an epoch is no reason to sample finer.
    let a = unseen(4 << 10);
    assert!(!a.too_few_samples(), "{}", a.verdict_message(None));

    // Samples that fell in the first epochs only read as a pile that
    // stopped: the few samples are said beside it.
    let mut sim = Sim::new("/opt/app/train");
    sim.process_mut().settings.push((trace_format::SAMPLING_SETTING.into(), rate.clone()));
    for e in 0..12 {
        if (1..=4).contains(&e) {
            sim.alloc(1, 512 << 10);
        }
        sim.mark(&format!("epoch {e}"));
    }
    sim.exit();
    let a = run(&sim).1;
    assert!(a.stopped.is_some() && a.too_few_samples(), "{}", a.verdict_message(None));

    // At 1 KiB, the finest rate it would advise, a growth of 6 KiB/epoch is
    // not for want of samples.
    let finest = format!(
        "{}1024 bytes on average (TRACER_SAMPLE_BYTES); counts and bytes are estimates",
        trace_format::SAMPLED_BY_BYTES
    );
    let msg = sampled_of(Some(&finest), 18 << 10, false).verdict_message(None);
    assert!(msg.contains("the live heap by 54.0 KiB") && !msg.contains("sampled"), "{msg}");

    // A worker sampled for its life at the warm-up's rate: the warm-up's
    // setting is the one to change.
    let worker = format!(
        "{}524288 bytes on average for the whole life of this forked DataLoader worker (TRACER_WARMUP_SAMPLE_BYTES=0 records it all); counts and bytes are estimates",
        trace_format::SAMPLED_BY_BYTES
    );
    let msg = sampled(Some(&worker)).verdict_message(None);
    assert!(msg.contains("run with TRACER_WARMUP_SAMPLE_BYTES=0") && !msg.contains("TRACER_SAMPLE_BYTES="), "{msg}");

    // A spawned child whose warm-up ended (it closed an epoch of its own)
    // recorded every allocation after it: nothing is said of samples.
    let mut child = Sim::new("/opt/app/train");
    let spawned = format!(
        "{}65536 bytes on average for the whole life of this spawned multiprocessing child (TRACER_WARMUP_SAMPLE_BYTES=0 records it all), unless it closes an epoch by a mark or a DataLoader pass before its parent closes one: then until that epoch, and every allocation after it; counts and bytes are estimates",
        trace_format::SAMPLED_BY_BYTES
    );
    child.process_mut().settings.push((trace_format::SAMPLING_SETTING.into(), spawned));
    child.mark("epoch 0");
    let text = format!("{}0: every allocation is recorded from epoch 1 on", trace_format::WARM_UP_ENDED_NOTICE);
    child.push(trace_format::Record::Notice(trace_format::Notice { elapsed_ns: 1, text }));
    for e in 1..10 {
        if e % 3 == 0 {
            child.alloc(1, 512 << 10);
        }
        child.mark(&format!("epoch {e}"));
    }
    child.exit();
    let a = run(&child).1;
    assert_eq!(a.sampling, None);
    assert!(!a.verdict_message(None).contains("sampled"), "{}", a.verdict_message(None));

    let warm_up_only = format!(
        "{}65536 bytes on average until the warm-up (the first epoch) ends, then every allocation",
        trace_format::SAMPLED_BY_BYTES
    );
    for sampling in [None, Some(warm_up_only.as_str())] {
        let a = sampled(sampling);
        assert_eq!(a.sampling, None, "{sampling:?}");
        assert!(!a.verdict_message(None).contains("sampled"), "{sampling:?}");
    }
}

/// Epochs that are all time slices: the verdict says a figure per epoch is
/// per slice, and how long one is. Marked epochs say nothing of it.
#[test]
fn time_sliced_epochs_are_said_to_be_slices() {
    let message = |cause: EpochCause| {
        let mut sim = Sim::new("/opt/app/train");
        for e in 0..10 {
            sim.alloc_many(1, 100, 1024);
            sim.snapshot(cause, &format!("{e}"));
        }
        sim.exit();
        let a = run(&sim).1;
        (a.time_slice_seconds, a.verdict_message(None))
    };
    let (seconds, sliced) = message(EpochCause::Timer);
    assert_eq!(seconds, Some(1.0));
    assert!(
        sliced.contains("; an epoch here is a time slice of about 1.0 s, and a figure per epoch is per slice"),
        "{sliced}"
    );
    let (seconds, marked) = message(EpochCause::Mark);
    assert!(seconds.is_none() && !marked.contains("time slice"), "{marked}");
}

/// Time slices cut beside marks make epochs of unlike lengths: the verdict
/// says its figures per epoch mix them. Marks alone, or slices before the
/// first mark only (not analysed), say nothing of it.
#[test]
fn epochs_cut_by_time_slices_and_marks_together_are_said_to_mix() {
    let mixed = |slices_after_first_mark: bool| {
        let mut sim = Sim::new("/opt/app/train");
        sim.snapshot(EpochCause::Timer, "10s");
        for e in 0..10 {
            sim.alloc_many(1, 100, 1024);
            if slices_after_first_mark && e % 3 == 1 {
                sim.snapshot(EpochCause::Timer, "slice");
            }
            sim.mark(&format!("epoch {e}"));
        }
        sim.exit();
        let a = run(&sim).1;
        (a.mixed_epoch_causes, a.verdict_message(None))
    };
    let (mixed_causes, message) = mixed(true);
    assert!(mixed_causes && message.contains("a figure per epoch mixes them"), "{message}");
    let (mixed_causes, message) = mixed(false);
    assert!(!mixed_causes && !message.contains("mixes"), "{message}");
}

#[test]
fn a_cache_filled_in_the_first_settled_epoch_of_a_short_run_is_not_a_leak() {
    // With 4 analysis epochs only epoch 1 is settled, so a single surviving
    // epoch would be enough; the stack must also have grown since snapshot 1.
    let sim = scenario(4, |sim, e| {
        if e == 1 {
            sim.alloc_many(2, 2000, 4096);
        }
    });
    let (_, a) = run(&sim);
    assert_eq!(a.snapshots, 4);
    assert_eq!(suspect_stacks(&a), Vec::<u32>::new());
}

#[test]
fn buffers_freed_one_epoch_later_are_not_a_leak() {
    let mut previous = Vec::new();
    let sim = scenario(10, |sim, _| {
        let now = sim.alloc_many(3, 100, 8192);
        sim.free_all(std::mem::replace(&mut previous, now));
    });
    let (_, a) = run(&sim);
    assert_eq!(suspect_stacks(&a), Vec::<u32>::new());
}

#[test]
fn temporaries_freed_within_the_epoch_are_not_a_leak() {
    let sim = scenario(10, |sim, _| {
        for _ in 0..50 {
            let t = sim.alloc_many(4, 20, 1 << 16);
            sim.free_all(t);
        }
    });
    let (_, a) = run(&sim);
    assert_eq!(suspect_stacks(&a), Vec::<u32>::new());
    assert_eq!(a.verdict.kind, VerdictKind::NoGrowth);
}

#[test]
fn warm_up_allocations_kept_forever_are_not_a_leak() {
    let sim = scenario(10, |sim, e| {
        if e == 0 {
            sim.alloc_many(5, 5000, 4096);
        }
    });
    let (_, a) = run(&sim);
    assert_eq!(suspect_stacks(&a), Vec::<u32>::new());
}

#[test]
fn all_behaviours_together_list_only_the_leak() {
    for exit_frees in [false, true] {
        let (_, a) = run(&all_behaviours(12, exit_frees));
        assert_eq!(suspect_stacks(&a), vec![1], "exit frees: {exit_frees}");
        assert_eq!(a.verdict.kind, VerdictKind::HeapLeak);
        assert_eq!(a.suspects[0].growth_bytes_per_epoch, 100 * 1024);
    }
}

#[test]
fn two_leaks_rank_by_growth() {
    let sim = scenario(8, |sim, _| {
        sim.alloc_many(7, 10, 1024);
        sim.alloc_many(8, 10, 8192);
    });
    let (_, a) = run(&sim);
    assert_eq!(suspect_stacks(&a), vec![8, 7]);
}

/// A hook added every epoch keeps one more thing each step: the verdict
/// says the leak keeps more every epoch, and from what to what; a steady
/// leak says nothing of it.
#[test]
fn a_leak_that_keeps_more_every_epoch_is_said_to() {
    for (speeding_up, said) in [(true, true), (false, false)] {
        let sim = scenario(10, |sim, e| {
            let count = if speeding_up { 10 * (e as usize + 1) } else { 10 };
            sim.alloc_many(1, count, 1024);
        });
        let (_, a) = run(&sim);
        assert_eq!(suspect_stacks(&a), vec![1]);
        let msg = a.verdict_message(None);
        let expected = "it keeps more every epoch (20.0 KiB of epoch 1, 80.0 KiB of epoch 7)";
        assert_eq!(msg.contains(expected), said, "{msg}");
        assert_eq!(msg.contains("keeps more every epoch"), said, "{msg}");
    }
}

/// A leak of every other epoch (validation epochs keeping their outputs)
/// is found whichever epochs they are: in a run of ten, the even ones
/// leave survivors of 3 of the 7 settled epochs, the odd ones of 4.
#[test]
fn an_intermittent_leak_counts_when_half_the_epochs_leave_survivors() {
    // In runs of eight and eleven the last settled epoch is odd: the even
    // ones leave none of it, nor of the last third of the settled epochs.
    for (epochs, parity) in [(12, 1), (10, 1), (10, 0), (12, 0), (8, 0), (8, 1), (11, 0), (11, 1)] {
        let sim = scenario(epochs, |sim, e| {
            if e % 2 == parity {
                sim.alloc_many(1, 100, 1024);
            }
        });
        let (_, a) = run(&sim);
        assert_eq!(suspect_stacks(&a), vec![1], "{epochs} epochs, leaking at e % 2 == {parity}");
        // Its first settled epoch left none: it did not begin late.
        assert_eq!(a.suspects[0].growth_span.since, 1, "{epochs} epochs, leaking at e % 2 == {parity}");
    }
    // A leak of one epoch in three in a run of ten: 2 of 7, too few.
    let sim = scenario(10, |sim, e| {
        if e % 3 == 0 {
            sim.alloc_many(1, 100, 1024);
        }
    });
    assert_eq!(suspect_stacks(&run(&sim).1), Vec::<u32>::new());
}

#[test]
fn a_leak_below_the_noise_floor_is_not_listed() {
    let sim = scenario(10, |sim, _| {
        sim.alloc_many(1, 1, 1000);
    });
    let (_, a) = run(&sim);
    assert_eq!(a.noise_floor, NOISE_FLOOR_MIN);
    assert_eq!(suspect_stacks(&a), Vec::<u32>::new());
    let below = &a.below_floor;
    assert_eq!((below.stacks, below.growth_bytes_per_epoch, below.largest_bytes_per_epoch), (1, 1000, 1000));
    let largest: Vec<(u32, u64)> = below.largest.iter().map(|s| (s.stack, s.growth_bytes_per_epoch)).collect();
    assert_eq!(largest, [(1, 1000)]);
    // The heap grew by less than the floor an epoch: nothing to point at.
    assert!(!a.growth_below_floor());
    assert!(a.verdict_message(None).starts_with("no leak found"), "{}", a.verdict_message(None));
}

/// A 100 MiB heap, which puts the floor at 100 KiB per epoch, and a stack
/// keeping 50 KiB an epoch alive.
fn small_leak_in_a_large_heap() -> Sim {
    scenario(10, |sim, e| {
        if e == 0 {
            sim.alloc_many(5, 100, 1 << 20);
        }
        sim.alloc_many(1, 1, 50 * 1024);
    })
}

/// A cache filled over the first 13 epochs of 30, flat for the rest,
/// piled up but stopped: no leak now, however long it filled past the
/// snapshot the pile is compared from.
#[test]
fn a_cache_filled_over_the_first_epochs_then_flat_for_long_is_not_a_leak() {
    for last_fill in [13, 17] {
        let sim = scenario(30, |sim, e| {
            if (1..=last_fill).contains(&e) {
                sim.alloc_many(2, 4, 64 << 10);
            }
        });
        let (_, a) = run(&sim);
        assert_eq!(suspect_stacks(&a), Vec::<u32>::new(), "filled until epoch {last_fill}");
        assert_eq!(a.verdict.kind, VerdictKind::NoGrowth);
        assert_eq!(a.stopped.map(|s| s.sites), Some(1), "filled until epoch {last_fill}");
    }
}

/// Too few epochs: the count said is of those that could be analysed,
/// the exit's own not among them (two marks and the exit: two).
#[test]
fn too_few_epochs_counts_those_that_could_be_analysed() {
    for (marks, said) in [(2, "only 2 epochs to analyze"), (3, "only 3 epochs to analyze")] {
        let (_, a) = run(&scenario(marks, |sim, _| drop(sim.alloc_many(1, 10, 1024))));
        assert_eq!(a.verdict.kind, VerdictKind::TooFewEpochs);
        let message = a.verdict_message(None);
        assert!(message.starts_with(said), "{marks} marks: {message}");
    }
}

/// A cache filled over epochs 1 to 7 of 12, then flat: its last survivors
/// are two settled epochs from the last settled one, but none was born in
/// the four epochs to the reference, the two unsettled ones included, where
/// a leak's would be alive: it stopped. Filled to epoch 8 or 9, one settled
/// epoch or none is quiet, which chance explains, and it is a suspect still.
#[test]
fn a_cache_quiet_from_its_last_settled_survivors_to_the_reference_stopped() {
    for (last_fill, leak) in [(7, false), (8, true), (9, true)] {
        let sim = scenario(12, |sim, e| {
            if (1..=last_fill).contains(&e) {
                sim.alloc_many(2, 16, 128 << 10);
            }
        });
        let (_, a) = run(&sim);
        assert_eq!((a.settled, a.reference_epoch), (Some((1, 9)), 11));
        let expected = if leak { vec![2] } else { vec![] };
        assert_eq!(suspect_stacks(&a), expected, "filled until epoch {last_fill}");
        assert_eq!(a.stopped.is_some(), !leak, "filled until epoch {last_fill}");
    }
}

/// A few small blocks left by each of the first evaluations, less than
/// the least growth that counts in all: no site worth naming stopped.
#[test]
fn a_pile_smaller_than_the_least_growth_is_not_named_as_stopped() {
    let sim = scenario(12, |sim, e| {
        if (2..=6).contains(&e) {
            sim.alloc_many(2, 2, 64);
        }
    });
    let (_, a) = run(&sim);
    assert!(a.suspects.is_empty(), "{:?}", a.suspects);
    assert!(a.stopped.is_none(), "{:?}", a.stopped);
}

/// A leak whose line keeps less and less: the verdict says so.
#[test]
fn a_line_that_keeps_less_and_less_is_said_to_slow_down() {
    let sim = scenario(12, |sim, e| {
        sim.alloc_many(1, if e < 5 { 100 } else { 10 }, 1024);
    });
    let (_, a) = run(&sim);
    let message = a.verdict_message(Some(Culprit::suspect(&a.suspects[0], "fill (train.py:3)")));
    assert!(
        message.contains(
            "; it keeps less and less (the settled epochs from 1 kept 100 KiB/epoch, those from 5 10.0 KiB/epoch)"
        ),
        "{message}"
    );
    let (_, steady) = run(&scenario(12, |sim, _| drop(sim.alloc_many(1, 100, 1024))));
    let message = steady.verdict_message(Some(Culprit::suspect(&steady.suspects[0], "keep (train.py:3)")));
    assert!(!message.contains("less and less"), "{message}");
    // One settled epoch has no halves.
    let (_, short) = run(&scenario(4, |sim, _| drop(sim.alloc_many(1, 100, 1024))));
    assert_eq!(short.settled, Some((1, 1)));
    let message = short.verdict_message(Some(Culprit::suspect(&short.suspects[0], "keep (train.py:3)")));
    assert!(!message.contains("less and less"), "{message}");
}

/// A validation every third epoch that keeps its outputs leaves survivors
/// of a third of the settled epochs, spread over all of them: a leak, at
/// its mean rate. A cache refreshed every third epoch, its old contents
/// freed, leaves those of its last refresh only.
#[test]
fn a_leak_of_every_third_epoch_piles_up_and_a_cache_refreshed_as_often_does_not() {
    let mut cache = Vec::new();
    let sim = scenario(16, |sim, e| {
        if e % 3 == 0 {
            sim.alloc_many(1, 10, 64 << 10);
            sim.free_all(std::mem::take(&mut cache));
            cache = sim.alloc_many(2, 10, 64 << 10);
        }
    });
    let (_, a) = run(&sim);
    assert_eq!((a.settled, a.settled_epochs_needed()), (Some((1, 13)), 6));
    assert_eq!(suspect_stacks(&a), vec![1]);
    let leak = &a.suspects[0];
    assert_eq!(leak.settled_with_survivors, 4, "epochs 3, 6, 9 and 12");
    assert_eq!(leak.growth_bytes_per_epoch, 4 * 10 * (64 << 10) / 13, "its mean over the settled epochs");
    assert_eq!(a.verdict.kind, VerdictKind::HeapLeak);
}

/// Each epoch makes a batch of 200 blocks, alive at its mark until the next
/// epoch replaces it, and keeps 20 of them: the batch alive at the snapshot
/// the pile is compared from is no part of what the line kept, and the
/// line still piles up.
#[test]
fn a_batch_alive_at_a_mark_does_not_hide_what_its_line_keeps() {
    let mut batch = Vec::new();
    let sim = scenario(12, |sim, _| {
        sim.free_all(std::mem::take(&mut batch));
        batch = sim.alloc_many(1, 200, 8 << 10);
        let kept: Vec<u64> = batch.iter().step_by(10).copied().collect();
        batch.retain(|object| !kept.contains(object));
    });
    let (_, a) = run(&sim);
    assert_eq!(suspect_stacks(&a), vec![1], "stopped: {:?}", a.stopped);
    assert_eq!(a.suspects[0].growth_bytes_per_epoch, 20 * (8 << 10));
    assert_eq!(a.verdict.kind, VerdictKind::HeapLeak);
}

/// A leak that began at epoch 9 of 14, or 20 of 30, after the snapshot a
/// pile is compared from, leaves survivors of fewer than half the settled
/// epochs but of each since it began: a leak since then. A bounded FIFO
/// that keeps the entries of its last four epochs, filled from epoch 2,
/// held older ones at that snapshot; a cache filled from epoch 14 to 22
/// of 30, flat since, stopped.
#[test]
fn a_leak_that_began_after_the_middle_piles_up_and_a_fifo_does_not() {
    for (epochs, began) in [(14, 9), (30, 20)] {
        let sim = scenario(epochs, |sim, e| {
            if e >= began {
                sim.alloc_many(1, 100, 1024);
            }
        });
        let (_, a) = run(&sim);
        assert_eq!(suspect_stacks(&a), vec![1], "began at {began} of {epochs}");
        assert_eq!(a.suspects[0].growth_span.since, began);
        assert_eq!(a.suspects[0].growth_bytes_per_epoch, 100 * 1024);
    }
    let mut fifo = std::collections::VecDeque::new();
    let sim = scenario(14, |sim, e| {
        if e >= 2 {
            fifo.push_back(sim.alloc_many(2, 100, 1024));
            if fifo.len() > 4 {
                sim.free_all(fifo.pop_front().unwrap());
            }
        }
    });
    let (_, a) = run(&sim);
    assert_eq!(suspect_stacks(&a), Vec::<u32>::new(), "{:?}", a.few_settled_epochs);
    let sim = scenario(30, |sim, e| {
        if (14..=22).contains(&e) {
            sim.alloc_many(3, 100, 1024);
        }
    });
    let (_, a) = run(&sim);
    assert_eq!(suspect_stacks(&a), Vec::<u32>::new());
    assert_eq!(a.stopped.map(|s| s.sites), Some(1));
}

/// A leak of epochs 10 to 19 of 30 stopped, though its last survivors are
/// of the run's last third: none of the third of its own span after them.
/// The verdict says when it kept them.
#[test]
fn a_leak_that_ran_for_a_while_and_stopped_is_said_to_have_stopped() {
    let sim = scenario(30, |sim, e| {
        if (10..20).contains(&e) {
            sim.alloc_many(1, 100, 1024);
        }
    });
    let (_, a) = run(&sim);
    assert_eq!(suspect_stacks(&a), Vec::<u32>::new());
    assert_eq!(a.verdict.kind, VerdictKind::NoGrowth);
    let stopped = a.stopped.expect("stopped");
    assert_eq!((stopped.sites, stopped.largest_born), (1, Some((10, 19))));
    let msg = a.verdict_message(None);
    assert!(msg.contains("stopped or slowed"), "{msg}");
    // A leak of every epoch to the last still piles up.
    let sim = scenario(30, |sim, e| {
        if e >= 10 {
            sim.alloc_many(1, 100, 1024);
        }
    });
    assert_eq!(suspect_stacks(&run(&sim).1), vec![1]);
}

/// A leak of epochs 2 to 31 of 40 still piles up (its last survivors
/// within a third of its span of the last), at its bytes over the epochs
/// since it began: the verdict says that it kept nothing after epoch 31,
/// and its rate while it ran.
#[test]
fn a_leak_quiet_for_its_last_epochs_may_have_stopped() {
    let sim = scenario(40, |sim, e| {
        if (2..=31).contains(&e) {
            sim.alloc_many(1, 100, 1024);
        }
    });
    let (_, a) = run(&sim);
    assert_eq!(suspect_stacks(&a), vec![1]);
    let msg = a.verdict_message(None);
    assert!(msg.contains("it kept nothing born after epoch 31, 6 settled epochs before the last: it may have stopped, and from epoch 2 to 31 it kept 100 KiB/epoch"), "{msg}");
    // One that goes on is said no such thing.
    let sim = scenario(40, |sim, e| {
        if e >= 2 {
            sim.alloc_many(1, 100, 1024);
        }
    });
    assert!(!run(&sim).1.verdict_message(None).contains("may have stopped"));
}

/// Of two settled epochs, a block kept once in the second and never again
/// (a pymalloc arena opened there) is no pile: only the leak beside it is
/// a suspect, over both. Kept there and at every epoch since, it is one.
#[test]
fn survivors_of_one_settled_epoch_alone_do_not_pile_up() {
    let kept_at_2 = |and_since: bool| {
        scenario(5, |sim, e| {
            sim.alloc_many(1, 100, 1024);
            if e == 2 || (and_since && e > 2) {
                sim.alloc(2, 200 * 1024);
            }
        })
    };
    let (_, a) = run(&kept_at_2(false));
    assert_eq!(a.settled, Some((1, 2)));
    let spans: Vec<(u32, u64, GrowthSpan)> =
        a.suspects.iter().map(|s| (s.stack, s.growth_bytes_per_epoch, s.growth_span)).collect();
    assert_eq!(spans, [(1, 100 * 1024, GrowthSpan { epochs: 2, since: 1 })]);
    let (_, a) = run(&kept_at_2(true));
    assert_eq!(suspect_stacks(&a), [2, 1]);
}

/// One block made at epoch 3 of 12 and never touched again is no block
/// grown in place, even where a steady rise ranks the stacks below the
/// floor: the leak that makes the rise is the only suspect.
#[test]
fn a_block_made_once_is_not_grown_in_place() {
    let sim = scenario(12, |sim, e| {
        // A large heap puts the floor above the leak.
        if e == 0 {
            sim.alloc_many(3, 200, 1 << 20);
        }
        sim.alloc_many(1, 100, 1024);
        if e == 3 {
            sim.alloc(2, 1 << 20);
        }
    });
    let (_, mut a) = run(&sim);
    a.promote_steady_growth();
    assert!(a.noise_floor > 100 * 1024, "{}", a.noise_floor);
    assert!(a.grown_in_place.is_empty(), "{:?}", a.grown_in_place);
    assert_eq!(suspect_stacks(&a), [1]);
    assert!(a.steady_growth_promoted);
}

/// A mapping first made in one of the last, unsettled epochs, the site
/// holding nothing before (a pymalloc arena opened late), shows no growth:
/// it is no block made larger epoch after epoch. A heap block made there
/// may be a buffer's newest copy, grown through another stack before.
#[test]
fn a_mapping_first_made_in_an_unsettled_epoch_is_not_grown_in_place() {
    for made_at in [6, 7] {
        let mut sim = Sim::new("/opt/app/train");
        sim.mapping_stack(2, vec![0x40_1000]);
        for e in 0..8 {
            sim.alloc_many(1, 100, 1024);
            if e == made_at {
                sim.alloc(2, 1 << 20);
            }
            sim.mark(&format!("epoch {e}"));
        }
        sim.exit();
        let (_, a) = run(&sim);
        assert!(a.grown_in_place.is_empty(), "made at {made_at}: {:?}", a.grown_in_place);
        assert_eq!(suspect_stacks(&a), [1], "made at {made_at}");
    }
}

/// Garbage a cycle collector frees every tenth epoch, but for one object
/// of each round: the odd survivors of the rounds before are no pile with
/// the garbage of the round to come. A leak beside it still is one.
#[test]
fn garbage_collected_every_few_epochs_is_no_leak_for_the_few_it_leaves() {
    let collected = |leak: bool| {
        let mut garbage = Vec::new();
        scenario(30, |sim, e| {
            garbage.extend(sim.alloc_many(1, 200, 2048));
            if e % 10 == 2 {
                // One object of the round stays (a cycle still referenced).
                let round = std::mem::take(&mut garbage);
                sim.free_all(round.into_iter().skip(1));
            }
            if leak {
                sim.alloc_many(2, 50, 1024);
            }
        })
    };
    let (_, a) = run(&collected(false));
    assert_eq!(suspect_stacks(&a), Vec::<u32>::new());
    assert_eq!(a.verdict.kind, VerdictKind::NoGrowth);
    let (_, a) = run(&collected(true));
    assert_eq!(suspect_stacks(&a), [2]);
}

/// A leak that began at epoch 9 of 12 left survivors of one settled epoch:
/// too few to pile up, and the verdict says it began and kept some of each
/// epoch since. A cache filled once at epoch 9 says nothing of it.
#[test]
fn a_leak_that_began_in_the_last_epochs_is_said_to_have_begun() {
    let began_at_9 = |every_epoch_since: bool| {
        scenario(12, |sim, e| {
            if e == 9 || (every_epoch_since && e > 9) {
                sim.alloc_many(1, 100, 1024);
            }
        })
    };
    let (_, a) = run(&began_at_9(true));
    assert_eq!((a.settled, a.verdict.kind), (Some((1, 9)), VerdictKind::NoGrowth));
    let recent = a.recent_start().expect("a recent start");
    assert_eq!(recent.stack, 1);
    let words = a.recent_start_words("keep (train.py:9)", recent);
    assert_eq!(words, "; keep (train.py:9) began keeping memory at epoch 9 and kept some of each epoch since (300 KiB now, about 100 KiB/epoch): too few epochs to tell a leak from a cache filling up; a longer run tells");
    let (_, once) = run(&began_at_9(false));
    assert!(once.recent_start().is_none(), "{:?}", once.few_settled_epochs);
}

/// A leak every 5th epoch of 16 left survivors of two settled epochs, one
/// in each half: too few to pile up, and the verdict says so. A buffer
/// made in the first epochs and kept says nothing of it.
#[test]
fn a_leak_every_few_epochs_is_said_to_keep_memory_now_and_then() {
    let every_5th = |now_and_then: bool| {
        scenario(16, |sim, e| {
            if (now_and_then && e % 5 == 4) || (!now_and_then && (e == 1 || e == 2)) {
                sim.alloc_many(1, 100, 1024);
            }
        })
    };
    let (_, a) = run(&every_5th(true));
    assert_eq!(a.verdict.kind, VerdictKind::NoGrowth);
    let (lo, hi) = a.settled.expect("settled epochs");
    let sometimes = a.now_and_then().expect("memory kept now and then");
    assert_eq!(sometimes.stack, 1);
    let words = a.now_and_then_words("keep (train.py:9)", sometimes);
    let births: Vec<String> = [4, 9, 14].iter().filter(|e| (lo..=hi).contains(*e)).map(|e| e.to_string()).collect();
    let expected = format!(
        "; keep (train.py:9) kept memory born in {} of the {} settled epochs only (epochs {}; ",
        births.len(),
        hi - lo + 1,
        births.join(", ")
    );
    assert!(words.starts_with(&expected), "{words}");
    assert!(
        words.ends_with(
            "too few to tell a leak that comes now and then from memory kept for a while; a longer run tells"
        ),
        "{words}"
    );
    let (_, kept_early) = run(&every_5th(false));
    assert!(kept_early.now_and_then().is_none(), "{:?}", kept_early.few_settled_epochs);
}

/// A leak that began at epoch 5 of 12 grows at its rate since, above the
/// floor, not at that rate spread over the four epochs before it began.
#[test]
fn a_leak_that_began_late_grows_at_its_rate_since() {
    let sim = scenario(12, |sim, e| {
        if e == 0 {
            sim.alloc_many(5, 100, 1 << 20);
        }
        if e >= 5 {
            sim.alloc_many(1, 3, 50 * 1024);
        }
    });
    let (_, a) = run(&sim);
    assert_eq!(a.settled, Some((1, 9)));
    assert!(a.noise_floor > 100 * 1000 && a.noise_floor < 150 * 1024, "{}", a.noise_floor);
    assert_eq!(suspect_stacks(&a), vec![1]);
    let leak = &a.suspects[0];
    assert_eq!((leak.growth_bytes_per_epoch, leak.growth_span), (150 * 1024, GrowthSpan { epochs: 5, since: 5 }));
    let message = a.verdict_message(Some(Culprit::suspect(leak, "mine (train.py:9)")));
    assert!(
        message.starts_with("mine (train.py:9) keeps about 150 KiB/epoch alive since epoch 5 (1.03 MiB now)"),
        "{message}"
    );
}

#[test]
fn the_noise_floor_follows_the_heap() {
    let (_, a) = run(&small_leak_in_a_large_heap());
    assert!(a.noise_floor > 100 * 1000);
    assert_eq!(suspect_stacks(&a), Vec::<u32>::new());
    assert_eq!(a.verdict.kind, VerdictKind::NoGrowth);
    // The heap grows by 50 KiB an epoch, below the floor: the verdict says
    // so, and how to rank what grows.
    assert!(a.growth_below_floor());
    let message = a.verdict_message(None);
    assert!(
        message.contains("1 stack keeps 50.0 KiB/epoch alive below that floor")
            && message.contains("--noise-floor 25k")
            && !message.contains("no leak found"),
        "{message}"
    );
}

#[test]
fn the_stacks_below_the_floor_that_grow_the_most_are_kept_in_order() {
    let stacks = STACKS_BY_LINE as u32 + 10;
    let sim = scenario(10, |sim, _| {
        for stack in 1..=stacks {
            sim.alloc_many(stack, 1, 16 + u64::from(stack));
        }
    });
    let (_, a) = run_with_floor(&sim, NoiseFloor::Bytes(1 << 20));
    assert_eq!(a.below_floor.stacks, stacks as usize);
    let kept: Vec<u32> = a.below_floor.largest.iter().map(|s| s.stack).collect();
    assert_eq!(kept, (11..=stacks).rev().collect::<Vec<_>>(), "the largest {STACKS_BY_LINE}, largest first");
}

#[test]
fn growth_below_the_floor_names_the_line_most_of_it_goes_through() {
    let (_, a) = run(&small_leak_in_a_large_heap());
    let line = |suspects| Culprit {
        name: "keep (train.py:9)".into(),
        called_from: None,
        growth_bytes_per_epoch: 40 * 1024,
        live_bytes: 400 * 1024,
        suspects,
        memory: LineMemory::Only(Memory::Heap),
        known_as: None,
        born: Vec::new(),
        growth_since: 1,
    };
    // The one stack below the floor is the line's.
    let message = a.verdict_message(Some(line(1)));
    assert!(
        message
            .contains("1 stack keeps 50.0 KiB/epoch alive below that floor, all of it through keep (train.py:9); run"),
        "{message}"
    );
    let mut a = a;
    a.below_floor.stacks = 3;
    let message = a.verdict_message(Some(line(2)));
    assert!(
        message
            .contains(", the largest 50.0 KiB/epoch, 40.0 KiB/epoch of it through keep (train.py:9) in 2 stacks; run"),
        "{message}"
    );
}

#[test]
fn stacks_below_the_floor_promoted_with_their_line_are_suspects() {
    let sim = scenario(10, |sim, _| {
        sim.alloc_many(1, 1, 1000);
        sim.alloc_many(2, 1, 900);
        sim.alloc_many(3, 1, 800);
    });
    let (_, mut a) = run(&sim);
    assert_eq!(a.verdict.kind, VerdictKind::NoGrowth);
    a.promote(&[]);
    assert_eq!((a.suspects.len(), a.below_floor.stacks), (0, 3));
    a.promote(&[3, 1]);
    assert_eq!(a.verdict.kind, VerdictKind::HeapLeak);
    assert_eq!(suspect_stacks(&a), vec![1, 3], "ranked by growth");
    assert!(a.suspects.iter().all(|s| s.below_floor && s.survivors.len() == 10), "{:?}", a.suspects);
    let below = &a.below_floor;
    assert_eq!((below.stacks, below.growth_bytes_per_epoch, below.largest_bytes_per_epoch), (1, 900, 900));
    assert_eq!(below.largest.iter().map(|s| s.stack).collect::<Vec<_>>(), [2]);
    a.promote(&[2]);
    let below = &a.below_floor;
    assert_eq!((below.stacks, below.growth_bytes_per_epoch, below.largest_bytes_per_epoch), (0, 0, 0));
}

#[test]
fn a_noise_floor_given_ranks_what_grows_below_the_scaled_one() {
    let sim = small_leak_in_a_large_heap();
    let (_, a) = run_with_floor(&sim, NoiseFloor::Bytes(25 * 1024));
    assert_eq!(a.noise_floor, 25 * 1024);
    assert_eq!(suspect_stacks(&a), vec![1]);
    assert_eq!(a.verdict.kind, VerdictKind::HeapLeak);
    assert_eq!(a.below_floor, BelowFloor::default());
    // Above the stack's growth it is below the floor again.
    let (_, a) = run_with_floor(&sim, NoiseFloor::Bytes(50 * 1024));
    assert_eq!(suspect_stacks(&a), Vec::<u32>::new());
    assert_eq!(a.below_floor.stacks, 1);
}

#[test]
fn a_long_leak_that_is_most_of_the_heap_stays_above_the_floor() {
    let sim = scenario(3000, |sim, _| {
        sim.alloc(1, 8192);
    });
    let (_, a) = run(&sim);
    // Scaled from the heap at epoch 1, not the leak's, and lowered for the
    // epochs' number.
    assert_eq!(a.noise_floor, NOISE_FLOOR_MIN * FLOOR_FULL_EPOCHS / 2997);
    assert_eq!(suspect_stacks(&a), vec![1]);
}

/// A trace cut after its third snapshot of a program that marked eight
/// epochs: the cut, not the program, left too few, and it is not told to
/// mark more.
#[test]
fn too_few_epochs_in_a_cut_trace_blame_the_cut() {
    let sim = scenario(8, |sim, _| {
        sim.alloc_many(1, 100, 1024);
    });
    let bytes = sim.bytes();
    let records = trace_format::RecordReader::new(&bytes[..]).unwrap().zip(sim.record_offsets());
    let mut snapshots = records.filter(|(record, _)| matches!(record, trace_format::Record::Snapshot(_)));
    let (_, fourth_snapshot) = snapshots.nth(3).unwrap();
    let path = write_temp("trace.bin", &bytes[..fourth_snapshot + 10]);
    let trace = load(&path, &LoadOptions::default()).expect("a cut trace loads");
    let a = analyze_sites(&trace, NoiseFloor::Scaled);
    assert_eq!((a.verdict.kind, a.snapshots), (VerdictKind::TooFewEpochs, 3));
    let msg = a.verdict_message(None);
    assert!(msg.contains("the trace was cut after them (see the warning)"), "{msg}");
    assert!(!msg.contains("run 4 marked epochs"), "{msg}");
}

#[test]
fn too_few_epochs() {
    for epochs in [1, 2, 3] {
        let mut sim = Sim::new("/opt/app/train");
        for e in 0..epochs {
            sim.alloc_many(1, 100, 1024);
            sim.mark(&format!("{e}"));
        }
        let (_, a) = run(&sim);
        assert_eq!(a.verdict.kind, VerdictKind::TooFewEpochs, "{epochs} epochs");
        assert!(a.suspects.is_empty());
        // A program that marks is asked for more marked epochs, not marks.
        assert_eq!(a.epochs_from, EpochSource::Marks);
        let msg = a.verdict_message(None);
        assert!(msg.contains("run 4 marked epochs or more") && !msg.contains("TRACER_EPOCH_SECONDS"), "{msg}");
        // Killed (no exit snapshot): no exit is said to close the last.
        assert!(!msg.contains("exit"), "{msg}");
        sim.exit();
        let (_, a) = run(&sim);
        assert!(a.verdict_message(None).contains("the exit closes the last"), "{epochs} epochs");
    }
    // One cut by time slices alone is told how to mark, and to shorten the
    // slices only when they were on.
    for slices in [Some("marks; time slices of 10 s until the first mark"), None] {
        let mut sim = Sim::new("/opt/app/train");
        if let Some(epochs) = slices {
            sim.process_mut().settings.push((trace_format::EPOCHS_SETTING.into(), epochs.into()));
        }
        sim.snapshot(EpochCause::Timer, "10s");
        sim.exit();
        let (_, a) = run(&sim);
        assert_eq!((a.verdict.kind, a.epochs_from), (VerdictKind::TooFewEpochs, EpochSource::Program));
        let msg = a.verdict_message(None);
        assert!(msg.contains("call tracer_mark(label)"), "{msg}");
        let shorter = msg.contains("time slices of 10 s") && msg.contains("set TRACER_EPOCH_SECONDS shorter");
        assert_eq!(shorter, slices.is_some(), "{msg}");
        assert_eq!(msg.contains("set TRACER_EPOCH_SECONDS to cut the run into time slices"), slices.is_none(), "{msg}");
    }
    // Exit is dropped only when 3 other snapshots remain.
    let sim = scenario(2, |sim, _| {
        sim.alloc_many(1, 100, 1024);
    });
    let (_, a) = run(&sim);
    assert_eq!((a.snapshots, a.dropped_exit, a.verdict.kind), (3, false, VerdictKind::TooFewEpochs));
    // The exit's own, kept to show its figures, is no epoch of the job.
    assert_eq!(a.analysed_snapshots(), 0..2);
    let msg = a.verdict_message(None);
    assert!(msg.contains("only 2 epochs to analyze"), "{msg}");
    let sim = scenario(3, |sim, _| {
        sim.alloc_many(1, 100, 1024);
    });
    let (_, a) = run(&sim);
    assert_eq!((a.snapshots, a.dropped_exit, a.verdict.kind), (3, true, VerdictKind::TooFewEpochs));
    assert_eq!(a.analysed_snapshots(), 0..3);
    let sim = scenario(4, |sim, _| {
        sim.alloc_many(1, 100, 1024);
    });
    let (_, a) = run(&sim);
    assert_eq!((a.snapshots, a.dropped_exit, a.verdict.kind), (4, true, VerdictKind::HeapLeak));
    assert_eq!(suspect_stacks(&a), vec![1]);
}

/// Too few epochs cut at DataLoader passes: the advice is more passes,
/// not marks the program never needed.
#[test]
fn too_few_dataloader_passes_ask_for_more_passes() {
    let mut sim = Sim::new("/usr/bin/python3");
    for e in 1..=3 {
        sim.alloc_many(1, 100, 1024);
        sim.snapshot(trace_format::EpochCause::Auto, &format!("DataLoader pass {e}"));
    }
    sim.exit();
    let (_, a) = run(&sim);
    assert_eq!((a.verdict.kind, a.epochs_from), (VerdictKind::TooFewEpochs, EpochSource::DataLoaderPasses { seen: 4 }));
    let msg = a.verdict_message(None);
    assert!(msg.contains("cut where DataLoader passes began, 4 passes were seen,"), "{msg}");
    assert!(msg.contains("run 5 passes or more") && msg.contains("the later ones went unseen"), "{msg}");
    assert!(!msg.contains("TRACER_EPOCH_SECONDS"), "{msg}");
}

/// A worker forked for one pass has its exit snapshot only: the advice is
/// its parent's report, not marks or a longer run.
#[test]
fn a_worker_of_one_pass_is_sent_to_its_parents_report() {
    let mut sim = Sim::new("/usr/bin/python3");
    let process = sim.process_mut();
    process.forked_from = Some(4242);
    let how = format!(
        "{}: this forked DataLoader worker closes one each time its parent does",
        trace_format::FOLLOWS_PARENTS_EPOCHS
    );
    process.settings.push((trace_format::EPOCHS_SETTING.into(), how));
    sim.alloc_many(1, 100, 1024);
    sim.exit();
    let (_, a) = run(&sim);
    assert_eq!(a.epochs_from, EpochSource::ParentsEpochs { parent: Some(4242) });
    let msg = a.verdict_message(None);
    assert!(
        msg.contains("persistent_workers=True")
            && msg.contains("this process follows its parent's epochs (pid 4242) and closed too few of them")
            && msg.contains("or its parent closed too few epochs, which its parent's report says how to mend"),
        "{msg}"
    );
    assert!(!msg.contains("tracer_mark"), "{msg}");
}

/// A spawned child that ended inside its parent's first epoch (a spawned
/// DataLoader worker of one pass) gets the advice of a child following its
/// parent's epochs; one that marked its own epochs, that of marks.
#[test]
fn a_spawned_child_of_one_parents_epoch_is_sent_to_its_parents_report() {
    let spawned = |marks: u32| {
        let mut sim = Sim::new("/usr/bin/python3");
        let how = format!(
            "{}: this spawned multiprocessing child closes one each time its parent does from the first its parent closes after it started",
            trace_format::FOLLOWS_PARENTS_EPOCHS
        );
        sim.process_mut().settings.push((trace_format::EPOCHS_SETTING.into(), how));
        for e in 0..marks {
            sim.mark(&format!("epoch {e}"));
        }
        sim.alloc_many(1, 100, 1024);
        sim.exit();
        run(&sim).1
    };
    let a = spawned(0);
    assert_eq!(a.epochs_from, EpochSource::ParentsEpochs { parent: None });
    assert!(a.verdict_message(None).contains("this process follows its parent's epochs and closed too few"));
    assert_eq!(spawned(2).epochs_from, EpochSource::Marks);
}

#[test]
fn a_killed_run_is_analysed_up_to_its_last_snapshot() {
    let mut sim = Sim::new("/opt/app/train");
    for e in 0..8 {
        sim.alloc_many(1, 100, 1024);
        sim.mark(&format!("{e}"));
    }
    let mut bytes = sim.bytes();
    bytes.extend_from_slice(&[200, 0, 0, 0, 5, 1, 2]); // a torn record
    let path = write_temp("killed.bin", &bytes);
    let trace = load(&path, &LoadOptions::default()).unwrap();
    assert!(matches!(trace.end, crate::trace::EndKind::Truncated { .. }));
    let a = analyze_sites(&trace, NoiseFloor::Scaled);
    assert_eq!(a.snapshots, 8);
    assert!(!a.dropped_exit);
    assert_eq!(suspect_stacks(&a), vec![1]);
}

#[test]
fn full_snapshots_give_the_same_result_as_deltas() {
    let (_, a) = run(&crate::synth::behaviours(10, true, false));
    let (_, b) = run(&crate::synth::behaviours(10, true, true));
    assert_eq!(a.suspects, b.suspects);
    assert_eq!(a.verdict, b.verdict);
}

/// Ten marked epochs of churn (40 blocks freed within the epoch), each
/// after `change` has had its way with the simulation.
fn churning_epochs(mut change: impl FnMut(&mut Sim)) -> Sim {
    let mut sim = Sim::new("/opt/app/train");
    for e in 0..10 {
        change(&mut sim);
        let t = sim.alloc_many(4, 10, 4096);
        sim.free_all(t);
        sim.mark(&format!("{e}"));
    }
    sim.exit();
    sim
}

/// Ten marked epochs, each leaking 100 KiB at stack 1 after `change(sim, epoch)`.
fn leaking_epochs(mut change: impl FnMut(&mut Sim, u64)) -> Sim {
    let mut sim = Sim::new("/opt/app/train");
    for e in 0..10 {
        change(&mut sim, e);
        sim.alloc_many(1, 100, 1024);
        sim.mark(&format!("{e}"));
    }
    sim
}

/// A trace of a program whose malloc was not the tracer's holds no heap:
/// its verdict says so, with the tracer's warning, not that nothing grew.
#[test]
fn a_heap_the_tracer_never_saw_is_not_said_not_to_grow() {
    let mut sim = churning_epochs(|sim| sim.rss_extra += 64 << 20);
    let warning = format!(
        "malloc is /opt/lib/libjemalloc.so.2's, loaded before libtracer.so: the program's {} (its mappings do)",
        trace_format::HEAP_NOT_TRACED
    );
    sim.process_mut().settings.push((trace_format::WARNING_SETTING.into(), warning.clone()));
    let (_, a) = run(&sim);
    assert_eq!(a.verdict.kind, VerdictKind::HeapNotTraced, "not growth outside the heap either");
    let msg = a.verdict_message(None);
    assert!(msg.starts_with("the trace holds none of the heap") && msg.contains(&warning), "{msg}");
}

#[test]
fn growth_outside_the_heap() {
    let sim = churning_epochs(|sim| sim.rss_extra += 64 << 20);
    let (_, a) = run(&sim);
    assert!(a.suspects.is_empty());
    assert_eq!(a.verdict.kind, VerdictKind::GrowthOutsideHeap);
    let msg = a.verdict_message(None);
    assert!(msg.contains("RSS grew by") && msg.contains("outside what the tracer sees"), "{msg}");
    assert!(msg.contains("no heap or mapping site") && !msg.contains("written for the first time"), "{msg}");
    assert!(msg.contains("over 8 epochs (64.0 MiB/epoch) while"), "{msg}");
}

/// A block of 256 MiB allocated once and written 16 MiB more every epoch
/// (a preallocated replay buffer): the RSS grows, the heap stays; the
/// verdict says the growth may be its filling, and names it.
#[test]
fn rss_growth_within_a_block_not_yet_written_may_be_its_filling() {
    let mut sim = Sim::new("/opt/app/train");
    sim.alloc(7, 256 << 20);
    sim.unwritten = 250 << 20;
    for e in 0..10 {
        sim.unwritten -= 16 << 20;
        sim.mark(&format!("{e}"));
    }
    sim.exit();
    let (_, mut a) = run(&sim);
    assert_eq!(a.verdict.kind, VerdictKind::GrowthOutsideHeap);
    assert_eq!(a.largest_live, Some((7, 256 << 20)));
    a.site_names.insert(7, "fill (replay.py:12)".into());
    let msg = a.verdict_message(None);
    assert!(msg.contains("they held 154 MiB more than was resident at epoch 1 (the largest block is fill (replay.py:12), 256 MiB): the growth may be their pages written for the first time"), "{msg}");
    assert!(msg.contains("or the growth is outside what the tracer sees"), "{msg}");
}

/// RSS growing by more than a tenth in a jump at the start of the
/// analysis, then flat (a process settling: new threads' arenas made
/// once), is not growth; the same jump late in the epochs is.
#[test]
fn rss_that_stopped_growing_early_is_not_growth() {
    let jump_at = |jump: u32| {
        let mut epoch = 0;
        churning_epochs(move |sim| {
            if epoch == jump {
                sim.rss_extra += 64 << 20;
            }
            epoch += 1;
        })
    };
    let (_, a) = run(&jump_at(2));
    assert!(!a.verdict.rss_still_rising && a.verdict.rss_growth() > 60 << 20);
    assert_eq!(a.verdict.kind, VerdictKind::NoGrowth);
    assert_eq!(run(&jump_at(7)).1.verdict.kind, VerdictKind::GrowthOutsideHeap);
}

/// An RSS that rose early by freed memory malloc kept, then stayed (the
/// parent of DataLoader workers started afresh each pass): no growth, and
/// the verdict says what the change was.
#[test]
fn freed_memory_malloc_kept_early_is_named_beside_no_growth() {
    let jump_at_2 = |kept: u64| {
        let mut epoch = 0;
        churning_epochs(move |sim| {
            if epoch == 2 {
                sim.rss_extra += 24 << 20;
                sim.allocator_free += kept;
            }
            epoch += 1;
        })
    };
    let (_, a) = run(&jump_at_2(24 << 20));
    assert_eq!(a.verdict.kind, VerdictKind::NoGrowth);
    let msg = a.verdict_message(None);
    assert!(
        msg.ends_with("; 24.0 MiB of that change is freed memory glibc's malloc kept (the `malloc free` column), not memory the program holds"),
        "{msg}"
    );
    // Kept memory that is less than half of the change is not named.
    let (_, a) = run(&jump_at_2(8 << 20));
    assert!(!a.verdict_message(None).contains("malloc free"), "{}", a.verdict_message(None));
}

/// RSS that grows by memory malloc keeps after the program freed it.
#[test]
fn freed_memory_that_malloc_keeps() {
    let sim = churning_epochs(|sim| {
        sim.rss_extra += 64 << 20;
        sim.allocator_free += 60 << 20;
    });
    let (_, a) = run(&sim);
    assert!(a.suspects.is_empty());
    assert_eq!(a.verdict.kind, VerdictKind::AllocatorRetention);
    let msg = a.verdict_message(None);
    assert!(msg.contains("glibc's malloc held") && msg.contains("MALLOC_ARENA_MAX=2"), "{msg}");
    assert!(msg.contains("over 8 epochs (64.0 MiB/epoch) while"), "{msg}");

    // Kept memory that explains less than half of the growth: still outside.
    let sim = churning_epochs(|sim| {
        sim.rss_extra += 64 << 20;
        sim.allocator_free += 16 << 20;
    });
    assert_eq!(run(&sim).1.verdict.kind, VerdictKind::GrowthOutsideHeap);
}

/// RSS that grows by pages of a mapped file the program reads.
#[test]
fn pages_of_mapped_files() {
    let sim = churning_epochs(|sim| {
        sim.rss_extra += 32 << 20;
        sim.file_pages += 32 << 20;
    });
    let (_, a) = run(&sim);
    assert!(a.suspects.is_empty());
    assert_eq!(a.verdict.kind, VerdictKind::FilePages);
    assert_eq!(a.verdict.file_growth(), a.verdict.rss_growth());
    let msg = a.verdict_message(None);
    assert!(msg.contains("the resident pages of files mapped into the process grew by"), "{msg}");
    assert!(msg.contains("over 8 epochs (32.0 MiB/epoch) while"), "{msg}");
    assert!(msg.contains("np.memmap") && msg.contains("do not run the machine out of memory as a leak does"), "{msg}");

    // File pages that explain less than half of the growth: still outside.
    let sim = churning_epochs(|sim| {
        sim.rss_extra += 32 << 20;
        sim.file_pages += 8 << 20;
    });
    assert_eq!(run(&sim).1.verdict.kind, VerdictKind::GrowthOutsideHeap);
    // A steady count of them (a library's code) is no growth.
    let sim = churning_epochs(|sim| sim.file_pages = 400 << 20);
    assert_eq!(run(&sim).1.verdict.kind, VerdictKind::NoGrowth);
    // Growth too small for a verdict of its own is named beside the RSS's:
    // less than a tenth of the RSS, in two jumps.
    let mut epoch = 0;
    let sim = churning_epochs(|sim| {
        sim.rss_extra = sim.rss_extra.max(1 << 30);
        if epoch == 3 || epoch == 6 {
            sim.rss_extra += 8 << 20;
            sim.file_pages += 8 << 20;
        }
        epoch += 1;
    });
    let (_, a) = run(&sim);
    assert_eq!(a.verdict.kind, VerdictKind::NoGrowth);
    let msg = a.verdict_message(None);
    assert!(
        msg.contains("RSS changed by 16.0 MiB (16.0 MiB of it pages of mapped files) and the live heap by"),
        "{msg}"
    );
    // The same growth epoch after epoch is a trend, however small.
    let sim = churning_epochs(|sim| {
        sim.rss_extra = sim.rss_extra.max(1 << 30) + (2 << 20);
        sim.file_pages += 2 << 20;
    });
    assert_eq!(run(&sim).1.verdict.kind, VerdictKind::FilePages);
}

/// RSS rising a few MiB every epoch, far less than a tenth of it, with
/// nothing traced to show for it: growth outside the heap all the same.
#[test]
fn small_steady_growth_outside_the_heap_is_growth() {
    let sim = churning_epochs(|sim| sim.rss_extra = sim.rss_extra.max(1 << 30) + (2 << 20));
    let (_, a) = run(&sim);
    assert!(a.verdict.rss_rose_steadily);
    assert_eq!(a.verdict.kind, VerdictKind::GrowthOutsideHeap);
    assert!(a.verdict_message(None).starts_with("RSS grew by 16.0 MiB over 8 epochs"), "{}", a.verdict_message(None));
    // Below 4 MiB in all it is not noticeable, steady or not.
    let sim = churning_epochs(|sim| sim.rss_extra = sim.rss_extra.max(1 << 30) + (256 << 10));
    assert_eq!(run(&sim).1.verdict.kind, VerdictKind::NoGrowth);
}

#[test]
fn only_a_rise_at_every_step_is_steady() {
    assert!(rose_steadily(&[10, 12, 14, 16]));
    assert!(rose_steadily(&[10, 11, 14, 16]), "a step of a quarter of the mean or more");
    assert!(!rose_steadily(&[10, 12, 12, 16]), "a pause");
    assert!(!rose_steadily(&[10, 16, 15, 18]), "a fall");
    assert!(!rose_steadily(&[10, 10, 10, 10]), "no growth");
    assert!(!rose_steadily(&[10, 30, 31, 32, 33]), "a jump, then a crawl");
    assert!(!rose_steadily(&[10, 20, 30]), "too few readings");
    // A long run's steps: each rises by 100 give or take 150 of noise, and
    // the windows of them rise steadily; until the rise stops.
    let noisy: Vec<u64> = (0..2000u64).map(|i| 10_000 + 100 * i + [0, 150, 20, 130][i as usize % 4]).collect();
    assert!(noisy.windows(2).any(|step| step[1] < step[0]));
    assert!(rose_steadily(&noisy));
    let stopped: Vec<u64> = noisy.iter().enumerate().map(|(i, &v)| v.min(noisy[1500]) + (i % 2) as u64).collect();
    assert!(!rose_steadily(&stopped), "no rise over the last windows");
    // 64 KiB kept every 25th of 498 steps: each window holds one or more.
    let every_25th: Vec<u64> = (0..498u64).map(|i| (80 << 20) + (64 << 10) * (i / 25) + 300 * (i % 3)).collect();
    assert!(rose_steadily(&every_25th));
    assert!(!rose_steadily(&[]));
}

/// A forked process writing pages it shares with its parent: its RSS stays
/// flat, its private memory grows, no site is responsible.
#[test]
fn a_forked_process_copying_its_parents_memory() {
    let sim = churning_epochs(|sim| *sim.copied_from_parent.get_or_insert(0) += 16 << 20);
    let (_, a) = run(&sim);
    assert!(a.suspects.is_empty());
    assert_eq!(a.verdict.kind, VerdictKind::CopiedFromParent);
    assert_eq!(a.verdict.rss_growth(), 0);
    let msg = a.verdict_message(None);
    assert!(msg.contains("private memory grew by") && msg.contains("(16.0 MiB/epoch)"), "{msg}");
    assert!(msg.contains("copying the pages it shares with its parent"), "{msg}");

    // Private memory that its own heap grew by is no copy.
    let mut sim = Sim::new("/opt/app/worker");
    sim.copied_from_parent = Some(64 << 20);
    for e in 0..10 {
        let kept = sim.alloc_many(1, 1, 16 << 20);
        if e % 2 == 1 {
            sim.free_all(kept);
        }
        sim.mark(&format!("{e}"));
    }
    sim.exit();
    let (_, a) = run(&sim);
    assert_ne!(a.verdict.kind, VerdictKind::CopiedFromParent, "{:?}", a.verdict);
    assert!(a.verdict.private_growth() > 0);

    // A leak beside the copying: the leak's verdict, which tells of both.
    let sim = leaking_epochs(|sim, e| sim.copied_from_parent = Some(e * (16 << 20)));
    let (_, a) = run(&sim);
    assert_eq!(a.verdict.kind, VerdictKind::HeapLeak);
    let msg = a.verdict_message(Some(Culprit::suspect(&a.suspects[0], "f")));
    assert!(msg.contains("also copying pages it shares with its parent"), "{msg}");

    // Memory outside the heap that is new grows the RSS as much: no copy.
    let sim = churning_epochs(|sim| {
        *sim.copied_from_parent.get_or_insert(0) += 16 << 20;
        sim.rss_extra += 16 << 20;
    });
    assert_eq!(run(&sim).1.verdict.kind, VerdictKind::GrowthOutsideHeap);

    // Nor is a flat private figure, or one never measured.
    for copied in [Some(64 << 20), None] {
        let sim = churning_epochs(|sim| sim.copied_from_parent = copied);
        assert_eq!(run(&sim).1.verdict.kind, VerdictKind::NoGrowth);
    }
}

#[test]
fn the_tracers_own_growth_is_not_taken_for_growth_outside_the_heap() {
    // New stacks every epoch grow the tracer's tables, not the program.
    let sim = churning_epochs(|sim| sim.tracer_bytes += 64 << 20);
    let (_, a) = run(&sim);
    assert!(a.suspects.is_empty());
    assert_eq!(a.verdict.kind, VerdictKind::NoGrowth);
    assert_eq!(a.verdict.program_rss_growth(), 0);
    let msg = a.verdict_message(None);
    assert!(msg.contains("RSS changed by 0 B (not counting the tracer's own memory, which grew by"), "{msg}");

    // Growth of its own beside the tracer's is still told.
    let sim = churning_epochs(|sim| {
        sim.tracer_bytes += 64 << 20;
        sim.rss_extra += 64 << 20;
    });
    let (_, a) = run(&sim);
    assert_eq!(a.verdict.kind, VerdictKind::GrowthOutsideHeap);
    assert_eq!(a.verdict.program_rss_growth(), a.verdict.rss_growth() / 2);
}

#[test]
fn a_leak_with_much_more_rss_growth_says_the_rest_is_outside_the_heap() {
    let sim = leaking_epochs(|sim, _| sim.rss_extra += 64 << 20);
    let (_, a) = run(&sim);
    assert_eq!(a.verdict.kind, VerdictKind::HeapLeak);
    let msg = a.verdict_message(Some(Culprit::suspect(&a.suspects[0], "f")));
    assert!(msg.contains("outside what the tracer sees"), "{msg}");
    assert!(!msg.contains("malloc free") && !msg.contains("pages of mapped files"), "{msg}");

    // Pages of mapped files make part of that rest: said, with how much.
    let sim = leaking_epochs(|sim, _| {
        sim.rss_extra += 64 << 20;
        sim.file_pages += 32 << 20;
    });
    let (_, a) = run(&sim);
    let msg = a.verdict_message(Some(Culprit::suspect(&a.suspects[0], "f")));
    assert!(msg.contains(" of it pages of mapped files) is outside what the tracer sees"), "{msg}");

    // Freed memory malloc kept makes much of that rest: said, with how much.
    let sim = leaking_epochs(|sim, _| {
        sim.rss_extra += 64 << 20;
        sim.allocator_free += 48 << 20;
    });
    let (_, a) = run(&sim);
    assert_eq!(a.verdict.kind, VerdictKind::HeapLeak);
    let msg = a.verdict_message(Some(Culprit::suspect(&a.suspects[0], "f")));
    let rest = "is freed memory glibc's malloc kept (384 MiB of it, the `malloc free` column) and memory outside";
    assert!(msg.contains(rest), "{msg}");
    // More of it than the leak's growth: mending the leak's line would
    // leave it, so how to have it handed back is said too.
    assert!(msg.contains("what the tracer sees; for the freed memory kept, set MALLOC_ARENA_MAX=2"), "{msg}");

    // Freed memory kept beside a leak's growth, the RSS no more than twice
    // it: said too, for the RSS's growth it makes.
    let leak_and_kept = |kept: u64| {
        let sim = leaking_epochs(|sim, _| {
            sim.alloc_many(2, 1, 4 << 20);
            sim.rss_extra += kept;
            sim.allocator_free += kept;
        });
        let (_, a) = run(&sim);
        assert_eq!(a.verdict.kind, VerdictKind::HeapLeak);
        a.verdict_message(Some(Culprit::suspect(&a.suspects[0], "f")))
    };
    let msg = leak_and_kept(3 << 20);
    assert!(msg.contains("glibc's malloc also kept 24.0 MiB more freed memory than at epoch 1"), "{msg}");
    assert!(!msg.contains("outside what the tracer sees"), "{msg}");
    let msg = leak_and_kept(256 << 10);
    assert!(!msg.contains("malloc free"), "a little kept is not worth a word: {msg}");
}

/// Mappings of 64 MiB kept every epoch with 1 MiB of each written: the
/// verdict says their bytes are address space, most of it not resident.
#[test]
fn mappings_kept_but_not_written_are_said_not_to_be_resident() {
    let reserving = |written: u64| {
        let mut sim = Sim::new("/opt/app/train");
        sim.mapping_stack(9, vec![0x40_1000]);
        for e in 0..10 {
            sim.alloc(9, 64 << 20);
            sim.unwritten += (64 << 20) - written;
            sim.mark(&format!("{e}"));
        }
        sim.exit();
        let (_, a) = run(&sim);
        assert_eq!((a.verdict.kind, suspect_stacks(&a)), (VerdictKind::HeapLeak, vec![9]));
        a.verdict_message(Some(Culprit::suspect(&a.suspects[0], "reserve")))
    };
    let msg = reserving(1 << 20);
    assert!(msg.contains("the mappings' bytes are address space, and the RSS grew by 8.00 MiB: most of what they grew by is not resident"), "{msg}");
    assert!(!reserving(64 << 20).contains("address space"));
}

#[test]
fn state_before_the_last_snapshot_is_rebuilt() {
    let sim = all_behaviours(6, true);
    let path = write_temp("t.bin", &sim.bytes());
    let trace = load(&path, &LoadOptions { capture: (0..7).collect(), ..LoadOptions::default() }).unwrap();
    let replay = load(&path, &LoadOptions::default()).unwrap();
    let last = trace.snapshots.len() - 1;
    for i in [last - 1, last] {
        // Every pair, the dead ones kept for their allocated counters too.
        let mut a = trace.state(i).unwrap().pairs.clone();
        let mut b = replay.state(i).unwrap().pairs.clone();
        a.sort();
        b.sort();
        assert_eq!(a, b, "state {i}");
    }
    let before_last = &trace.state(last - 1).unwrap().pairs;
    assert!(before_last.iter().any(|(_, c)| c.live_count == 0), "the rebuilt state has dead pairs");
    // Live bytes per snapshot match the heap totals of each snapshot.
    for (i, snap) in trace.snapshots.iter().enumerate() {
        let live: u64 = trace.state(i).unwrap().pairs.iter().map(|(_, c)| c.live_bytes).sum();
        assert_eq!(live, snap.heap_live_bytes, "snapshot {i}");
    }
}

/// A leak, buffers freed an epoch later and temporaries, over 8 marked
/// epochs; an exec fails in each epoch of `failed_execs` (8: the one the
/// exit closes), between two rounds of temporaries, the first freed
/// before it.
fn run_with_failed_execs(failed_execs: &[u32]) -> Sim {
    let mut sim = Sim::new("/opt/app/train");
    let mut buffers = Vec::new();
    for e in 0..=8 {
        sim.alloc_many(1, 100, 1024);
        let temporaries = sim.alloc_many(4, 10, 65536);
        sim.free_all(temporaries);
        if failed_execs.contains(&e) {
            sim.failed_exec();
        }
        if e % 2 == 0 {
            let temporaries = sim.alloc_many(4, 10, 65536);
            sim.free_all(temporaries);
        }
        let new_buffers = sim.alloc_many(3, 50, 8192);
        sim.free_all(std::mem::replace(&mut buffers, new_buffers));
        if e < 8 {
            sim.mark(&format!("epoch {e}"));
        }
    }
    sim.exit();
    sim
}

#[test]
fn a_failed_exec_costs_no_epoch() {
    let load_all = |sim: &Sim| {
        let path = write_temp("trace.bin", &sim.bytes());
        load(&path, &LoadOptions { capture: (0..9).collect(), ..LoadOptions::default() }).unwrap()
    };
    let plain = load_all(&run_with_failed_execs(&[]));
    let plain_analysis = analyze_sites(&plain, NoiseFloor::Scaled);
    for failed_execs in [&[0u32][..], &[3, 4], &[7], &[8], &[1, 8]] {
        let trace = load_all(&run_with_failed_execs(failed_execs));
        let epochs = |t: &Trace| t.snapshots.iter().map(|s| (s.epoch, s.cause)).collect::<Vec<_>>();
        assert_eq!(epochs(&trace), epochs(&plain), "{failed_execs:?}");
        assert!(trace.saw_end_record, "{failed_execs:?}");
        assert!(trace.notices.iter().any(|n| n.text.starts_with("exec failed")), "{failed_execs:?}");
        for i in 0..plain.snapshots.len() {
            let sorted = |t: &Trace| {
                let mut pairs = t.state(i).unwrap().pairs.clone();
                pairs.sort();
                pairs
            };
            assert_eq!(sorted(&trace), sorted(&plain), "{failed_execs:?}: state {i}");
        }
        let a = analyze_sites(&trace, NoiseFloor::Scaled);
        assert_eq!((a.snapshots, a.dropped_exit), (plain_analysis.snapshots, plain_analysis.dropped_exit));
        assert_eq!(suspect_stacks(&a), [1], "{failed_execs:?}");
        assert_eq!(a.suspects[0].survivors, plain_analysis.suspects[0].survivors, "{failed_execs:?}");
    }
    // Rebuilt from the undo log rather than captured: the state before an
    // exit that follows a failed exec.
    let path = write_temp("trace.bin", &run_with_failed_execs(&[8]).bytes());
    let rebuilt = load(&path, &LoadOptions::default()).unwrap();
    let mut pairs = rebuilt.state(7).unwrap().pairs.clone();
    let mut expected = plain.state(7).unwrap().pairs.clone();
    pairs.sort();
    expected.sort();
    assert_eq!(pairs, expected);
}

#[test]
fn time_slices_before_the_first_mark_are_start_up() {
    // Five 10 s slices of start-up that keep growing (imports, a data set),
    // then four marked epochs that each leak, then exit.
    let mut sim = Sim::new("/usr/bin/python3");
    for e in 0..5 {
        sim.alloc_many(9, 1000, 4096);
        sim.snapshot(trace_format::EpochCause::Timer, &format!("{}s", (e + 1) * 10));
    }
    for e in 0..4 {
        sim.alloc_many(1, 100, 1024);
        let t = sim.alloc_many(4, 100, 4096);
        sim.free_all(t);
        sim.mark(&format!("epoch {}", e + 1));
    }
    sim.exit();
    let (trace, a) = run(&sim);
    assert_eq!(trace.warm_up_snapshots(), 5);
    assert_eq!((a.first, a.snapshots, a.reference), (5, 4, 8));
    assert_eq!(a.settled, Some((6, 6)));
    assert_eq!(suspect_stacks(&a), vec![1]);
    assert_eq!(a.verdict.kind, VerdictKind::HeapLeak);
}

#[test]
fn passes_cut_before_the_first_mark_are_start_up() {
    // A time slice, then three quarter-epochs cut by an evaluation every N
    // steps, each keeping a quarter of what an epoch keeps, then four epochs
    // the program marks: the rate is a marked epoch's.
    let mut sim = Sim::new("/usr/bin/python3");
    sim.alloc_many(9, 1000, 4096);
    sim.snapshot(trace_format::EpochCause::Timer, "10s");
    for pass in 1..=3 {
        sim.alloc_many(1, 25, 1024);
        sim.snapshot(trace_format::EpochCause::Auto, &format!("DataLoader pass {pass}"));
    }
    for e in 0..4 {
        sim.alloc_many(1, 100, 1024);
        sim.mark(&format!("epoch {}", e + 1));
    }
    sim.exit();
    let (trace, a) = run(&sim);
    assert_eq!(trace.warm_up_snapshots(), 4);
    assert_eq!((a.first, a.snapshots, a.reference), (4, 4, 7));
    assert_eq!(suspect_stacks(&a), vec![1]);
    assert_eq!(a.suspects[0].growth_bytes_per_epoch, 100 * 1024);
}

#[test]
fn a_run_cut_only_by_time_starts_at_epoch_0() {
    let mut sim = Sim::new("/opt/app/train");
    for e in 0..8 {
        sim.alloc_many(1, 100, 1024);
        sim.snapshot(trace_format::EpochCause::Timer, &format!("{e}"));
    }
    let (trace, a) = run(&sim);
    assert_eq!(trace.warm_up_snapshots(), 0);
    assert_eq!(a.first, 0);
    assert_eq!(suspect_stacks(&a), vec![1]);
}

/// Batches a DataLoader's workers send arrive in shared memory the main
/// process maps; keeping them keeps the mappings.
#[test]
fn a_shared_memory_leak_is_labelled_shared() {
    let mut sim = Sim::new("/opt/app/train");
    sim.shared_mapping_stack(9, vec![0x40_1000, 0x40_0010]);
    for e in 0..10 {
        sim.alloc(9, 512 << 10);
        sim.mark(&format!("epoch {e}"));
    }
    sim.exit();
    let (_, a) = run(&sim);
    assert_eq!(suspect_stacks(&a), vec![9]);
    assert_eq!(a.suspects[0].memory, Memory::Shared);
    let msg = a.verdict_message(Some(Culprit::suspect(&a.suspects[0], "train")));
    assert!(msg.contains("train keeps about 512 KiB/epoch of shared memory alive"), "{msg}");
}

#[test]
fn a_mapping_leak_is_ranked_with_the_heap_and_labelled_mapped() {
    let mut sim = Sim::new("/opt/app/train");
    sim.mapping_stack(9, vec![0x40_1000, 0x40_0010]);
    for e in 0..10 {
        sim.alloc(9, 256 << 10);
        sim.alloc_many(1, 10, 1024);
        // Mapped and unmapped within the epoch: not a leak.
        let scratch = sim.alloc(9, 4 << 20);
        sim.free(scratch);
        sim.mark(&format!("epoch {e}"));
    }
    sim.exit();
    let (trace, a) = run(&sim);
    assert_eq!(suspect_stacks(&a), vec![9, 1]);
    assert_eq!((a.suspects[0].memory, a.suspects[1].memory), (Memory::Mapped, Memory::Heap));
    assert_eq!(a.suspects[0].growth_bytes_per_epoch, 256 << 10);
    // The heap figures stay the heap's; the mappings are counted apart.
    assert_eq!(trace.snapshots[3].heap_live_bytes, 4 * 10 * 1024);
    assert_eq!(trace.snapshots[3].mapped_live_bytes, 4 * (256 << 10));
    assert_eq!(a.verdict.mapped_growth(), 8 * (256 << 10));
    let msg = a.verdict_message(Some(Culprit::suspect(&a.suspects[0], "map_buffers")));
    assert!(msg.contains("256 KiB/epoch of anonymous mapped memory"), "{msg}");
    assert!(msg.contains("traced mappings by 2.00 MiB"), "{msg}");
}

#[test]
fn rss_growth_explained_by_a_mapping_made_larger_every_epoch_is_that_mapping() {
    // One mapping made again, larger, every epoch, the old one unmapped:
    // nothing piles up, yet the tracer saw the growth, and its stack makes it.
    let mut sim = Sim::new("/opt/app/train");
    sim.mapping_stack(9, vec![0x40_1000]);
    let mut previous = None;
    for e in 0..10u64 {
        let now = sim.alloc(9, (e + 1) * (16 << 20));
        if let Some(old) = previous.replace(now) {
            sim.free(old);
        }
        sim.mark(&format!("epoch {e}"));
    }
    sim.exit();
    let (_, mut a) = run(&sim);
    assert!(a.suspects.is_empty(), "nothing piles up: {:?}", a.suspects);
    a.promote_steady_growth();
    assert!(a.verdict.rss_growth() > 100 << 20);
    assert_eq!(a.verdict.kind, VerdictKind::HeapLeak, "not growth outside the heap");
    assert_eq!(suspect_stacks(&a), vec![9]);
    assert!(a.suspects[0].grown_in_place && a.steady_growth_promoted);
    assert_eq!(a.suspects[0].growth_bytes_per_epoch, 16 << 20);
}

/// A buffer grown by 4 MiB an epoch whose first copies came from another
/// stack (a Python bytearray: its first resize goes through another path
/// than the later ones): what it held at epoch 1 is not its growth.
#[test]
fn a_block_grown_in_place_grows_by_the_rise_at_most() {
    let mut sim = Sim::new("/opt/app/train");
    let mut buffer = None;
    for e in 0..8u64 {
        let grown = sim.alloc(if e < 2 { 2 } else { 1 }, (e + 1) * (4 << 20));
        if let Some(old) = buffer.replace(grown) {
            sim.free(old);
        }
        sim.mark(&format!("epoch {e}"));
    }
    sim.exit();
    let (_, mut a) = run(&sim);
    a.promote_steady_growth();
    assert_eq!(suspect_stacks(&a), vec![1]);
    assert!(a.suspects[0].grown_in_place);
    assert_eq!(a.suspects[0].growth_bytes_per_epoch, 4 << 20);
}

/// A buffer realloc'd larger every epoch beside allocations that pile up
/// elsewhere: both are suspects, the buffer counted for no more than the
/// rise the pile leaves; a buffer that grows by less than the floor is not.
#[test]
fn a_block_grown_every_epoch_beside_a_pile_is_a_suspect_too() {
    let grown_beside_a_pile = |buffer_growth: u64| {
        let mut sim = Sim::new("/opt/app/train");
        let mut buffer = None;
        for e in 0..10u64 {
            let grown = sim.alloc(1, (e + 1) * buffer_growth);
            if let Some(old) = buffer.replace(grown) {
                sim.free(old);
            }
            sim.alloc_many(2, 5, 1000);
            sim.mark(&format!("epoch {e}"));
        }
        sim.exit();
        let (_, mut a) = run(&sim);
        assert_eq!(suspect_stacks(&a), vec![2], "the pile, before the steady rise is looked at");
        a.promote_steady_growth();
        a
    };
    let a = grown_beside_a_pile(12_000);
    let ranked: Vec<(u32, u64, bool)> =
        a.suspects.iter().map(|s| (s.stack, s.growth_bytes_per_epoch, s.grown_in_place)).collect();
    assert_eq!(ranked, vec![(1, 12_000, true), (2, 5_000, false)]);
    assert_eq!(a.verdict.kind, VerdictKind::HeapLeak);
    let msg = a.verdict_message(None);
    assert!(msg.contains("the top suspect is one block, larger at every epoch's end"), "{msg}");

    let a = grown_beside_a_pile(2_000);
    assert_eq!(suspect_stacks(&a), vec![2], "below the floor: {:?}", a.suspects);
}

/// A buffer realloc'd larger every epoch: one block alive, its newest
/// copy, and the heap rising by its growth. A stack below the floor, in a
/// heap rising steadily by more than the floor, is ranked with it.
#[test]
fn a_block_grown_every_epoch_and_small_stacks_of_a_steady_rise_are_suspects() {
    let mut sim = Sim::new("/opt/app/train");
    let mut buffer = None;
    for e in 0..10u64 {
        // A large heap puts the floor at about 400 KiB an epoch.
        if e == 0 {
            sim.alloc_many(3, 400, 1 << 20);
        }
        let grown = sim.alloc(1, (e + 1) * (256 << 10));
        if let Some(old) = buffer.replace(grown) {
            sim.free(old);
        }
        sim.alloc_many(2, 1, 300 << 10);
        sim.mark(&format!("epoch {e}"));
    }
    sim.exit();
    let (_, mut a) = run(&sim);
    a.promote_steady_growth();
    assert!(a.noise_floor > 300 << 10, "{}", a.noise_floor);
    assert_eq!(a.verdict.kind, VerdictKind::HeapLeak);
    assert!(a.steady_growth_promoted);
    let ranked: Vec<(u32, u64, bool, bool)> =
        a.suspects.iter().map(|s| (s.stack, s.growth_bytes_per_epoch, s.grown_in_place, s.below_floor)).collect();
    assert_eq!(ranked, vec![(2, 300 << 10, false, true), (1, 256 << 10, true, true)]);
    let msg = a.verdict_message(None);
    assert!(msg.contains("rose at every epoch"), "{msg}");

    // The same growth in a jump or two is not a steady rise: no suspect.
    let mut sim = Sim::new("/opt/app/train");
    sim.alloc_many(3, 400, 1 << 20);
    for e in 0..10u64 {
        if e == 4 || e == 7 {
            sim.alloc_many(2, 1, 1 << 20);
        }
        sim.mark(&format!("epoch {e}"));
    }
    sim.exit();
    let (_, mut a) = run(&sim);
    a.promote_steady_growth();
    assert!(a.suspects.is_empty() && !a.steady_growth_promoted, "{:?}", a.suspects);
}

/// A page kept every epoch (one block of 4 KiB, the least growth that
/// counts, and the floor of a small heap): the heap rises at every epoch
/// by exactly that, and the stack is a suspect. A little less is no leak,
/// which the verdict words as less than the least growth that counts.
#[test]
fn a_steady_rise_of_the_least_growth_that_counts_is_a_leak() {
    let sim = scenario(12, |sim, _| {
        sim.alloc(1, NOISE_FLOOR_MIN);
    });
    let (_, mut a) = run(&sim);
    assert_eq!((a.noise_floor, a.least_growth), (NOISE_FLOOR_MIN, NOISE_FLOOR_MIN));
    assert!(a.suspects.is_empty(), "no stack passes the floor: {:?}", a.suspects);
    a.promote_steady_growth();
    assert_eq!(a.verdict.kind, VerdictKind::HeapLeak);
    let ranked: Vec<(u32, u64)> = a.suspects.iter().map(|s| (s.stack, s.growth_bytes_per_epoch)).collect();
    assert_eq!(ranked, vec![(1, NOISE_FLOOR_MIN)]);

    let sim = scenario(12, |sim, _| {
        sim.alloc(1, 4000);
    });
    let (_, mut a) = run(&sim);
    a.promote_steady_growth();
    assert_eq!(a.verdict.kind, VerdictKind::NoGrowth);
    let message = a.verdict_message(None);
    assert!(
        message.starts_with(
            "no leak found: no allocation or mapping site keeps 4.00 KiB/epoch or more alive epoch after epoch;"
        ),
        "{message}"
    );
}

/// CPython's specializing interpreter reaches one Python line along another
/// native path once the instruction is specialized: two stack ids whose
/// frames symbolize the same (here two instructions of one line), the
/// first epochs' survivors under one, the later ones' under the other.
/// They are one site: one suspect with all the bytes, not a suspect with
/// the later epochs' bytes only.
#[test]
fn stacks_that_symbolize_the_same_are_one_suspect_with_all_the_survivors() {
    use trace_format::{Frame, PyCode, PyFrame};
    let mut sim = Sim::new("/usr/bin/python3.11");
    // Code units 0 to 7 are line 12, 8 to 15 line 13 (no-column entries).
    let linetable = vec![0x80 | (13 << 3) | 7, 0x00, 0x80 | (13 << 3) | 7, 0x02];
    sim.py_code(PyCode {
        id: 0x7f00_1000,
        filename: "/job/loader.py".into(),
        qualname: "collate".into(),
        first_line: 12,
        linetable,
    });
    let at = |instruction| {
        vec![Frame::Native(0x40_0100), Frame::Python(PyFrame { code: 0x7f00_1000, instruction, entry: true })]
    };
    let (generic, specialized, next_line) = (1, 2, 3);
    sim.stack_frames(generic, at(2));
    sim.stack_frames(specialized, at(5));
    sim.stack_frames(next_line, at(9));
    for e in 0..10 {
        // 100 KiB an epoch; the instruction is specialized during epoch 3.
        match e {
            0..=2 => drop(sim.alloc_many(generic, 100, 1024)),
            3 => drop((sim.alloc_many(generic, 50, 1024), sim.alloc_many(specialized, 50, 1024))),
            _ => drop(sim.alloc_many(specialized, 100, 1024)),
        }
        // The next line leaks in as many epochs as the generic path: alone,
        // too few to pile up.
        if e <= 3 {
            sim.alloc_many(next_line, 100, 1024);
        }
        sim.mark(&format!("epoch {e}"));
    }
    sim.exit();
    let (_, a) = run(&sim);
    assert_eq!(a.settled, Some((1, 7)));
    assert_eq!(suspect_stacks(&a), vec![generic], "{:?}", a.suspects);
    let s = &a.suspects[0];
    assert_eq!(s.other_stacks, [specialized]);
    assert_eq!(s.growth_bytes_per_epoch, 100 * 1024, "every settled epoch's survivors");
    assert_eq!((s.live_bytes, s.live_count), (10 * 100 * 1024, 1000));
    assert_eq!(s.settled_with_survivors, 7, "epoch 3, under both stacks, counts once");
    let survivors: Vec<(u32, u64, u64)> = s.survivors.iter().map(|v| (v.birth_epoch, v.count, v.bytes)).collect();
    assert_eq!(survivors, (0..10).map(|e| (e, 100, 100 * 1024)).collect::<Vec<_>>());
}

/// A container that doubles its buffer as it is filled by 1 MiB an epoch
/// (a `std::vector`): the live heap rises in steps, at the epochs the
/// buffer is replaced by one twice its size, while the RSS rises at every
/// epoch as the buffer's pages are written. Its stack grew in place and is
/// the suspect. The same steps without the RSS rising at every epoch are
/// no trend.
#[test]
fn a_buffer_doubled_at_some_epochs_under_a_steady_rss_rise_is_a_suspect() {
    let doubling = |rss_rises: bool, epochs: u64| {
        let mut sim = Sim::new("/opt/app/train");
        let mut buffer: Option<(u64, u64)> = None;
        for e in 0..epochs {
            let filled = (e + 1) << 20;
            let capacity = filled.next_power_of_two();
            if buffer.is_none_or(|(_, held)| held < filled) {
                let grown = sim.alloc(1, capacity);
                if let Some((old, _)) = buffer.replace((grown, capacity)) {
                    sim.free(old);
                }
            }
            if rss_rises {
                sim.rss_extra = (64 << 20) + filled - capacity;
            }
            sim.mark(&format!("epoch {e}"));
        }
        sim.exit();
        let (_, mut a) = run(&sim);
        a.promote_steady_growth();
        a
    };
    // However the doublings fall among the epochs: the last one analysed
    // at the middle epoch itself (8 and 16 epochs) too.
    for epochs in [6, 8, 10, 12, 16, 20, 24] {
        let a = doubling(true, epochs);
        assert_eq!(a.traced_rise, TracedRise::InSteps, "{epochs} epochs");
        assert_eq!(a.verdict.kind, VerdictKind::HeapLeak, "{epochs} epochs");
        assert_eq!(suspect_stacks(&a), vec![1], "{epochs} epochs");
        assert!(a.suspects[0].grown_in_place && a.steady_growth_promoted);
        // The rate it is filled at, not its capacity's, which runs ahead.
        assert_eq!(a.suspects[0].growth_bytes_per_epoch, 1 << 20, "{epochs} epochs");
        let msg = a.verdict_message(None);
        assert!(msg.contains("one block, larger at every epoch's end"), "{msg}");
    }

    let a = doubling(false, 12);
    assert_eq!(a.traced_rise, TracedRise::NotSteadily);
    assert!(a.suspects.is_empty() && !a.steady_growth_promoted, "{:?}", a.suspects);
}

#[test]
fn readings_rise_by_steps_when_they_never_fall_and_still_rise_late() {
    assert!(rose_by_steps(&[2, 4, 4, 8, 8, 8, 8, 16]));
    assert!(!rose_by_steps(&[2, 4, 4, 8, 8, 8, 8, 8]), "flat in its second half");
    // A buffer doubled at epochs 2, 4 and 8 of 1 to 7, or of 1 to 15: the
    // doubling into the middle epoch counts.
    assert!(rose_by_steps(&[2, 4, 4, 8, 8, 8, 8]));
    assert!(rose_by_steps(&[2, 4, 4, 8, 8, 8, 8, 16, 16, 16, 16, 16, 16, 16, 16]));
    assert!(!rose_by_steps(&[2, 4, 4, 8, 8, 8, 8, 8, 8]), "flat after the middle epoch");
    assert!(!rose_by_steps(&[2, 4, 3, 8, 8, 8, 8, 16]), "a fall");
    assert!(!rose_by_steps(&[2, 4, 8]), "too few readings");
}

/// A job marking every step: thousands of epochs, each leaking a few
/// hundred bytes. Beyond FLOOR_FULL_EPOCHS settled epochs the floors per
/// epoch are lowered in proportion, so the leak is a suspect as it would
/// be over fewer, longer epochs; over fifty epochs the floor stays 4 KiB.
#[test]
fn a_small_leak_over_thousands_of_epochs_is_a_suspect() {
    let (_, a) = run(&scenario(2000, |sim, _| {
        sim.alloc(1, 256);
    }));
    assert_eq!(a.noise_floor, NOISE_FLOOR_MIN * FLOOR_FULL_EPOCHS / 1997);
    assert_eq!(suspect_stacks(&a), vec![1]);
    assert_eq!(a.suspects[0].growth_bytes_per_epoch, 256);

    let (_, a) = run(&scenario(50, |sim, _| {
        sim.alloc(1, 256);
    }));
    assert_eq!(a.noise_floor, NOISE_FLOOR_MIN);
    assert!(a.suspects.is_empty(), "{:?}", a.suspects);
}

/// One helper (`cache_result`, train.py:6) keeps 70 KiB an epoch, called
/// from four callers in turn: four stacks, each with survivors of one or
/// two of the seven settled epochs, too few alone. Together they leave
/// survivors of every one: the line makes suspects of all three, and
/// keeps all the bytes. A cache refreshed at two epochs on a line of its
/// own stays out.
#[test]
fn stacks_of_one_line_with_too_few_epochs_alone_pile_up_together() {
    use trace_format::{Frame, PyCode, PyFrame};
    const PER_EPOCH: u64 = 70 * 1024;
    let mut sim = Sim::new("/usr/bin/python3.11");
    // Each function's instructions are all on its first line.
    let one_line = vec![0x80 | (13 << 3) | 7, 0x00];
    let functions = [
        ("cache_result", 6),
        ("train_step", 10),
        ("eval_step", 14),
        ("log_step", 18),
        ("save_step", 20),
        ("refresh", 22),
    ];
    for (i, (qualname, line)) in functions.into_iter().enumerate() {
        sim.py_code(PyCode {
            id: 0x7f00_1000 + i as u64,
            filename: "/job/train.py".into(),
            qualname: qualname.into(),
            first_line: line,
            linetable: one_line.clone(),
        });
    }
    let python = |code: u64, entry| Frame::Python(PyFrame { code: 0x7f00_1000 + code, instruction: 2, entry });
    let (callers, cache) = ([1, 2, 3, 4], 5);
    for caller in callers {
        sim.stack_frames(caller, vec![Frame::Native(0x40_0100), python(0, false), python(u64::from(caller), true)]);
    }
    sim.stack_frames(cache, vec![Frame::Native(0x40_0100), python(5, true)]);
    for e in 0..10 {
        sim.alloc_many(callers[e % 4], 70, 1024);
        if e == 2 || e == 6 {
            sim.alloc_many(cache, 200, 1024);
        }
        sim.mark(&format!("epoch {e}"));
    }
    sim.exit();
    let path = write_temp("trace.bin", &sim.bytes());
    let trace = load(&path, &LoadOptions::default()).expect("synthetic trace loads");
    let mut symbolizer = Symbolizer::new(&trace.process, &trace.modules, &trace.pycode);

    let alone = analyze_sites(&trace, NoiseFloor::Scaled);
    assert_eq!((alone.settled, alone.settled_epochs_needed()), (Some((1, 7)), 3));
    assert!(alone.suspects.is_empty(), "{:?}", alone.suspects);
    let few: Vec<(u32, usize)> = alone.few_settled_epochs.iter().map(|s| (s.stack, s.settled_with_survivors)).collect();
    assert_eq!(few, [(5, 2), (2, 2), (3, 2), (4, 2), (1, 1)], "the most growth first");

    let a = crate::render::analyze_by_line(&trace, NoiseFloor::Scaled, &mut symbolizer);
    assert_eq!(a.verdict.kind, VerdictKind::HeapLeak);
    assert_eq!(suspect_stacks(&a), vec![2, 3, 4, 1]);
    assert!(a.suspects.iter().all(|s| s.piles_up_only_with_line && !s.below_floor), "{:?}", a.suspects);
    let growths: Vec<u64> = a.suspects.iter().map(|s| s.growth_bytes_per_epoch).collect();
    assert_eq!(growths, [2 * PER_EPOCH / 7, 2 * PER_EPOCH / 7, 2 * PER_EPOCH / 7, PER_EPOCH / 7]);
    assert_eq!(a.few_settled_epochs.iter().map(|s| s.stack).collect::<Vec<_>>(), [cache], "two epochs of seven");
    assert!(a.grown_in_place.iter().all(|s| s.stack == cache), "{:?}", a.grown_in_place);

    let report = crate::render::Report::build(&trace, &a, &mut symbolizer, 10, NoiseFloor::Scaled);
    let line = &report.lines[0];
    assert_eq!((report.lines.len(), &line.ranks[..]), (1, &[1, 2, 3, 4][..]));
    assert_eq!((line.growth_bytes_per_epoch, line.live_bytes), (PER_EPOCH, 10 * PER_EPOCH), "the whole leak");
    assert!(
        report
            .verdict_message
            .starts_with("cache_result (train.py:6) keeps about 70.0 KiB/epoch alive (700 KiB now) through 4 stacks;"),
        "{}",
        report.verdict_message
    );
}

/// A Python function of `sim` all on its first line, `line`, as a frame
/// that stacks can hold.
fn python_line(sim: &mut Sim, code: u64, qualname: &str, line: u32) -> trace_format::Frame {
    sim.py_code(trace_format::PyCode {
        id: code,
        filename: "/job/train.py".into(),
        qualname: qualname.into(),
        first_line: line,
        linetable: vec![0x80 | (13 << 3) | 7, 0x00],
    });
    trace_format::Frame::Python(trace_format::PyFrame { code, instruction: 2, entry: true })
}

/// A leaking line's stacks below the floor that pile up too are suspects
/// with it, the rest of its leak (a tensor's bookkeeping beside its data);
/// such a stack of a line that does not leak stays below the floor, as
/// does one keeping a few bytes an epoch beside the line's 100 KiB.
#[test]
fn a_leaking_lines_small_stacks_that_pile_up_are_suspects_with_it() {
    use trace_format::Frame;
    let mut sim = Sim::new("/usr/bin/python3.11");
    let (leaking, other) =
        (python_line(&mut sim, 0x7f00_1000, "keep", 10), python_line(&mut sim, 0x7f00_2000, "log", 20));
    let (data, bookkeeping, elsewhere, crumbs, first_call) = (1, 2, 3, 4, 5);
    sim.stack_frames(data, vec![Frame::Native(0x40_0100), leaking]);
    sim.stack_frames(bookkeeping, vec![Frame::Native(0x40_0200), leaking]);
    sim.stack_frames(elsewhere, vec![Frame::Native(0x40_0300), other]);
    sim.stack_frames(crumbs, vec![Frame::Native(0x40_0400), leaking]);
    sim.stack_frames(first_call, vec![Frame::Native(0x40_0500), leaking]);
    for e in 0..10 {
        sim.alloc_many(data, 100, 1024);
        sim.alloc_many(bookkeeping, 10, 200);
        sim.alloc_many(elsewhere, 10, 200);
        sim.alloc(crumbs, 32);
        if e == 5 {
            // Its survivors of one epoch, too few alone, pile up with the
            // line's; 64 bytes beside its 100 KiB an epoch are no part of it.
            sim.alloc(first_call, 64);
        }
        sim.mark(&format!("epoch {e}"));
    }
    sim.exit();
    let a = run_by_line(&sim);
    assert_eq!(suspect_stacks(&a), vec![data, bookkeeping]);
    assert!(a.suspects[1].below_floor);
    let below: Vec<u32> = a.below_floor.largest.iter().map(|s| s.stack).collect();
    assert_eq!(below, [elsewhere, crumbs]);
}

/// A ring buffer of 100 entries, 20 replaced an epoch once full, keeps
/// the newest five epochs' entries, and a dict of its line resized once
/// at an earlier epoch: beside a leak elsewhere, which keeps the heap
/// growing to the end, neither is blamed: the ring buffer made entries
/// since the middle of the run but did not grow, and the dict alone
/// leaves survivors of one epoch.
#[test]
fn a_ring_buffer_and_a_dict_resized_once_are_not_blamed_beside_a_leak() {
    use trace_format::Frame;
    let mut sim = Sim::new("/usr/bin/python3.11");
    let line = python_line(&mut sim, 0x7f00_1000, "augment", 24);
    let (ring, dict, leak) = (1, 2, 3);
    sim.stack_frames(ring, vec![Frame::Native(0x40_0100), line]);
    sim.stack_frames(dict, vec![Frame::Native(0x40_0200), line]);
    sim.stack(leak, vec![0x40_0300]);
    let mut entries = std::collections::VecDeque::new();
    for e in 0..10 {
        entries.extend(sim.alloc_many(ring, 20, 64 << 10));
        while entries.len() > 100 {
            sim.free(entries.pop_front().unwrap());
        }
        if e == 4 {
            sim.alloc(dict, 4608);
        }
        sim.alloc_many(leak, 100, 3 << 10);
        sim.mark(&format!("epoch {e}"));
    }
    sim.exit();
    let a = run_by_line(&sim);
    assert_eq!(suspect_stacks(&a), vec![leak]);
    let left: Vec<u32> = a.few_settled_epochs.iter().chain(&a.below_floor.largest).map(|s| s.stack).collect();
    assert_eq!(left, [dict], "the ring buffer stopped, the dict alone is too few");
}

/// Four stacks leaking in turn, each in one or two of the seven settled
/// epochs, while the heap rises at every epoch: none piles up alone, the
/// steady rise makes them suspects, and none is called a block made
/// larger, their survivors being of several birth epochs.
#[test]
fn stacks_leaking_in_turn_in_a_steady_rise_are_no_blocks_grown_in_place() {
    let sim = scenario(10, |sim, e| {
        sim.alloc_many(1 + e % 4, 4, 16 << 10);
    });
    let (_, mut a) = run(&sim);
    a.promote_steady_growth();
    assert!(a.steady_growth_promoted);
    assert_eq!(a.verdict.kind, VerdictKind::HeapLeak);
    let mut stacks = suspect_stacks(&a);
    stacks.sort_unstable();
    assert_eq!(stacks, vec![1, 2, 3, 4]);
    assert!(a.suspects.iter().all(|s| !s.grown_in_place && s.survivors.len() >= 2), "{:?}", a.suspects);
    let msg = a.verdict_message(None);
    assert!(!msg.contains("made larger"), "{msg}");
}

/// "By more than the floor" is said of the heap and traced mappings, next
/// to them, not after the RSS, whose rise it would seem to measure.
#[test]
fn the_rise_by_more_than_the_floor_is_the_heaps() {
    assert_eq!(
        traced_rise_words(TracedRise::InSteps, "at every epoch", true),
        "in steps, never falling, by more than the floor an epoch on average, while the RSS rose at every epoch"
    );
    assert_eq!(
        traced_rise_words(TracedRise::InSteps, "at every epoch", false),
        "in steps, never falling, while the RSS rose at every epoch"
    );
    assert_eq!(
        traced_rise_words(TracedRise::EveryEpoch, "at every epoch", true),
        "at every epoch, by more than the floor an epoch on average"
    );
}

/// A heap that shrank is not said to have grown by a negative size.
#[test]
fn the_heap_and_mappings_change_is_worded_by_its_direction() {
    let mib = 1 << 20;
    assert_eq!(heap_and_mappings_change_words(2 * mib, None), "the live heap grew by 2.00 MiB");
    assert_eq!(heap_and_mappings_change_words(-mib, None), "the live heap shrank by 1.00 MiB");
    assert_eq!(
        heap_and_mappings_change_words(2 * mib, Some(mib)),
        "the live heap grew by 2.00 MiB and traced mappings by 1.00 MiB"
    );
    assert_eq!(
        heap_and_mappings_change_words(-mib, Some(0)),
        "the live heap shrank by 1.00 MiB and traced mappings did not change"
    );
    assert_eq!(heap_and_mappings_change_words(0, Some(0)), "the live heap and traced mappings did not change");
}

//! A large trace (thousands of epochs, 100k stacks of 20 frames, 2M stack
//! nodes) is reported correctly (the time it takes is printed, not asserted: speed
//! is measured by scripts/bench, not by tests on a shared machine) (it writes ~100 MB to a
//! temporary file).

use std::io::Write;
use std::time::Instant;

use trace_format::{
    file_header, frame_record, EpochCause, Frame, Module, Process, Record, SiteCounters, Snapshot, StackNode,
    StackNodes,
};

fn site(stack: u32, birth: u32, live: u64, alloc: u64, size: u64) -> SiteCounters {
    SiteCounters {
        stack,
        birth_epoch: birth,
        live_count: live,
        live_bytes: live * size,
        allocated_count: alloc,
        allocated_bytes: alloc * size,
    }
}

#[test]
fn thousands_of_epochs_and_100k_stacks() {
    const EPOCHS: u32 = 2000;
    const STACKS: u32 = 100_000;
    const LEAKS: u32 = 20;
    let path = std::env::temp_dir().join(format!("analyzer-scale-{}.bin", std::process::id()));
    let mut file = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
    let mut buf = file_header().to_vec();
    let emit = |record: Record, buf: &mut Vec<u8>, file: &mut std::io::BufWriter<std::fs::File>| {
        frame_record(&record, buf);
        if buf.len() > 1 << 20 {
            file.write_all(buf).unwrap();
            buf.clear();
        }
    };
    emit(
        Record::Process(Process {
            pid: 1,
            exe: "/opt/app/big".into(),
            cmdline: vec!["big".into()],
            ..Default::default()
        }),
        &mut buf,
        &mut file,
    );
    emit(
        Record::Module(Module {
            path: "/nonexistent/big".into(),
            load_bias: 0,
            segments: vec![(0x40_0000, 0x4000_0000)],
            build_id: vec![],
        }),
        &mut buf,
        &mut file,
    );
    let mut rng = 0x1234_5678_u64;
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    // Stack s (1..=STACKS) is named by node s, its innermost frame; its 19
    // outer frames are nodes of their own (hardly shared: the addresses are
    // random), numbered after the innermost ones, outermost written first.
    let mut next_node = STACKS + 1;
    let mut nodes = 0u64;
    for id in 1..=STACKS {
        let native: Vec<u64> =
            (0..20).map(|d| 0x40_0000 + u64::from(id % 5000) * 0x100 + d * 0x10_0000 + (next() % 64)).collect();
        let mut record = Vec::with_capacity(native.len());
        let mut parent = 0;
        for &ip in native[1..].iter().rev() {
            record.push(StackNode { id: next_node, parent, frame: Frame::Native(ip) });
            parent = next_node;
            next_node += 1;
        }
        record.push(StackNode { id, parent, frame: Frame::Native(native[0]) });
        nodes += record.len() as u64;
        emit(Record::StackNodes(StackNodes { nodes: record }), &mut buf, &mut file);
    }
    let mut heap: u64 = 0;
    let mut previous_buffers: Vec<u32> = Vec::new();
    for epoch in 0..EPOCHS {
        let mut counters = Vec::new();
        for leak in 0..LEAKS {
            counters.push(site(leak + 1, epoch, 10, 10, 1000 * u64::from(leak + 1)));
            heap += 10 * 1000 * u64::from(leak + 1);
        }
        for _ in 0..2000 {
            let s = LEAKS + 1 + (next() % u64::from(STACKS - LEAKS)) as u32;
            counters.push(site(s, epoch, 0, 5, 256));
        }
        for &s in &previous_buffers {
            counters.push(site(s, epoch - 1, 0, 3, 4096));
        }
        previous_buffers = (0..1000).map(|_| LEAKS + 1 + (next() % u64::from(STACKS - LEAKS)) as u32).collect();
        previous_buffers.sort_unstable();
        previous_buffers.dedup();
        for &s in &previous_buffers {
            counters.push(site(s, epoch, 3, 3, 4096));
        }
        counters.sort_by_key(|c| (c.stack, c.birth_epoch));
        counters.dedup_by_key(|c| (c.stack, c.birth_epoch));
        emit(
            Record::Snapshot(Snapshot {
                epoch,
                cause: EpochCause::Timer,
                label: String::new(),
                elapsed_ns: u64::from(epoch + 1) * 1_000_000_000,
                rss_bytes: heap + (100 << 20),
                heap_live_bytes: heap,
                heap_live_count: 0,
                mapped_live_bytes: 0,
                mapped_live_count: 0,
                private_dirty_bytes: 0,
                allocator_free_bytes: 0,
                rss_file_bytes: 0,
                tracer_bytes: 0,
                full: false,
                counters,
            }),
            &mut buf,
            &mut file,
        );
    }
    file.write_all(&buf).unwrap();
    drop(file);
    let size = std::fs::metadata(&path).unwrap().len();

    let start = Instant::now();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_analyzer"))
        .arg("report")
        .arg(&path)
        .arg("--json")
        .arg("--top")
        .arg("50")
        .output()
        .unwrap();
    let took = start.elapsed();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let suspects = v["suspects"].as_array().unwrap();
    eprintln!("trace of {} MB ({nodes} stack nodes) reported in {took:?}", size >> 20);
    let _ = std::fs::remove_file(&path);
    let _ = std::fs::remove_file(path.with_extension("bin.leaks.svg"));
    assert_eq!(suspects.len(), LEAKS as usize, "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(suspects[0]["stack_id"], LEAKS);
    assert_eq!(suspects[0]["frames"].as_array().unwrap().len(), 20, "{}", suspects[0]);
}

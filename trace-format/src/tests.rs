use super::*;

fn sample_records() -> Vec<Record> {
    vec![
        Record::Process(Process {
            pid: 42,
            forked_from: Some(7),
            start_unix_ns: 1_700_000_000_000_000_000,
            exe: "/usr/bin/python3".into(),
            cmdline: vec!["python3".into(), "train.py".into()],
            settings: vec![("epoch_seconds".into(), "10".into())],
        }),
        Record::Module(Module {
            path: "/lib/libc.so.6".into(),
            load_bias: 0x7f00_0000_0000,
            segments: vec![(0x7f00_0000_1000, 0x7f00_0002_0000)],
            build_id: vec![1, 2, 3, 4],
        }),
        Record::StackNodes(StackNodes {
            nodes: vec![
                StackNode { id: 1, parent: 0, frame: Frame::Native(0x0040_1123) },
                StackNode { id: 2, parent: 1, frame: Frame::Native(u64::MAX) },
                StackNode { id: 3, parent: 2, frame: Frame::Python(PyFrame { code: 9, instruction: 17, entry: true }) },
                StackNode { id: 4, parent: 3, frame: Frame::Mapping },
                StackNode { id: 5, parent: 0, frame: Frame::Python(PyFrame { code: 9, instruction: 3, entry: true }) },
                StackNode { id: 6, parent: 2, frame: Frame::PythonLeaf(5) },
                StackNode { id: 7, parent: 2, frame: Frame::SharedMapping },
            ],
        }),
        Record::PyCode(PyCode {
            id: 9,
            filename: "train.py".into(),
            qualname: "Trainer.step".into(),
            first_line: 40,
            linetable: vec![0x80, 0x7f],
        }),
        Record::Snapshot(Snapshot {
            epoch: 2,
            cause: EpochCause::Timer,
            label: "epoch 2".into(),
            elapsed_ns: 5,
            rss_bytes: 1 << 33,
            heap_live_bytes: 1 << 30,
            heap_live_count: 77,
            mapped_live_bytes: 3 << 20,
            mapped_live_count: 3,
            private_dirty_bytes: 7 << 20,
            allocator_free_bytes: 5 << 20,
            rss_file_bytes: 6 << 20,
            tracer_bytes: 4096,
            full: true,
            counters: vec![SiteCounters {
                stack: 3,
                birth_epoch: 1,
                live_count: 5,
                live_bytes: 5000,
                allocated_count: 10,
                allocated_bytes: 10_000,
            }],
        }),
        Record::Notice(Notice { elapsed_ns: 1, text: "stopped".into() }),
        Record::End(End { reason: EndReason::Exec, elapsed_ns: 9 }),
    ]
}

fn encode(records: &[Record]) -> Vec<u8> {
    let mut bytes = file_header().to_vec();
    records.iter().for_each(|record| frame_record(record, &mut bytes));
    bytes
}

/// Each record framed on its own.
fn frame_each(records: &[Record]) -> Vec<Vec<u8>> {
    records
        .iter()
        .map(|record| {
            let mut framed = Vec::new();
            frame_record(record, &mut framed);
            framed
        })
        .collect()
}

#[test]
fn records_round_trip() {
    let records = sample_records();
    let bytes = encode(&records);
    let mut reader = RecordReader::new(&bytes[..]).unwrap();
    let read: Vec<Record> = reader.by_ref().collect();
    assert_eq!(read, records);
    assert_eq!(*reader.end(), TraceEnd::EndOfFile);
}

#[test]
fn every_truncation_is_detected_and_keeps_complete_records() {
    let records = sample_records();
    let bytes = encode(&records);
    let mut boundaries = vec![FILE_HEADER_LEN];
    for framed in frame_each(&records) {
        boundaries.push(boundaries.last().unwrap() + framed.len());
    }
    for cut in FILE_HEADER_LEN..bytes.len() {
        let mut reader = RecordReader::new(&bytes[..cut]).unwrap();
        let read: Vec<Record> = reader.by_ref().collect();
        let complete = boundaries.iter().filter(|&&b| b <= cut).count() - 1;
        assert_eq!(read, records[..complete], "cut at {cut}");
        if boundaries.contains(&cut) {
            assert_eq!(*reader.end(), TraceEnd::EndOfFile);
        } else {
            assert_eq!(*reader.end(), TraceEnd::Truncated { offset: boundaries[complete] as u64 });
        }
    }
}

#[test]
fn a_payload_limit_stops_before_the_first_longer_record() {
    let records = sample_records();
    let bytes = encode(&records);
    let framed = frame_each(&records);
    let payload_len = |framed: &Vec<u8>| (framed.len() - 9) as u32;
    let longest = (0..records.len()).max_by_key(|&i| payload_len(&framed[i])).unwrap();
    let limit = payload_len(&framed[longest]) - 1;
    let first_over = (0..records.len()).find(|&i| payload_len(&framed[i]) > limit).unwrap();
    let offset = FILE_HEADER_LEN + framed[..first_over].iter().map(Vec::len).sum::<usize>();

    let mut reader = RecordReader::new(&bytes[..]).unwrap().with_payload_limit(limit);
    let read: Vec<Record> = reader.by_ref().collect();
    assert_eq!(read, records[..first_over]);
    assert!(matches!(reader.end(), TraceEnd::Damaged { offset: at, .. } if *at == offset as u64), "{:?}", reader.end());

    let mut reader = RecordReader::new(&bytes[..]).unwrap().with_payload_limit(limit + 1);
    assert_eq!(reader.by_ref().collect::<Vec<_>>(), records);
    assert_eq!(*reader.end(), TraceEnd::EndOfFile);
}

#[test]
fn every_flipped_byte_is_detected() {
    let records = sample_records();
    let bytes = encode(&records);
    for at in FILE_HEADER_LEN..bytes.len() {
        for bit in [0x01u8, 0x80] {
            let mut damaged = bytes.clone();
            damaged[at] ^= bit;
            let mut reader = RecordReader::new(&damaged[..]).unwrap();
            let read: Vec<Record> = reader.by_ref().collect();
            assert!(read.len() < records.len(), "flip at {at} went unnoticed");
            assert!(records.starts_with(&read), "flip at {at} produced a wrong record");
            assert!(matches!(reader.end(), TraceEnd::Damaged { .. } | TraceEnd::Truncated { .. }));
        }
    }
}

#[test]
fn header_errors() {
    assert!(matches!(RecordReader::new(&b""[..]), Err(ReadError::TooShort)));
    assert!(matches!(RecordReader::new(&b"LEAK"[..]), Err(ReadError::TooShort)));
    // The magic whole and part of the rest of the header: a trace cut short.
    let header = file_header();
    for cut in [MAGIC.len(), MAGIC.len() + 2, header.len() - 1] {
        assert!(matches!(RecordReader::new(&header[..cut]), Err(ReadError::TooShort)), "cut at {cut}");
    }
    assert!(matches!(RecordReader::new(&b"hello world, not a trace"[..]), Err(ReadError::NotATrace)));
    assert!(matches!(RecordReader::new(&b"\x7fELF"[..]), Err(ReadError::NotATrace)));
    let mut newer = file_header();
    newer[8..10].copy_from_slice(&(FORMAT_VERSION + 1).to_le_bytes());
    assert!(matches!(RecordReader::new(&newer[..]), Err(ReadError::NewerVersion { .. })));
    let mut older = file_header();
    older[8..10].copy_from_slice(&(OLDEST_READABLE_VERSION - 1).to_le_bytes());
    assert!(matches!(RecordReader::new(&older[..]), Err(ReadError::OlderVersion { .. })));
}

#[test]
fn varints_cover_the_full_range() {
    for value in [0, 1, 127, 128, 300, u32::MAX as u64, u64::MAX - 1, u64::MAX] {
        let mut out = Vec::new();
        Encoder::new(&mut out).u64(value);
        let mut d = Decoder::new(&out);
        assert_eq!(d.u64().unwrap(), value);
        d.finish().unwrap();
    }
    let too_long = [0xffu8; 11];
    assert_eq!(Decoder::new(&too_long).u64(), Err(DecodeError::Overflow));
}

#[test]
fn version_2_traces_read_as_traces_without_mappings() {
    let mut records = sample_records();
    for record in &mut records {
        match record {
            Record::StackNodes(nodes) => {
                nodes.nodes.retain(|n| !matches!(n.frame, Frame::Mapping | Frame::PythonLeaf(_) | Frame::SharedMapping))
            }
            Record::Snapshot(snapshot) => {
                snapshot.mapped_live_bytes = 0;
                snapshot.mapped_live_count = 0;
                snapshot.private_dirty_bytes = 0;
                snapshot.allocator_free_bytes = 0;
                snapshot.rss_file_bytes = 0;
            }
            _ => {}
        }
    }
    let mut bytes = file_header_of_version(2).to_vec();
    records.iter().for_each(|record| frame_record_of_version(2, record, &mut bytes));
    let mut reader = RecordReader::new(&bytes[..]).unwrap();
    let read: Vec<Record> = reader.by_ref().collect();
    assert_eq!(read, records);
    assert_eq!(*reader.end(), TraceEnd::EndOfFile);
    // A version 2 snapshot is shorter: the mapped totals are not in it.
    let snapshot = records.iter().find(|r| matches!(r, Record::Snapshot(_))).unwrap();
    let (mut v2, mut v3) = (Vec::new(), Vec::new());
    frame_record_of_version(2, snapshot, &mut v2);
    frame_record_of_version(3, snapshot, &mut v3);
    assert_eq!(v2.len() + 2, v3.len());
}

/// A trace of `version` holding `record`, which that version cannot say,
/// reads as damage whose reason mentions `what`.
fn assert_damage_in(version: u16, record: &Record, what: &str) {
    let mut bytes = file_header_of_version(version).to_vec();
    frame_record_of_version(version, record, &mut bytes);
    let mut reader = RecordReader::new(&bytes[..]).unwrap();
    assert_eq!(reader.by_ref().count(), 0);
    assert!(matches!(reader.end(), TraceEnd::Damaged { reason, .. } if reason.contains(what)), "{:?}", reader.end());
}

/// A trace of `version` holding a node of `frame`, a kind that version
/// lacks, reads as damage.
fn assert_frame_kind_is_damage_in(version: u16, frame: Frame) {
    let nodes = Record::StackNodes(StackNodes { nodes: vec![StackNode { id: 1, parent: 0, frame }] });
    assert_damage_in(version, &nodes, "frame kind");
}

#[test]
fn a_version_3_frame_kind_in_a_version_2_trace_is_damage() {
    for frame in [Frame::Mapping, Frame::PythonLeaf(1)] {
        assert_frame_kind_is_damage_in(2, frame);
    }
}

#[test]
fn a_snapshot_framed_in_pieces_is_the_framed_record() {
    for record in sample_records() {
        let Record::Snapshot(whole) = record else { continue };
        let mut counters = EncodedCounters::default();
        let more = (0..300).map(|k| SiteCounters {
            stack: k,
            birth_epoch: k / 7,
            live_count: u64::from(k) << 40,
            ..Default::default()
        });
        let all: Vec<SiteCounters> = whole.counters.iter().cloned().chain(more).collect();
        all.iter().for_each(|c| counters.push(c));
        assert_eq!(counters.len(), all.len() as u64);
        let header = Snapshot { counters: Vec::new(), ..whole.clone() };
        let (head, body, tail) = snapshot_frame(&header, &counters);
        let pieces = [head.as_slice(), body, &tail].concat();
        let mut framed = Vec::new();
        frame_record(&Record::Snapshot(Snapshot { counters: all, ..whole }), &mut framed);
        assert_eq!(pieces, framed);
        return;
    }
    panic!("no snapshot among the sample records");
}

#[test]
fn a_parent_epoch_reads_back_in_version_4_and_is_damage_in_version_3() {
    let snapshot =
        Record::Snapshot(Snapshot { cause: EpochCause::Parent, label: "parent epoch 3".into(), ..Default::default() });
    let mut bytes = file_header().to_vec();
    frame_record(&snapshot, &mut bytes);
    let read: Vec<Record> = RecordReader::new(&bytes[..]).unwrap().collect();
    assert_eq!(read, std::slice::from_ref(&snapshot));
    assert_damage_in(3, &snapshot, "epoch cause");
}

#[test]
fn an_exec_epoch_reads_back_in_version_6_and_is_damage_in_version_5() {
    let snapshot = Record::Snapshot(Snapshot { cause: EpochCause::Exec, label: "exec".into(), ..Default::default() });
    let mut bytes = file_header().to_vec();
    frame_record(&snapshot, &mut bytes);
    let read: Vec<Record> = RecordReader::new(&bytes[..]).unwrap().collect();
    assert_eq!(read, std::slice::from_ref(&snapshot));
    assert_damage_in(5, &snapshot, "epoch cause");
}

/// The snapshot among the sample records.
fn sample_snapshot() -> Snapshot {
    let Some(Record::Snapshot(snapshot)) = sample_records().into_iter().find(|r| matches!(r, Record::Snapshot(_)))
    else {
        panic!("no snapshot among the sample records")
    };
    snapshot
}

/// `snapshot` written in a trace of `version`, and read back.
fn read_back_in_version(version: u16, snapshot: &Snapshot) -> Vec<Record> {
    let mut bytes = file_header_of_version(version).to_vec();
    frame_record_of_version(version, &Record::Snapshot(snapshot.clone()), &mut bytes);
    RecordReader::new(&bytes[..]).unwrap().collect()
}

#[test]
fn version_3_snapshots_read_without_private_memory_or_allocator_figures() {
    let snapshot = sample_snapshot();
    assert_ne!(snapshot.private_dirty_bytes, 0);
    assert_ne!(snapshot.allocator_free_bytes, 0);
    let older = Snapshot { private_dirty_bytes: 0, allocator_free_bytes: 0, rss_file_bytes: 0, ..snapshot.clone() };
    assert_eq!(read_back_in_version(3, &snapshot), [Record::Snapshot(older)]);
    let record = Record::Snapshot(snapshot);
    let (mut v3, mut v4) = (Vec::new(), Vec::new());
    frame_record_of_version(3, &record, &mut v3);
    frame_record_of_version(4, &record, &mut v4);
    assert!(v3.len() < v4.len());
}

#[test]
fn version_4_snapshots_read_without_the_pages_of_mapped_files() {
    let snapshot = sample_snapshot();
    assert_ne!(snapshot.rss_file_bytes, 0);
    let older = Snapshot { rss_file_bytes: 0, ..snapshot.clone() };
    assert_eq!(read_back_in_version(4, &snapshot), [Record::Snapshot(older)]);
}

#[test]
fn a_version_4_frame_kind_in_a_version_3_trace_is_damage() {
    assert_frame_kind_is_damage_in(3, Frame::SharedMapping);
}

#[test]
fn descendants_traces_are_the_output_name_numbered() {
    assert_eq!(descendant_trace_numbers("trace.bin.4242", "trace.bin"), Some(vec![4242]));
    assert_eq!(descendant_trace_numbers("trace.bin.4242.1", "trace.bin"), Some(vec![4242, 1]));
    for other in ["trace.bin", "trace.bin.", "trace.bin.leaks.svg", "trace.bin.42.x", "trace.bin42", "run.bin.42"] {
        assert_eq!(descendant_trace_numbers(other, "trace.bin"), None, "{other}");
    }
}

#[test]
fn byte_counts_take_binary_units() {
    assert_eq!(parse_byte_count("524288"), Some(524288));
    assert_eq!(parse_byte_count("512k"), Some(512 << 10));
    assert_eq!(parse_byte_count(" 2M "), Some(2 << 20));
    assert_eq!(parse_byte_count("1g"), Some(1 << 30));
    assert_eq!(parse_byte_count("lots"), None);
    assert_eq!(parse_byte_count("k"), None);
    assert_eq!(parse_byte_count("-4k"), None);
    assert_eq!(parse_byte_count("99999999999g"), None, "overflows");
}

#[test]
fn a_rank_needs_its_number_and_reads_what_else_was_set() {
    let process = |settings: &[(&str, &str)]| Process {
        pid: 1,
        forked_from: None,
        start_unix_ns: 0,
        exe: String::new(),
        cmdline: Vec::new(),
        settings: settings.iter().map(|(name, value)| (name.to_string(), value.to_string())).collect(),
    };
    let full = process(&[(RANK_SETTING, "3"), (LOCAL_RANK_SETTING, "1"), (WORLD_SIZE_SETTING, "4")]);
    assert_eq!(full.rank(), Some(Rank { rank: 3, local_rank: Some(1), world_size: Some(4) }));
    assert_eq!(
        process(&[(RANK_SETTING, "0"), (WORLD_SIZE_SETTING, "x")]).rank(),
        Some(Rank { rank: 0, local_rank: None, world_size: None })
    );
    assert_eq!(process(&[(LOCAL_RANK_SETTING, "1"), (WORLD_SIZE_SETTING, "2")]).rank(), None, "no rank");
    assert_eq!(process(&[(RANK_SETTING, "-1")]).rank(), None);
}

#[test]
fn time_slice_length_is_read_from_the_epochs_setting() {
    let with_epochs =
        |epochs: &str| Process { settings: vec![(EPOCHS_SETTING.into(), epochs.into())], ..Process::default() };
    let cases = [
        ("marks; DataLoader passes until the first mark; time slices of 10 s until the first mark or DataLoader pass", Some(10.0)),
        ("marks; time slices of 0.5 s", Some(0.5)),
        ("marks; no time slices (TRACER_EPOCH_SECONDS=0)", None),
        ("its parent's epochs: this DataLoader worker closes one each time its parent does", None),
    ];
    for (epochs, seconds) in cases {
        assert_eq!(with_epochs(epochs).time_slice_seconds(), seconds, "{epochs}");
    }
    assert_eq!(Process::default().time_slice_seconds(), None);
}

/// The pipes of a process's standard streams read back from their setting,
/// and two processes are neighbours where one's output is the other's input.
#[test]
fn stdio_pipes_read_back_and_tell_pipeline_neighbours() {
    let first = StdioPipes { input: None, output: Some((13, 4001)) };
    let second = StdioPipes { input: Some((13, 4001)), output: Some((13, 4002)) };
    for pipes in [first, second] {
        assert_eq!(StdioPipes::parse(&pipes.setting().unwrap()), pipes);
    }
    assert_eq!(first.setting().as_deref(), Some("out=13:4001"));
    assert_eq!(StdioPipes::default().setting(), None);
    assert!(first.neighbours(&second) && second.neighbours(&first));
    // Commands one after the other writing into one pipe (a script's
    // output piped) are no neighbours; nor are two without pipes.
    let also_writing = StdioPipes { input: None, output: Some((13, 4001)) };
    assert!(!first.neighbours(&also_writing));
    assert!(!StdioPipes::default().neighbours(&StdioPipes::default()));
    assert_eq!(StdioPipes::parse("in=x:1 out=2 other=1:2"), StdioPipes::default());
}

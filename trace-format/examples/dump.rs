//! Prints every record of a trace, one per line: `cargo run --example dump -- trace.bin`.

use std::path::PathBuf;

use trace_format::RecordReader;

fn main() {
    let Some(path) = std::env::args_os().nth(1).map(PathBuf::from) else {
        eprintln!("usage: dump TRACE");
        std::process::exit(2);
    };
    let mut reader = match RecordReader::open(&path) {
        Ok(reader) => reader,
        Err(err) => {
            eprintln!("dump: {}: {err}", path.display());
            std::process::exit(1);
        }
    };
    for record in reader.by_ref() {
        println!("{record:?}");
    }
    println!("end: {:?}", reader.end());
}

//! Human-readable numbers.

/// Bytes in binary units: `512 B`, `4.0 KiB`, `1.50 MiB`.
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 6] = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut value = n as f64 / 1024.0;
    let mut unit = 0;
    // Thresholds where the value rounds up, so that 1,048,575 bytes read
    // 1.00 MiB, not 1024 KiB, and 99.97 KiB 100 KiB, not 100.0 KiB.
    while value >= 1023.5 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if value >= 99.95 {
        format!("{value:.0} {}", UNITS[unit])
    } else if value >= 9.995 {
        format!("{value:.1} {}", UNITS[unit])
    } else {
        format!("{value:.2} {}", UNITS[unit])
    }
}

/// A duration given in nanoseconds: `850 ms`, `12.3 s`, `4m05s`, `2h03m`.
pub fn duration_ns(ns: u64) -> String {
    let ms = ns / 1_000_000;
    if ms < 1000 {
        return format!("{ms} ms");
    }
    let secs = ns as f64 / 1e9;
    if secs < 60.0 {
        return format!("{secs:.1} s");
    }
    let s = ns / 1_000_000_000;
    if s < 3600 {
        format!("{}m{:02}s", s / 60, s % 60)
    } else {
        format!("{}h{:02}m", s / 3600, (s % 3600) / 60)
    }
}

/// A count with thousands separators: `1,234,567`.
pub fn count(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, ch) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(ch);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats() {
        assert_eq!(bytes(0), "0 B");
        assert_eq!(bytes(1023), "1023 B");
        assert_eq!(bytes(4096), "4.00 KiB");
        assert_eq!(bytes(3 << 20), "3.00 MiB");
        // Values that round up to the next unit or precision.
        assert_eq!(bytes((1 << 20) - 1), "1.00 MiB");
        assert_eq!(bytes(1023 * 1024), "1023 KiB");
        assert_eq!(bytes(102_370), "100 KiB");
        assert_eq!(bytes(10_236), "10.0 KiB");
        assert_eq!(bytes(10_220), "9.98 KiB");
        assert_eq!(bytes(u64::MAX), "16.0 EiB");
        assert_eq!(duration_ns(5_000_000), "5 ms");
        assert_eq!(duration_ns(12_340_000_000), "12.3 s");
        assert_eq!(duration_ns(245_000_000_000), "4m05s");
        assert_eq!(count(1234567), "1,234,567");
        assert_eq!(count(12), "12");
    }
}

//! Human sizes such as `64MiB` or `1.5 GiB`, as accepted on the command line and in config.

/// Why a size string was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid size {input:?}: {reason} (examples: 4096, 64KiB, 512MiB, 2GiB)")]
pub struct SizeError {
    /// The text that was given.
    pub input: String,
    /// What is wrong with it.
    pub reason: &'static str,
}

/// Parses a byte count with an optional binary suffix (`B`, `KiB`, `MiB`, `GiB`, `TiB`;
/// `K`, `M`, `G`, `T` and `KB`.. are read as binary too).
pub fn parse_size(input: &str) -> Result<u64, SizeError> {
    let err = |reason| SizeError { input: input.to_string(), reason };
    let text = input.trim();
    let split = text.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    if number.is_empty() {
        return Err(err("no number"));
    }
    let shift = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        _ => return Err(err("unknown unit")),
    };
    if let Ok(whole) = number.parse::<u64>() {
        return whole.checked_mul(1u64 << shift).ok_or(err("too large"));
    }
    let value: f64 = number.parse().map_err(|_| err("not a number"))?;
    let bytes = value * (1u64 << shift) as f64;
    if bytes >= u64::MAX as f64 {
        return Err(err("too large"));
    }
    if bytes.fract() != 0.0 {
        return Err(err("not a whole number of bytes"));
    }
    Ok(bytes as u64)
}

/// Formats a byte count with the largest binary unit that keeps it readable.
pub fn format_size(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_units() {
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert_eq!(parse_size("64KiB").unwrap(), 64 << 10);
        assert_eq!(parse_size("512 MiB").unwrap(), 512 << 20);
        assert_eq!(parse_size("2GiB").unwrap(), 2 << 30);
        assert_eq!(parse_size("1.5G").unwrap(), 3 << 29);
    }

    #[test]
    fn refuses_garbage() {
        assert_eq!(parse_size("lots").unwrap_err().reason, "no number");
        assert_eq!(parse_size("12 parsecs").unwrap_err().reason, "unknown unit");
        assert_eq!(parse_size("99999999999999999999T").unwrap_err().reason, "too large");
        assert_eq!(parse_size("0.3B").unwrap_err().reason, "not a whole number of bytes");
    }
}

//! Values on the command line: sizes (`8M`, `1.5GiB`) and the diff's alignment.

pub(crate) fn parse_size(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let (num, mult) = match s.char_indices().find(|(_, c)| c.is_ascii_alphabetic()) {
        Some((i, _)) => {
            let unit = s[i..].to_ascii_uppercase();
            let mult = match unit.trim_end_matches("IB").trim_end_matches('B') {
                "" => 1u64,
                "K" => 1 << 10,
                "M" => 1 << 20,
                "G" => 1 << 30,
                "T" => 1 << 40,
                _ => return Err(format!("unknown unit in {s:?} (use K, M, G or T)")),
            };
            (&s[..i], mult)
        }
        None => (s, 1),
    };
    let n: f64 = num.trim().parse().map_err(|_| format!("not a size: {s:?}"))?;
    Ok((n * mult as f64) as u64)
}

pub(crate) fn parse_align(s: &str) -> Result<snapshot::diff::Align, String> {
    snapshot::diff::Align::parse(s)
        .ok_or_else(|| format!("unknown alignment {s:?} (iteration, annotation, event or time)"))
}

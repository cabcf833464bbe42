//! Sizes in words, as PyTorch writes them: the one formatter every layer and front end uses.

/// Formats bytes as PyTorch does (`1.5GiB`).
pub fn format_size(bytes: i128) -> String {
    let mut num = bytes as f64;
    for unit in ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei", "Zi"] {
        if num.abs() < 1024.0 {
            return format!("{num:.1}{unit}B");
        }
        num /= 1024.0;
    }
    format!("{num:.1}YiB")
}

//! Figures as the page writes them.

use engine::protocol::{DocInfo, HOST};
use snapshot::stats::format_size;

/// Device `device` of a file as the file names it: a profiler file's own name (`cpu`,
/// `cuda:0`), else `cuda:1`, or `host` for the pinned host memory.
pub(crate) fn device_name(info: &DocInfo, device: u32) -> String {
    if device == HOST {
        return "host".into();
    }
    let named = info.summary.profiler.as_ref().and_then(|p| p.devices.get(device as usize));
    named.cloned().unwrap_or_else(|| format!("cuda:{device}"))
}

/// `1.5 GiB (1610612736 bytes)`.
pub(crate) fn bytes_text(b: u64) -> String {
    format!("{} ({b} bytes)", format_size(i128::from(b)))
}

/// `b - a` with its sign: `+1.0 MiB`, `-512 B`.
pub(crate) fn delta_text(a: u64, b: u64) -> String {
    let d = i128::from(b) - i128::from(a);
    if d > 0 {
        format!("+{}", format_size(d))
    } else {
        format_size(d)
    }
}

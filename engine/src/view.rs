//! How a view is scaled and coloured: the smallest element drawn on its own, the memory
//! axis, the categories' colours.

/// Colours of the categories, in `Category::ALL` order: parameters and optimizer state in
/// cool blues (they sit at the bottom and rarely change), gradients green, inputs and
/// activations warm, the short-lived ones light, unknown grey, memory outside PyTorch's allocator
/// teal, memory from before the recording not split into parameters and optimizer state slate.
pub const CATEGORY_COLOURS: [u32; snapshot::categories::N] =
    [0x3b6ea5, 0x6a51a3, 0x2e9a5b, 0xb07d2b, 0xe0663a, 0xd99ac0, 0xf2c14e, 0xa4aab1, 0x17847f, 0x7d88a8];

/// Elements as thin as `1 / SUBPIXEL` of a pixel row are still drawn on their own.
pub const SUBPIXEL: u64 = 4;

/// Room above the highest total: the y axis ends at `y_max * HEADROOM`.
pub const HEADROOM: f64 = 1.04;

/// The smallest element drawn on its own when `span` bytes span `rows` pixel rows.
pub fn min_bytes(span: u64, rows: u32) -> u64 {
    (span / (u64::from(rows.max(1)) * SUBPIXEL)).max(1)
}

/// A baseline shorter than this share of the peak leaves the axis at zero: it would
/// stretch the plot by less than a tenth.
const BASELINE_SHARE: f64 = 0.1;

/// The memory axis when the user has not zoomed it: from the baseline (`stable` bytes, when
/// asked for, at least a tenth of the peak and below it) or zero, to a little above the peak.
/// Where nothing moves (a trace of one step, a window where nothing changes) every byte is
/// stable: the axis starts at zero, else the plot would show nothing.
pub fn natural_axis(peak: u64, stable: u64, baseline: bool) -> (u64, u64) {
    let lo = if baseline && stable as f64 >= BASELINE_SHARE * peak as f64 && stable < peak { stable } else { 0 };
    (lo, lo + ((peak - lo) as f64 * HEADROOM).ceil() as u64)
}

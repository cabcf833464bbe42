//! A moved window's picture before the worker has drawn it: the last picture's columns
//! shifted and stretched to the new window, so that a pan or a zoom shows at once, and the
//! exact view replaces it when it comes (on a 1 GB file that takes 100 ms and more).
//!
//! The page calls [`preview`] on the view it holds; nothing here asks the worker.

use crate::protocol::{ColumnVm, ViewModel};

/// `vm` as it would look over steps `start..end`: each column shows the old column that
/// held its middle step, and the columns outside the old window are empty (transparent,
/// no bytes). The memory axis, lanes and marks are the old view's. `None` when either
/// window is empty or `vm` has no columns.
pub fn preview(vm: &ViewModel, start: f64, end: f64) -> Option<ViewModel> {
    let n = vm.columns.len();
    let (old, new) = (vm.end - vm.start, end - start);
    // (Written so that a NaN window has no preview either.)
    let positive = |w: f64| w.partial_cmp(&0.0) == Some(std::cmp::Ordering::Greater);
    if n == 0 || !positive(old) || !positive(new) {
        return None;
    }
    let per_column = new / n as f64;
    // The old column under each new one.
    let source: Vec<Option<usize>> = (0..n)
        .map(|c| {
            let middle = start + (c as f64 + 0.5) * per_column;
            let j = ((middle - vm.start) / old * n as f64).floor();
            (j >= 0.0 && j < n as f64).then_some(j as usize)
        })
        .collect();
    let rows = vm.pixels.len() / 4 / n;
    let mut pixels = vec![0u8; rows * n * 4];
    for (to, from) in pixels.chunks_exact_mut(n * 4).zip(vm.pixels.chunks_exact(n * 4)) {
        for (c, j) in source.iter().enumerate() {
            if let Some(j) = *j {
                to[c * 4..c * 4 + 4].copy_from_slice(&from[j * 4..j * 4 + 4]);
            }
        }
    }
    let columns = source
        .iter()
        .enumerate()
        .map(|(c, j)| match *j {
            Some(j) => vm.columns[j].clone(),
            None => ColumnVm {
                step: (start + c as f64 * per_column).max(0.0) as u32,
                total: 0,
                drawn: 0,
                time_us: None,
                allocated: None,
            },
        })
        .collect();
    Some(ViewModel {
        n_steps: vm.n_steps,
        start,
        end,
        y_max: vm.y_max,
        y_lo: vm.y_lo,
        y_top: vm.y_top,
        stable_bytes: vm.stable_bytes,
        peak_step: vm.peak_step,
        peak_bytes: vm.peak_bytes,
        columns,
        bands: Default::default(),
        pixels,
        ooms: vm.ooms.clone(),
        oom_entries: vm.oom_entries.clone(),
        spans: vm.spans.clone(),
        hits: vm.hits,
    })
}

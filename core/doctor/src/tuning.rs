//! Allocator what-ifs: the recorded trace run through the simulated caching allocator
//! ([`memscape_replay::simulate::run()`]) under other settings, against the same run under the
//! file's own settings (both from the live blocks before the recording allocated again, so
//! that they compare like with like), on the device as large as the file says (the bytes the process could
//! reach at its first out-of-memory error, else the device's memory). Each is a simulation of
//! this trace: the program's requests stay as recorded.

use serde::{Deserialize, Serialize};

use crate::units::format_size;
use memscape_format::model::Snapshot;
use memscape_replay::settings::settings;
use memscape_replay::simulate::{run_fresh_from, Policy, Run};
use memscape_replay::state::StateIndex;

/// The settings the doctor tries when fragmentation is a cause.
pub const OFFERED: [&str; 4] = [
    "expandable_segments:True",
    "max_split_size_mb:512",
    "roundup_power2_divisions:4",
    "garbage_collection_threshold:0.8",
];

/// One allocator setting tried on the recorded trace.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Tuning {
    /// The setting, as `PYTORCH_CUDA_ALLOC_CONF` writes it.
    pub conf: String,
    /// The device's bytes the simulation ran on (`None`: no limit known).
    pub capacity_bytes: Option<u64>,
    /// The highest reserved bytes under the setting.
    pub peak_reserved_bytes: u64,
    /// The same under the file's own settings (the simulation's baseline).
    pub baseline_peak_reserved_bytes: u64,
    /// The recording's own highest reserved bytes.
    pub recorded_peak_reserved_bytes: u64,
    /// Requests the simulation could not hold under the setting.
    pub ooms: u64,
    /// The same under the file's own settings.
    pub baseline_ooms: u64,
    /// The recording's out-of-memory errors.
    pub recorded_ooms: u64,
    /// Of them, how many the setting would have served.
    pub recorded_ooms_avoided: u64,
    /// The entry of the first request the setting could not hold.
    pub first_oom_entry: Option<u32>,
    /// What it comes to, in one sentence.
    pub sentence: String,
    /// Reserved bytes over the trace under the setting: the highest in each of up to 240
    /// equal runs of entries.
    pub curve: Vec<u64>,
    /// The same under the file's own settings.
    pub baseline_curve: Vec<u64>,
    /// The recording's own reserved bytes in the same runs.
    pub recorded_curve: Vec<u64>,
}

/// The device's bytes for a simulation of `device`: reserved plus free at its first `oom`
/// entry with `device_free`, else the device's memory where the file says it.
pub fn capacity(snap: &Snapshot, device: usize) -> Option<u64> {
    let t = snap.trace(device);
    let index = crate::oom_entries(snap, device);
    if let Some(&first) = index.iter().find(|&&e| t.device_free(e).is_some()) {
        let free = t.device_free(first)?;
        let reserved = StateIndex::build(snap, device).state_after(snap, first.checked_sub(1)).reserved_bytes;
        return Some(reserved.saturating_add(free));
    }
    snap.device_info().into_iter().find(|d| d.device == device as i64 && d.total_bytes > 0).map(|d| d.total_bytes)
}

/// Runs `device`'s trace under each of `confs` and under the file's settings, on a device of
/// `capacity` bytes. An error names a setting it could not read.
pub fn tune(snap: &Snapshot, device: usize, capacity: Option<u64>, confs: &[&str]) -> Result<Vec<Tuning>, String> {
    let own = Policy { capacity, ..Policy::of(&settings(snap, device)) };
    let policies: Vec<Policy> = confs.iter().map(|c| own.with_conf(c)).collect::<Result<_, _>>()?;
    let start = StateIndex::build(snap, device).state_after(snap, None);
    let baseline = run_fresh_from(snap, device, &own, &start);
    Ok(confs
        .iter()
        .zip(&policies)
        .map(|(c, p)| tuning(c, &baseline, &run_fresh_from(snap, device, p, &start)))
        .collect())
}

/// The settings of [`OFFERED`] the file does not already run under.
pub fn offered(snap: &Snapshot, device: usize) -> Vec<&'static str> {
    let own = Policy::of(&settings(snap, device));
    OFFERED.into_iter().filter(|c| own.with_conf(c).is_ok_and(|p| p != own)).collect()
}

fn tuning(conf: &str, baseline: &Run, r: &Run) -> Tuning {
    let s = |b: u64| format_size(i128::from(b));
    let mut sentence = format!(
        "with {conf} the peak reserved would be {} instead of {}",
        s(r.peak_reserved_bytes),
        s(baseline.peak_reserved_bytes)
    );
    if r.recorded_ooms > 0 {
        let held = r.recorded_ooms_avoided;
        sentence.push_str(&match (held, r.recorded_ooms) {
            (0, 1) => " and this out-of-memory error would still happen".to_string(),
            (0, n) => format!(" and all {n} out-of-memory errors would still happen"),
            (h, n) if h == n && n == 1 => " and this out-of-memory error would not happen".to_string(),
            (h, n) => format!(" and {h} of the {n} out-of-memory errors would not happen"),
        });
    }
    if r.oom_count > r.recorded_ooms.saturating_sub(r.recorded_ooms_avoided) {
        sentence.push_str(&format!(
            ", but {} request(s) the recording served would fail",
            r.oom_count - (r.recorded_ooms - r.recorded_ooms_avoided)
        ));
    }
    if r.recorded_peak_reserved_bytes != baseline.peak_reserved_bytes {
        sentence.push_str(&format!(
            " (a simulation of this trace; the recording reserved {} at its peak, its blocks from before the recording laid out as they were)",
            s(r.recorded_peak_reserved_bytes)
        ));
    } else {
        sentence.push_str(" (a simulation of this trace)");
    }
    Tuning {
        conf: conf.to_string(),
        capacity_bytes: r.policy.capacity,
        peak_reserved_bytes: r.peak_reserved_bytes,
        baseline_peak_reserved_bytes: baseline.peak_reserved_bytes,
        recorded_peak_reserved_bytes: r.recorded_peak_reserved_bytes,
        ooms: r.oom_count,
        baseline_ooms: baseline.oom_count,
        recorded_ooms: r.recorded_ooms,
        recorded_ooms_avoided: r.recorded_ooms_avoided,
        first_oom_entry: r.ooms.first().map(|o| o.entry),
        sentence,
        curve: r.curve.clone(),
        baseline_curve: baseline.curve.clone(),
        recorded_curve: r.recorded_curve.clone(),
    }
}

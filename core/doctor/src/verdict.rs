//! Why an allocation failed: exhausted, fragmentation or another limit, with the numbers that
//! decide it in one sentence.

use serde::{Deserialize, Serialize};

use crate::units::format_size;

/// The verdict on one out-of-memory error.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Live memory plus the request exceed what the GPU had for this process: the reserved
    /// bytes plus the device's free bytes.
    Exhausted,
    /// The memory was there (free in the cache, plus free on the device) but no free block was
    /// large enough and the device could not give a segment of the size needed.
    Fragmentation,
    /// Neither: a free block would have fit, or the device had room for the segment, so
    /// something else refused it (a memory fraction, a private pool, another stream's cache).
    OtherLimit,
}

impl Verdict {
    /// The name in JSON: `other_limit`.
    pub fn key(self) -> &'static str {
        match self {
            Verdict::Exhausted => "exhausted",
            Verdict::Fragmentation => "fragmentation",
            Verdict::OtherLimit => "other_limit",
        }
    }

    /// The name for people: `other limit`.
    pub fn label(self) -> &'static str {
        match self {
            Verdict::Exhausted => "exhausted",
            Verdict::Fragmentation => "fragmentation",
            Verdict::OtherLimit => "other limit",
        }
    }
}

/// What the verdict is decided from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Inputs {
    /// Bytes the allocator looked for (the oom entry's size, already rounded).
    pub requested: u64,
    /// The device's free bytes (`device_free`), when recorded.
    pub device_free: Option<u64>,
    /// Rounded bytes of live blocks.
    pub live: u64,
    /// Reserved bytes.
    pub reserved: u64,
    /// Bytes free in the cache, every pool and stream.
    pub cached_free: u64,
    /// The largest free block the request could use (its pool and stream).
    pub largest_fit: u64,
    /// Bytes the allocator would have asked the device for.
    pub segment_needed: u64,
}

/// The verdict and its sentence.
pub fn decide(i: &Inputs) -> (Verdict, String) {
    let s = |b: u64| format_size(i128::from(b));
    let free = i.device_free.unwrap_or(0);
    let device = match i.device_free {
        Some(f) => format!("the device's {} free", s(f)),
        None => "the device's free bytes (not recorded, taken as 0)".to_string(),
    };
    if i.largest_fit >= i.requested {
        return (
            Verdict::OtherLimit,
            format!(
                "a free block of {} in the request's pool and stream would hold the {} request: something other than memory refused it (a private pool, a memory fraction)",
                s(i.largest_fit),
                s(i.requested)
            ),
        );
    }
    if i.device_free.is_some_and(|f| f >= i.segment_needed) {
        return (
            Verdict::OtherLimit,
            format!(
                "the device had {} free, enough for the {} segment the {} request needed: a limit other than the device's memory refused it (set_per_process_memory_fraction, another process's reservation)",
                s(free),
                s(i.segment_needed),
                s(i.requested)
            ),
        );
    }
    let have = i.cached_free.saturating_add(free);
    if i.requested > have {
        (
            Verdict::Exhausted,
            format!(
                "live memory {} plus the {} request exceed the {} reserved plus {} by {}: only {} was free anywhere",
                s(i.live),
                s(i.requested),
                s(i.reserved),
                device,
                s(i.requested - have),
                s(have)
            ),
        )
    } else {
        (
            Verdict::Fragmentation,
            format!(
                "{} was free ({} in the cache plus {}), enough for the {} request, but the largest free block it could use was {} and the device could not give the {} segment it needed",
                s(have),
                s(i.cached_free),
                device,
                s(i.requested),
                s(i.largest_fit),
                s(i.segment_needed)
            ),
        )
    }
}

//! The snapshot's known keys: interned first (so a key test is an integer comparison), the
//! rare trace-entry keys kept without a warning, and the nesting bound of free-form values.

/// Keys and action names interned first, so a key test is an integer comparison.
pub(crate) const KEYS: [&str; 14] = [
    "action",
    "addr",
    "size",
    "stream",
    "time_us",
    "frames",
    "compile_context",
    "user_metadata",
    "category",
    "pool_id",
    "device_free",
    "name",
    "filename",
    "line",
];
pub(super) const K_ACTION: u32 = 0;
pub(super) const K_ADDR: u32 = 1;
pub(super) const K_SIZE: u32 = 2;
pub(super) const K_STREAM: u32 = 3;
pub(super) const K_TIME_US: u32 = 4;
pub(super) const K_FRAMES: u32 = 5;
pub(super) const K_COMPILE_CONTEXT: u32 = 6;
pub(super) const K_USER_METADATA: u32 = 7;
pub(super) const K_CATEGORY: u32 = 8;
pub(super) const K_POOL_ID: u32 = 9;
pub(super) const K_DEVICE_FREE: u32 = 10;
pub(super) const K_NAME: u32 = 11;
pub(super) const K_FILENAME: u32 = 12;
pub(super) const K_LINE: u32 = 13;
pub(super) const FIRST_ACTION: u32 = KEYS.len() as u32;

/// Trace-entry keys that are known but rare; they are kept as extras without a warning.
pub(crate) const KNOWN_ENTRY_EXTRAS: [&str; 3] = ["forward_frames", "internal_metadata", "segment_pool_id"];

/// Deepest nesting accepted when a free-form value is converted.
pub(crate) const MAX_DEPTH: u32 = 64;

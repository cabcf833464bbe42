//! The environment `memscape capture` hands the program it runs, named once for both sides
//! of the process boundary: the launcher (`cli/`, [`crate::torch::prepare`]) sets these
//! variables, the injection library ([`crate::cupti`]) and the Python hook
//! (`capture/python/sitecustomize.py`, which cannot import Rust) read them. The hook's copy
//! of the names, and the Python package's `memscape.record` default, are checked against
//! these by a test in `tests/it/torch.rs`.

/// Events kept per device when nobody says otherwise: by the driver capture's ring, by
/// PyTorch's recording under `memscape capture --torch`, and by `memscape.record` (the Python
/// package's `DEFAULT_MAX_ENTRIES`). PyTorch's own default keeps every event (`sys.maxsize`);
/// its tutorial and torchtitan keep 100,000, which one step of a large model can overrun. A
/// million keeps many steps while bounding the host memory the recording holds (each kept
/// event holds its stack until the dump); memscape reads a file of a million events in under
/// a second (`bench`: the 100M row).
pub const DEFAULT_MAX_ENTRIES: usize = 1_000_000;

/// CUDA's own: the injection library the driver loads into the program.
pub const CUDA_INJECTION: &str = "CUDA_INJECTION64_PATH";
/// Where the launcher finds the injection library, when set.
pub const CAPTURE_LIB: &str = "MEMSCAPE_CAPTURE_LIB";
/// The snapshot's path.
pub const CAPTURE_OUT: &str = "MEMSCAPE_CAPTURE_OUT";
/// Set by `memscape capture`: each process writes its own file and notes it in the run's list.
pub const CAPTURE_RUN: &str = "MEMSCAPE_CAPTURE_RUN";
/// Events kept per device by the driver capture.
pub const CAPTURE_MAX_ENTRIES: &str = "MEMSCAPE_CAPTURE_MAX_ENTRIES";
/// Seconds between periodic snapshots.
pub const CAPTURE_EVERY: &str = "MEMSCAPE_CAPTURE_EVERY";
/// `--torch`: the run's folder, where each process writes `torch.<pid>.pickle`.
pub const TORCH_DIR: &str = "MEMSCAPE_TORCH_DIR";
/// `--torch`: PyTorch's `max_entries`.
pub const TORCH_MAX_ENTRIES: &str = "MEMSCAPE_TORCH_MAX_ENTRIES";
/// `--torch`: PyTorch's `stacks` (`python` or `all`).
pub const TORCH_STACKS: &str = "MEMSCAPE_TORCH_STACKS";

/// The variables the Python hook reads.
pub const TORCH: [&str; 3] = [TORCH_DIR, TORCH_MAX_ENTRIES, TORCH_STACKS];

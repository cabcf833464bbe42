//! `capture` records every device allocation a CUDA process makes (cudaMalloc and
//! cuMemAlloc, stream-ordered pools, virtual memory, managed memory), with the host stack at
//! each call, into the memory-snapshot format PyTorch's tools and memscape read. Unlike
//! PyTorch's recorder it sees memory outside PyTorch's caching allocator: NCCL, cuBLAS
//! workspaces, CUDA graph pools, JAX, TensorRT, Rust programs on cudarc.
//!
//! Brief overview:
//! - [`Recorder`]: the plain-data core. It takes [`Event`]s, keeps the last `max_entries` of
//!   them per device in a ring (like PyTorch's `max_entries`) and a table of what is alive,
//!   and turns both into a [`snapshot::Snapshot`] ([`Recorder::to_snapshot`]), so allocations
//!   made before the ring's window still show as alive.
//! - [`cupti`] (Linux): subscribes to the CUDA driver's memory APIs through CUPTI and feeds a
//!   global recorder; [`start`] / [`Session`] is the in-process Rust API, and the exported
//!   `InitializeInjection` makes this crate's cdylib an injection library for any program.
//! - [`driver_present`]: whether a CUDA driver can be loaded here at all.
//!
//! ```
//! use memscape_capture::{Event, EventKind, Recorder};
//! let mut r = Recorder::new(1000);
//! r.record(Event::new(EventKind::SegmentAlloc, 0, 0x7f00_0000_0000, 2 << 20));
//! let snap = r.to_snapshot(&mut |_| None);
//! assert_eq!(snapshot::stats::summary(&snap).total_reserved, 2 << 20);
//! ```

#[cfg(target_os = "linux")]
pub mod devices;
pub mod env;
mod event;
pub mod output;
mod recorder;
pub mod sites;
mod stacks;
pub mod torch;

#[cfg(target_os = "linux")]
pub mod cupti;

pub use event::{Event, EventKind};
pub use recorder::{Recorder, Ring};
pub use stacks::{capture_ips, is_plumbing, symbolize, Symbol};

#[cfg(target_os = "linux")]
pub use cupti::{start, Options, Session};

/// True when the CUDA driver library (libcuda) can be loaded. Check this before any other
/// CUDA call: cudarc panics when the driver is missing.
pub fn driver_present() -> bool {
    // SAFETY: is_culib_present only tries to dlopen the driver library and reports whether
    // that worked; it calls no CUDA function.
    unsafe { cudarc::driver::sys::is_culib_present() }
}

/// True when CUPTI can be loaded here under one of the names the CUDA bindings try.
pub fn cupti_present() -> bool {
    // SAFETY: only tries to dlopen libcupti and reports whether that worked.
    unsafe { cudarc::cupti::sys::is_culib_present() }
}

/// A directory holding CUPTI under a name the bindings load (`libcupti.so`, `libcupti.so.12`,
/// ...), for when it is not on the library path: CUDA toolkits keep it in
/// `extras/CUPTI/lib64` (12.x) or `targets/<arch>-linux/lib` (13.x) under `$CUDA_HOME`,
/// `$CUDA_PATH` or `/usr/local/cuda*`.
pub fn find_cupti_dir() -> Option<std::path::PathBuf> {
    use std::path::PathBuf;
    let names = cudarc::get_lib_name_candidates("cupti");
    let mut roots: Vec<PathBuf> =
        ["CUDA_HOME", "CUDA_PATH"].iter().filter_map(std::env::var_os).map(PathBuf::from).collect();
    if let Ok(dir) = std::fs::read_dir("/usr/local") {
        let mut cudas: Vec<PathBuf> =
            dir.flatten().filter(|e| e.file_name().to_string_lossy().starts_with("cuda")).map(|e| e.path()).collect();
        cudas.sort();
        roots.extend(cudas.into_iter().rev());
    }
    let subdirs = ["extras/CUPTI/lib64", "lib64", "targets/x86_64-linux/lib", "targets/sbsa-linux/lib"];
    roots.iter().flat_map(|r| subdirs.iter().map(move |s| r.join(s))).find(|d| names.iter().any(|n| d.join(n).exists()))
}

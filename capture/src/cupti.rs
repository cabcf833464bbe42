//! The CUPTI side: subscribes to the CUDA driver's memory APIs and feeds a process-wide
//! [`Recorder`]. Used in-process through [`start`], or by any program through the exported
//! `InitializeInjection`, which the CUDA driver calls when `CUDA_INJECTION64_PATH` names this
//! crate's shared library (what `memscape capture` sets).
//!
//! Every callback runs on the thread that made the CUDA call, after the call returned
//! (`CUPTI_API_EXIT`), so the new address is known; it captures the host stack as bare
//! instruction pointers and records one event. Stacks are symbolized only when dumping.

use std::ffi::{c_int, c_void};
use std::path::{Path, PathBuf};
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicPtr, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use cudarc::cupti::sys as cupti;
use cudarc::driver::sys as cu;

use crate::env as vars;
use crate::event::{now_us, Event, EventKind};
use crate::output;
use crate::recorder::Recorder;
use crate::stacks::{capture_ips, symbolize};

static RECORDER: Mutex<Option<Recorder>> = Mutex::new(None);
static SUBSCRIBER: AtomicPtr<cupti::CUpti_Subscriber_st> = AtomicPtr::new(ptr::null_mut());
static DUMP_REQUESTED: AtomicBool = AtomicBool::new(false);
static OUT_PATH: OnceLock<PathBuf> = OnceLock::new();
/// Under `memscape capture`: the run's list of written snapshots and this process's rank.
static RUN_LIST: OnceLock<(PathBuf, Option<u32>)> = OnceLock::new();

use cupti::CUpti_driver_api_trace_cbid_enum as Cbid;

/// The driver calls recorded. `cuMemCreate` / `cuMemRelease` create physical handles with no
/// address; the address space appears with `cuMemMap` / `cuMemUnmap`.
const CBIDS: [Cbid; 12] = [
    Cbid::CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2,
    Cbid::CUPTI_DRIVER_TRACE_CBID_cuMemAllocPitch_v2,
    Cbid::CUPTI_DRIVER_TRACE_CBID_cuMemAllocManaged,
    Cbid::CUPTI_DRIVER_TRACE_CBID_cuMemFree_v2,
    Cbid::CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync,
    Cbid::CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync_ptsz,
    Cbid::CUPTI_DRIVER_TRACE_CBID_cuMemAllocFromPoolAsync,
    Cbid::CUPTI_DRIVER_TRACE_CBID_cuMemAllocFromPoolAsync_ptsz,
    Cbid::CUPTI_DRIVER_TRACE_CBID_cuMemFreeAsync,
    Cbid::CUPTI_DRIVER_TRACE_CBID_cuMemFreeAsync_ptsz,
    Cbid::CUPTI_DRIVER_TRACE_CBID_cuMemMap,
    Cbid::CUPTI_DRIVER_TRACE_CBID_cuMemUnmap,
];

const CUDA_SUCCESS: u32 = 0;
const CUDA_ERROR_OUT_OF_MEMORY: u32 = 2;

/// Options of a recording session.
#[derive(Clone, Copy, Debug)]
pub struct Options {
    /// Events kept per device (older ones are dropped; what they allocated stays visible).
    pub max_entries: usize,
}

impl Default for Options {
    fn default() -> Self {
        Options { max_entries: crate::env::DEFAULT_MAX_ENTRIES }
    }
}

/// A running recording; [`Session::stop`] ends it.
#[derive(Debug)]
pub struct Session(());

/// Starts recording this process's device memory. Fails with a clear message when there is
/// no CUDA driver or no CUPTI library, or when a recording is already running.
pub fn start(opts: Options) -> Result<Session, String> {
    install(opts.max_entries)?;
    Ok(Session(()))
}

impl Session {
    /// The snapshot of what was recorded so far.
    pub fn snapshot(&self) -> snapshot::Snapshot {
        current_snapshot().unwrap_or_default()
    }

    /// Writes the snapshot as a pickle (atomically: a temporary file, then a rename).
    pub fn dump(&self, path: &Path) -> std::io::Result<()> {
        dump(path)
    }

    /// Stops recording.
    pub fn stop(self) {
        uninstall();
    }
}

fn install(max_entries: usize) -> Result<(), String> {
    if !crate::driver_present() {
        return Err("no CUDA driver on this machine (libcuda.so.1 cannot be loaded)".into());
    }
    // SAFETY: only tries to dlopen libcupti and reports whether that worked.
    if !unsafe { cupti::is_culib_present() } {
        return Err("CUPTI (libcupti.so) cannot be loaded: add CUDA's extras/CUPTI/lib64 to LD_LIBRARY_PATH".into());
    }
    if !SUBSCRIBER.load(Ordering::Acquire).is_null() {
        return Err("a recording is already running in this process".into());
    }
    if let Ok(mut r) = RECORDER.lock() {
        *r = Some(Recorder::new(max_entries));
    }
    let mut sub: cupti::CUpti_SubscriberHandle = ptr::null_mut();
    // SAFETY: `sub` is a valid out-pointer; `on_api` has the callback signature CUPTI expects
    // and lives for the whole process; no user data is passed.
    let r = unsafe { cupti::cuptiSubscribe(&mut sub, Some(on_api), ptr::null_mut()) };
    if r != cupti::CUptiResult::CUPTI_SUCCESS {
        return Err(format!("cuptiSubscribe failed ({r:?}); another CUPTI client (a profiler) may be attached"));
    }
    for cbid in CBIDS {
        // SAFETY: `sub` came from a successful cuptiSubscribe; the domain and ids are valid.
        let r = unsafe {
            cupti::cuptiEnableCallback(1, sub, cupti::CUpti_CallbackDomain::CUPTI_CB_DOMAIN_DRIVER_API, cbid as u32)
        };
        if r != cupti::CUptiResult::CUPTI_SUCCESS {
            return Err(format!("cuptiEnableCallback({cbid:?}) failed ({r:?})"));
        }
    }
    SUBSCRIBER.store(sub, Ordering::Release);
    Ok(())
}

fn uninstall() {
    let sub = SUBSCRIBER.swap(ptr::null_mut(), Ordering::AcqRel);
    if !sub.is_null() {
        // SAFETY: `sub` came from cuptiSubscribe and is unsubscribed once (swapped out above).
        unsafe { cupti::cuptiUnsubscribe(sub) };
    }
}

/// The snapshot of what is recorded. The recorder is copied under the lock and symbolized
/// outside it, so the program's CUDA calls wait only for the copy.
fn current_snapshot() -> Option<snapshot::Snapshot> {
    let rec = RECORDER.lock().ok()?.as_ref()?.clone();
    let mut cache = std::collections::HashMap::new();
    let mut snap = rec.to_snapshot(&mut |ip| cache.entry(ip).or_insert_with(|| symbolize(ip)).clone());
    snap.set_device_info(&crate::devices::describe(&snap.devices()));
    Some(snap)
}

/// Writes the snapshot to `path` whole (a temporary of this process's, then a rename), and
/// notes it in the run's list when `memscape capture` runs this process.
fn dump(path: &Path) -> std::io::Result<()> {
    let snap = current_snapshot().ok_or_else(|| std::io::Error::other("nothing is being recorded"))?;
    write(path, &snap)
}

/// [`dump`], except that in a run of `memscape capture` a process that has allocated nothing
/// on any device writes nothing (a launcher such as `torchrun`, which initialises the driver
/// but never allocates, would otherwise leave an empty snapshot beside its ranks' files).
/// Returns whether it wrote.
fn dump_in_run(path: &Path) -> std::io::Result<bool> {
    let snap = current_snapshot().ok_or_else(|| std::io::Error::other("nothing is being recorded"))?;
    if RUN_LIST.get().is_some() && allocated_nothing(&snap) {
        return Ok(false);
    }
    write(path, &snap).map(|()| true)
}

/// No segment alive and no trace entry on any device.
fn allocated_nothing(snap: &snapshot::Snapshot) -> bool {
    snap.segments.is_empty() && snap.device_traces.iter().flatten().all(|t| t.is_empty())
}

fn write(path: &Path, snap: &snapshot::Snapshot) -> std::io::Result<()> {
    let pid = std::process::id();
    output::write_atomically(path, pid, |w| snapshot::write::write_pickle(snap, w))?;
    if let Some((list, rank)) = RUN_LIST.get() {
        output::note(list, &output::Written { pid, rank: *rank, path: path.to_path_buf() })?;
    }
    Ok(())
}

/// The device of the calling thread's current context.
fn current_device() -> usize {
    let mut dev: cu::CUdevice = 0;
    // SAFETY: called from a driver-API callback, so the driver is loaded and initialised;
    // `dev` is a valid out-pointer. On failure `dev` stays 0.
    unsafe { cu::cuCtxGetDevice(&mut dev) };
    usize::try_from(dev).unwrap_or(0)
}

fn device_free() -> u64 {
    let (mut free, mut total) = (0usize, 0usize);
    // SAFETY: as in `current_device`; valid out-pointers.
    unsafe { cu::cuMemGetInfo_v2(&mut free, &mut total) };
    free as u64
}

/// Reads the parameter struct CUPTI passes for `cbid`.
///
/// # Safety
/// `params` must be the `functionParams` of a driver-API callback for a call whose parameter
/// struct is `T`.
unsafe fn params<'a, T>(params: *const c_void) -> Option<&'a T> {
    // SAFETY: guaranteed by the caller; null is checked.
    unsafe { params.cast::<T>().as_ref() }
}

/// # Safety
/// `p` is null or points to a readable value written by the driver.
unsafe fn read<T: Copy + Default>(p: *const T) -> T {
    // SAFETY: guaranteed by the caller; null gives the default.
    unsafe { p.as_ref().copied().unwrap_or_default() }
}

unsafe extern "C" fn on_api(
    _user: *mut c_void,
    domain: cupti::CUpti_CallbackDomain,
    cbid: cupti::CUpti_CallbackId,
    cbdata: *const c_void,
) {
    if domain != cupti::CUpti_CallbackDomain::CUPTI_CB_DOMAIN_DRIVER_API {
        return;
    }
    // SAFETY: for the driver-API domain CUPTI passes a CUpti_CallbackData (or null).
    let Some(data) = (unsafe { cbdata.cast::<cupti::CUpti_CallbackData>().as_ref() }) else { return };
    if data.callbackSite != cupti::CUpti_ApiCallbackSite::CUPTI_API_EXIT {
        return;
    }
    // SAFETY: at API exit, functionReturnValue points to the call's CUresult, read as u32
    // (not as the enum, whose unknown values would be undefined behaviour).
    let ret = unsafe { read(data.functionReturnValue.cast::<u32>()) };
    let p = data.functionParams;
    // (kind, address, size, stream, managed) of the call, when it is one we record.
    let call: Option<(EventKind, u64, u64, u64, bool)> =
    // SAFETY: in every arm `p` is the parameter struct of the call that `cbid` names, as
    // CUPTI documents, and the pointers inside it were written by the driver before exit.
    unsafe {
        match cbid {
            x if x == Cbid::CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2 as u32 => {
                params::<cupti::cuMemAlloc_v2_params_st>(p).map(|a| (EventKind::SegmentAlloc, read(a.dptr), a.bytesize as u64, 0, false))
            }
            x if x == Cbid::CUPTI_DRIVER_TRACE_CBID_cuMemAllocPitch_v2 as u32 => params::<cupti::cuMemAllocPitch_v2_params_st>(p)
                .map(|a| (EventKind::SegmentAlloc, read(a.dptr), (read(a.pPitch) * a.Height) as u64, 0, false)),
            x if x == Cbid::CUPTI_DRIVER_TRACE_CBID_cuMemAllocManaged as u32 => params::<cupti::cuMemAllocManaged_params_st>(p)
                .map(|a| (EventKind::SegmentAlloc, read(a.dptr), a.bytesize as u64, 0, true)),
            x if x == Cbid::CUPTI_DRIVER_TRACE_CBID_cuMemFree_v2 as u32 => {
                params::<cupti::cuMemFree_v2_params_st>(p).map(|a| (EventKind::SegmentFree, a.dptr, 0, 0, false))
            }
            x if x == Cbid::CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync as u32
                || x == Cbid::CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync_ptsz as u32 =>
            {
                params::<cupti::cuMemAllocAsync_params_st>(p)
                    .map(|a| (EventKind::PoolAlloc, read(a.dptr), a.bytesize as u64, a.hStream as u64, false))
            }
            x if x == Cbid::CUPTI_DRIVER_TRACE_CBID_cuMemAllocFromPoolAsync as u32
                || x == Cbid::CUPTI_DRIVER_TRACE_CBID_cuMemAllocFromPoolAsync_ptsz as u32 =>
            {
                params::<cupti::cuMemAllocFromPoolAsync_params_st>(p)
                    .map(|a| (EventKind::PoolAlloc, read(a.dptr), a.bytesize as u64, a.hStream as u64, false))
            }
            x if x == Cbid::CUPTI_DRIVER_TRACE_CBID_cuMemFreeAsync as u32
                || x == Cbid::CUPTI_DRIVER_TRACE_CBID_cuMemFreeAsync_ptsz as u32 =>
            {
                params::<cupti::cuMemFreeAsync_params_st>(p).map(|a| (EventKind::PoolFree, a.dptr, 0, a.hStream as u64, false))
            }
            x if x == Cbid::CUPTI_DRIVER_TRACE_CBID_cuMemMap as u32 => {
                params::<cupti::cuMemMap_params_st>(p).map(|a| (EventKind::Map, a.ptr, a.size as u64, 0, false))
            }
            x if x == Cbid::CUPTI_DRIVER_TRACE_CBID_cuMemUnmap as u32 => {
                params::<cupti::cuMemUnmap_params_st>(p).map(|a| (EventKind::Unmap, a.ptr, a.size as u64, 0, false))
            }
            _ => None,
        }
    };
    let Some((kind, addr, size, stream, managed)) = call else { return };
    let kind = match (ret, kind) {
        (CUDA_SUCCESS, k) => k,
        (CUDA_ERROR_OUT_OF_MEMORY, EventKind::SegmentAlloc | EventKind::PoolAlloc) => EventKind::Oom,
        _ => return,
    };
    let ips = capture_ips(3);
    let device = current_device();
    let free = (kind == EventKind::Oom).then(device_free);
    if let Ok(mut guard) = RECORDER.lock() {
        if let Some(rec) = guard.as_mut() {
            let stack = Some(rec.intern_stack(&ips));
            let addr = if kind == EventKind::Oom { 0 } else { addr };
            rec.record(Event {
                kind,
                device,
                addr,
                size,
                stream,
                time_us: now_us(),
                stack,
                device_free: free,
                managed,
            });
        }
    }
}

extern "C" fn dump_at_exit() {
    dump_to_out(true);
}

/// Writes the snapshot to the path `memscape capture` named; says so when `tell` (at exit and
/// on SIGUSR1, not at every periodic dump). Failures are always reported.
fn dump_to_out(tell: bool) {
    // One dump at a time: the watcher's and the one at exit share the temporary file.
    static DUMPING: Mutex<()> = Mutex::new(());
    let _one = DUMPING.lock();
    if let Some(path) = OUT_PATH.get() {
        match dump_in_run(path) {
            Ok(true) if tell => eprintln!("memscape capture: wrote {}", path.display()),
            Ok(_) => {}
            Err(e) => eprintln!("memscape capture: could not write {}: {e}", path.display()),
        }
    }
}

extern "C" fn on_sigusr1(_: c_int) {
    // Only an atomic store: dumping happens on the watcher thread, not in the handler.
    DUMP_REQUESTED.store(true, Ordering::Relaxed);
}

/// Called by the CUDA driver when this library is named by `CUDA_INJECTION64_PATH`.
/// Reads `MEMSCAPE_CAPTURE_OUT`, `MEMSCAPE_CAPTURE_MAX_ENTRIES` and `MEMSCAPE_CAPTURE_EVERY`
/// (seconds), starts recording, and dumps at exit, on SIGUSR1 and every N seconds. Under
/// `memscape capture` (`MEMSCAPE_CAPTURE_RUN` set) each process writes its own file
/// (`output::path_for`: by `RANK`, else the first keeps the path, the others add their
/// process id) and notes it in the run's list.
#[no_mangle]
pub extern "C" fn InitializeInjection() -> c_int {
    let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    let out = env(vars::CAPTURE_OUT)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(format!("memscape-capture-{}.pickle", std::process::id())));
    let max_entries =
        env(vars::CAPTURE_MAX_ENTRIES).and_then(|v| v.parse().ok()).unwrap_or(Options::default().max_entries);
    let every = env(vars::CAPTURE_EVERY).and_then(|v| v.parse::<f64>().ok()).filter(|s| *s > 0.0);
    if let Err(e) = install(max_entries) {
        eprintln!("memscape capture: not recording: {e}");
        return 0;
    }
    let pid = std::process::id();
    let rank = output::rank_from(env("RANK").as_deref());
    let run = env(vars::CAPTURE_RUN).is_some();
    // Alone (no run), the process keeps the path it was given, as before.
    let first = rank.is_none() && (!run || output::claim(&out, pid).unwrap_or(false));
    let path = output::path_for(&out, rank, first, pid);
    if run {
        RUN_LIST.set((output::list_path(&out), rank)).ok();
    }
    OUT_PATH.set(path).ok();
    // SAFETY: registers a plain extern "C" function with no arguments, as atexit expects.
    unsafe { libc::atexit(dump_at_exit) };
    // SAFETY: installs a handler that only stores to an atomic (async-signal-safe). It
    // replaces the program's own SIGUSR1 handler, if any: documented in docs/capture.md.
    unsafe { libc::signal(libc::SIGUSR1, on_sigusr1 as extern "C" fn(c_int) as libc::sighandler_t) };
    std::thread::Builder::new()
        .name("memscape-capture".into())
        .spawn(move || {
            let mut last = Instant::now();
            loop {
                std::thread::sleep(Duration::from_millis(100));
                let periodic = every.is_some_and(|s| last.elapsed() >= Duration::from_secs_f64(s));
                let asked = DUMP_REQUESTED.swap(false, Ordering::Relaxed);
                if asked || periodic {
                    last = Instant::now();
                    dump_to_out(asked);
                }
            }
        })
        .ok();
    1
}

//! The GPU check's workload: a known allocation pattern on device 0.
//!
//! Allocates 1, 2, 4, ... 512 MiB with cuMemAlloc, frees every other one, reserves a virtual
//! range and maps 64 MiB then 32 MiB into it, unmaps the 32 MiB, then asks for more memory
//! than the device has (an out-of-memory failure). Prints what it did as one JSON object, for
//! `capture/gpu-check` to compare with the snapshot `memscape capture` wrote.
//!
//! `pattern --api OUT` records itself through the Rust API instead (start, 1 + 2 + 4 MiB
//! allocated and the 2 MiB freed, dump to OUT, stop, then 8 MiB that must not be recorded).
//!
//! `pattern --loop N` instead allocates and frees 64 KiB N times and prints the nanoseconds
//! per pair: the allocation-heavy loop whose slowdown under capture `gpu-check` measures.
//!
//! `cargo build --release -p capture --example pattern`; run it under `memscape capture`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use cudarc::driver::{result, sys, CudaContext};

const MIB: usize = 1 << 20;

fn check(r: sys::CUresult, what: &str) {
    assert_eq!(r, sys::CUresult::CUDA_SUCCESS, "{what} failed");
}

fn main() {
    if !memscape_capture::driver_present() {
        eprintln!("pattern: no CUDA driver on this machine");
        std::process::exit(2);
    }
    let ctx = CudaContext::new(0).expect("a CUDA device 0");
    ctx.bind_to_thread().expect("bind the context");
    let args: Vec<String> = std::env::args().collect();
    match args.as_slice() {
        [_] => {}
        [_, flag, n] if flag == "--loop" => return alloc_loop(n.parse().expect("a count after --loop")),
        [_, flag, out] if flag == "--api" => return in_process(std::path::Path::new(out)),
        _ => panic!("usage: pattern [--loop N | --api OUT]"),
    }
    let mut allocs = Vec::new();
    for k in 0..10 {
        let size = MIB << k;
        // SAFETY: a plain device allocation in the current context; freed below or at exit.
        let ptr = unsafe { result::malloc_sync(size) }.expect("cuMemAlloc");
        allocs.push((ptr, size));
    }
    let mut freed = Vec::new();
    for &(ptr, size) in allocs.iter().skip(1).step_by(2) {
        // SAFETY: `ptr` came from malloc_sync above and is freed once.
        unsafe { result::free_sync(ptr) }.expect("cuMemFree");
        freed.push((ptr, size));
    }

    // Virtual memory: reserve 128 MiB of address space, map 64 + 32 MiB, unmap the 32.
    // SAFETY: a zeroed CUmemAllocationProp is valid C; the fields that matter are set below.
    let mut prop: sys::CUmemAllocationProp = unsafe { std::mem::zeroed() };
    prop.type_ = sys::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type_ = sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 0;
    let mut va: sys::CUdeviceptr = 0;
    // SAFETY: valid out-pointer; reserves address space only.
    check(unsafe { sys::cuMemAddressReserve(&mut va, 128 * MIB, 0, 0, 0) }, "cuMemAddressReserve");
    let mut handles = Vec::new();
    let mut mapped = Vec::new();
    for (offset, size) in [(0, 64 * MIB), (64 * MIB, 32 * MIB)] {
        let mut h: sys::CUmemGenericAllocationHandle = 0;
        // SAFETY: valid out-pointer and allocation properties; sizes are multiples of 2 MiB,
        // the granularity of device memory.
        check(unsafe { sys::cuMemCreate(&mut h, size, &prop, 0) }, "cuMemCreate");
        // SAFETY: the range lies inside the reservation and `h` has exactly `size` bytes.
        check(unsafe { sys::cuMemMap(va + offset as u64, size, 0, h, 0) }, "cuMemMap");
        handles.push(h);
        mapped.push((va + offset as u64, size));
    }
    // SAFETY: unmaps the second range mapped above.
    check(unsafe { sys::cuMemUnmap(va + 64 * MIB as u64, 32 * MIB) }, "cuMemUnmap");

    // An allocation that cannot fit.
    // SAFETY: a plain allocation request; it is expected to fail.
    let oom = unsafe { result::malloc_sync(1 << 50) };
    assert!(oom.is_err(), "a 1 PiB allocation succeeded");

    println!(
        "{{\"allocated\": [{}], \"freed\": [{}], \"mapped\": [{}], \"unmapped\": [[{}, {}]], \"oom_bytes\": {}}}",
        json_pairs(&allocs),
        json_pairs(&freed),
        json_pairs(&mapped),
        va + 64 * MIB as u64,
        32 * MIB,
        1u64 << 50
    );

    // Clean up the rest so the process exits cleanly; the snapshot is written at exit.
    // SAFETY: unmapping and releasing what this program mapped and created.
    unsafe {
        sys::cuMemUnmap(va, 64 * MIB);
        for h in handles {
            sys::cuMemRelease(h);
        }
        sys::cuMemAddressFree(va, 128 * MIB);
    }
}

/// Allocates and frees 64 KiB `n` times; prints nanoseconds per pair.
fn alloc_loop(n: u32) {
    let t = std::time::Instant::now();
    for _ in 0..n {
        // SAFETY: a plain device allocation in the current context, freed at once.
        let ptr = unsafe { result::malloc_sync(64 << 10) }.expect("cuMemAlloc");
        // SAFETY: `ptr` was just allocated and is freed once.
        unsafe { result::free_sync(ptr) }.expect("cuMemFree");
    }
    println!("{{\"pairs\": {n}, \"ns_per_pair\": {}}}", t.elapsed().as_nanos() / u128::from(n.max(1)));
}

/// Records itself in-process through the Rust API and prints what it did.
fn in_process(out: &std::path::Path) {
    let session = memscape_capture::start(memscape_capture::Options { max_entries: 1000 }).expect("start recording");
    let mut allocs = Vec::new();
    for size in [MIB, 2 * MIB, 4 * MIB] {
        // SAFETY: a plain device allocation in the current context; kept until exit.
        allocs.push((unsafe { result::malloc_sync(size) }.expect("cuMemAlloc"), size));
    }
    // SAFETY: the 2 MiB allocation above, freed once.
    unsafe { result::free_sync(allocs[1].0) }.expect("cuMemFree");
    session.dump(out).expect("dump");
    session.stop();
    // SAFETY: a plain device allocation after recording stopped; kept until exit.
    let after = unsafe { result::malloc_sync(8 * MIB) }.expect("cuMemAlloc");
    println!(
        "{{\"allocated\": [{}], \"freed\": [{}], \"after_stop\": {after}}}",
        json_pairs(&allocs),
        json_pairs(&allocs[1..2])
    );
}

/// `[addr, size], ...` for the JSON this program prints.
fn json_pairs(v: &[(u64, usize)]) -> String {
    v.iter().map(|(p, s)| format!("[{p}, {s}]")).collect::<Vec<_>>().join(", ")
}

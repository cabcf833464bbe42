//! Device names and memory from NVML, for the snapshot's `memscape_devices` entry.
//!
//! CUDA ordinals and NVML indices differ when `CUDA_VISIBLE_DEVICES` reorders or hides
//! devices, so each CUDA ordinal is matched to its NVML device through its PCI bus id.

use std::ffi::{c_char, c_int, CStr};
use std::sync::OnceLock;

use cudarc::driver::sys as cu;
use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper::Nvml;
use snapshot::DeviceInfo;

/// NVML, initialised once per process (`None`: no NVML library or no driver). The driver
/// installs `libnvidia-ml.so.1`; the unversioned name only comes with development packages.
fn nvml() -> Option<&'static Nvml> {
    static NVML: OnceLock<Option<Nvml>> = OnceLock::new();
    NVML.get_or_init(|| Nvml::builder().lib_path("libnvidia-ml.so.1".as_ref()).init().or_else(|_| Nvml::init()).ok())
        .as_ref()
}

/// The PCI bus id of CUDA device `ordinal` (`0000:00:1E.0`).
fn pci_bus_id(ordinal: usize) -> Option<String> {
    if !crate::driver_present() {
        return None;
    }
    let mut dev: cu::CUdevice = 0;
    // SAFETY: the driver library is present (checked above); `dev` is a valid out-pointer.
    // Fails harmlessly (an error code) when the driver was not initialised by this process.
    if unsafe { cu::cuDeviceGet(&mut dev, c_int::try_from(ordinal).ok()?) } != cu::CUresult::CUDA_SUCCESS {
        return None;
    }
    let mut buf = [0 as c_char; 32];
    // SAFETY: `buf` is writable for its whole length, which is passed; the driver writes a
    // NUL-terminated string.
    if unsafe { cu::cuDeviceGetPCIBusId(buf.as_mut_ptr(), buf.len() as c_int, dev) } != cu::CUresult::CUDA_SUCCESS {
        return None;
    }
    // SAFETY: the driver NUL-terminated the string inside `buf`.
    Some(unsafe { CStr::from_ptr(buf.as_ptr()) }.to_string_lossy().into_owned())
}

/// Describes the CUDA devices `ordinals` as seen from this process: name, UUID, memory
/// installed and what this process holds on each. Devices NVML cannot match are left out;
/// without NVML or a driver the list is empty.
pub fn describe(ordinals: &[usize]) -> Vec<DeviceInfo> {
    let Some(nvml) = nvml() else { return Vec::new() };
    let pid = std::process::id();
    ordinals
        .iter()
        .filter_map(|&ordinal| {
            let dev = nvml.device_by_pci_bus_id(pci_bus_id(ordinal)?).ok()?;
            let held = dev.running_compute_processes().ok().and_then(|ps| {
                ps.iter().find(|p| p.pid == pid).and_then(|p| match p.used_gpu_memory {
                    UsedGpuMemory::Used(b) => Some(b),
                    UsedGpuMemory::Unavailable => None,
                })
            });
            Some(DeviceInfo {
                device: ordinal as i64,
                name: dev.name().unwrap_or_default(),
                uuid: dev.uuid().unwrap_or_default(),
                total_bytes: dev.memory_info().map_or(0, |m| m.total),
                process_used_bytes: held,
            })
        })
        .collect()
}

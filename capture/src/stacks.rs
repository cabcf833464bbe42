//! Host stacks: captured as bare instruction pointers at each event (cheap), symbolized only
//! when a snapshot is written.

/// A symbolized frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Symbol {
    /// Function name (demangled), or `module+0xOFFSET` when the module has no symbol there.
    pub name: String,
    /// Source file, or the shared object when there is no debug info, or `??`.
    pub filename: String,
    /// Line (0 when unknown).
    pub line: u32,
}

/// True for a frame of the machinery between a program and its memory: the CUDA driver,
/// CUPTI, cudarc's wrappers and the recorder itself. The first frame that is not is the call
/// site: who asked for the memory.
pub fn is_plumbing(name: &str, filename: &str) -> bool {
    ["libcuda", "libcupti", "libmemscape_capture"].iter().any(|lib| filename.contains(lib))
        || ["memscape_capture", "backtrace", "cudarc::"].iter().any(|p| name.starts_with(p))
}

/// The instruction pointers of the calling thread's stack, innermost first, skipping `skip`
/// frames of the recorder itself.
pub fn capture_ips(skip: usize) -> Vec<usize> {
    let mut ips = Vec::with_capacity(32);
    let mut seen = 0usize;
    backtrace::trace(|frame| {
        if seen >= skip {
            ips.push(frame.ip() as usize);
        }
        seen += 1;
        ips.len() < 128
    });
    ips
}

/// Symbolizes one instruction pointer: the function and source line from debug info or the
/// symbol table, and the shared object holding it when there is no source file, so frames of
/// stripped libraries (the CUDA driver, CUPTI) still say where they are.
pub fn symbolize(ip: usize) -> Option<Symbol> {
    let mut out = None;
    backtrace::resolve(ip as *mut std::ffi::c_void, |s| {
        if out.is_some() {
            return;
        }
        let Some(name) = s.name().map(|n| format!("{n:#}")) else { return };
        let filename = s.filename().map(|f| f.display().to_string());
        out = Some(Symbol { name, filename: filename.unwrap_or_default(), line: s.lineno().unwrap_or(0) });
    });
    let module = module_of(ip);
    match (out, module) {
        (Some(mut sym), Some(m)) if sym.filename.is_empty() => {
            sym.filename = m.path;
            Some(sym)
        }
        (Some(mut sym), None) if sym.filename.is_empty() => {
            sym.filename = "??".into();
            Some(sym)
        }
        (Some(sym), _) => Some(sym),
        // No symbol table: the dynamic symbol holding `ip`, else the offset in its library.
        (None, Some(m)) => {
            let name = m.symbol.unwrap_or_else(|| {
                let short = m.path.rsplit('/').next().unwrap_or(&m.path);
                format!("{short}+0x{:x}", ip - m.base)
            });
            Some(Symbol { name, filename: m.path, line: 0 })
        }
        (None, None) => None,
    }
}

/// Where the loader says an address is.
struct Module {
    /// The shared object's path.
    path: String,
    /// Its load address.
    base: usize,
    /// The exported symbol containing the address, demangled.
    symbol: Option<String>,
}

/// The shared object that holds `ip`, and its exported symbol there if any.
#[cfg(unix)]
fn module_of(ip: usize) -> Option<Module> {
    // SAFETY: a zeroed Dl_info is a valid out-parameter for dladdr.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: dladdr only reads the loader's tables for the given address; `info` is valid.
    if unsafe { libc::dladdr(ip as *const libc::c_void, &mut info) } == 0 || info.dli_fname.is_null() {
        return None;
    }
    // SAFETY: dladdr succeeded, so dli_fname is a NUL-terminated string owned by the loader.
    let path = unsafe { std::ffi::CStr::from_ptr(info.dli_fname) }.to_string_lossy().into_owned();
    let symbol = (!info.dli_sname.is_null()).then(|| {
        // SAFETY: non-null dli_sname is a NUL-terminated string owned by the loader.
        let raw = unsafe { std::ffi::CStr::from_ptr(info.dli_sname) };
        format!("{:#}", backtrace::SymbolName::new(raw.to_bytes()))
    });
    Some(Module { path, base: info.dli_fbase as usize, symbol })
}

#[cfg(not(unix))]
fn module_of(_ip: usize) -> Option<Module> {
    None
}

//! Host stacks: captured as bare instruction pointers at each event (cheap), symbolized only
//! when a snapshot is written.

/// A symbolized frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Symbol {
    /// Function name (demangled).
    pub name: String,
    /// Source file, or the shared object when there is no debug info, or `??`.
    pub filename: String,
    /// Line (0 when unknown).
    pub line: u32,
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

/// Symbolizes one instruction pointer.
pub fn symbolize(ip: usize) -> Option<Symbol> {
    let mut out = None;
    backtrace::resolve(ip as *mut std::ffi::c_void, |s| {
        if out.is_some() {
            return;
        }
        let name = s.name().map(|n| format!("{n:#}")).unwrap_or_else(|| format!("0x{ip:x}"));
        let filename = s.filename().map(|f| f.display().to_string()).unwrap_or_else(|| "??".to_string());
        out = Some(Symbol { name, filename, line: s.lineno().unwrap_or(0) });
    });
    out
}

fn main() {
    for p in std::env::args().skip(1) {
        let bytes = std::fs::read(&p).unwrap();
        let t = std::time::Instant::now();
        match snapshot::read(&bytes) {
            Ok(l) => {
                let s = &l.snapshot;
                let n: Vec<usize> = s.device_traces.iter().flatten().map(|t| t.len()).collect();
                println!("{p}: ok {:?} segs={} traces={:?} frames={} stacks={} strings={} model={}KB {:?} warn={:?}",
                    l.format, s.segments.len(), n, s.frames.len(), s.stacks.len(), s.strings.len(), s.heap_bytes()/1024, t.elapsed(), l.warnings);
            }
            Err(e) => println!("{p}: ERR {e}"),
        }
    }
}

//! `bench replay FILE...`: the allocator replay and the doctor's allocator what-ifs timed on
//! files already written (no generation): medians of 3 runs each, after one read.

use std::path::Path;
use std::time::Instant;

use anyhow::Context as _;

pub fn main(args: &[String]) -> anyhow::Result<()> {
    for f in args {
        let bytes = std::fs::read(Path::new(f)).with_context(|| f.clone())?;
        let snap = snapshot::read(&bytes).map_err(|e| anyhow::anyhow!("{f}: {e}"))?.snapshot;
        drop(bytes);
        for d in snap.devices().into_iter().filter(|&d| !snap.trace(d).is_empty()) {
            let time = |run: &mut dyn FnMut()| {
                let mut s: Vec<f64> = (0..3)
                    .map(|_| {
                        let t = Instant::now();
                        run();
                        t.elapsed().as_secs_f64() * 1e3
                    })
                    .collect();
                s.sort_by(f64::total_cmp);
                s[1]
            };
            let mut placed = 0;
            let replay = time(&mut || placed = snapshot::simulate::replay(&snap, d).placed_as_recorded);
            let tune = time(&mut || {
                std::hint::black_box(snapshot::doctor::tuning::tune(
                    &snap,
                    d,
                    Some(80 << 30),
                    &snapshot::doctor::tuning::OFFERED,
                ))
                .ok();
            });
            println!(
                "{f} device {d}: {} entries; replay {replay:.0} ms ({placed} placed as recorded); the doctor's allocator what-ifs (baseline + 4) {tune:.0} ms",
                snap.trace(d).len()
            );
        }
    }
    Ok(())
}

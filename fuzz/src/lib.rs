//! What every fuzz target checks once the reader accepted an input: the analyses (the
//! categories and what-if among them) run on the model without panicking, and the writer's
//! output reads back to a fixpoint.

use snapshot::timeline::{LodQuery, Timeline, TimelineKind};

pub fn exercise(loaded: &snapshot::Loaded) {
    let snap = &loaded.snapshot;
    let _ = snapshot::stats::summary(snap);
    for d in snap.devices().into_iter().take(4) {
        for kind in [TimelineKind::Blocks, TimelineKind::Segments] {
            let t = Timeline::build(snap, d, kind);
            let n = f64::from(t.n_steps());
            let _ = t.lod(&LodQuery { start: -1.0, end: n + 1.0, columns: 64, min_bytes: t.peak_bytes() / 64 });
            let _ = t.element_at(t.peak_step(), t.peak_bytes() / 2);
            let _ = t.element_near(t.peak_step(), t.peak_bytes() / 2, t.peak_bytes() / 100);
            if kind == TimelineKind::Blocks {
                // The categories and the what-if predictions (the layers of the forward passes).
                let cats = snapshot::categories::analyze(snap, &t, &snapshot::categories::Compiled::default());
                let _ = snapshot::doctor::what_if(snap, &t, &cats, &snapshot::doctor::Change::DEFAULTS);
            }
        }
        let st = snapshot::state::StateIndex::build(snap, d);
        let len = snap.trace(d).len();
        let _ = st.state_after(snap, None);
        let _ = st.state_after(snap, Some(len / 2));
        let _ = snapshot::state::merged_events(snap.trace(d));
    }
    // One round trip normalizes (dict key order inside unknown keys, frames written in
    // canonical order); after it, writing and reading must be a fixpoint.
    let once = snapshot::write::to_pickle_bytes(snap);
    let back = snapshot::read(&once).expect("our own pickle must read back");
    let twice = snapshot::write::to_pickle_bytes(&back.snapshot);
    let again = snapshot::read(&twice).expect("our own pickle must read back");
    let thrice = snapshot::write::to_pickle_bytes(&again.snapshot);
    assert!(twice == thrice, "the writer does not reach a fixpoint");
}

/// Feeds `body` to `l` in chunks of 1 to 97 bytes whose sizes follow from `seed`; stops at the
/// first error.
pub fn feed_chunked(l: &mut snapshot::Loader, body: &[u8], seed: u8) -> Result<(), snapshot::ReadError> {
    let mut rest = body;
    let mut k = u32::from(seed) | 1;
    while !rest.is_empty() {
        k = k.wrapping_mul(1_103_515_245).wrapping_add(12_345);
        let n = ((k >> 16) as usize % 97 + 1).min(rest.len());
        l.feed(&rest[..n])?;
        rest = &rest[n..];
    }
    Ok(())
}

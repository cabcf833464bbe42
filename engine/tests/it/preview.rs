//! A moved window's preview (`engine::preview`), drawn by the page before the worker answers.

use engine::protocol::{Kind, ViewModel};
use engine::Engine;

use crate::{open, view};

/// On a real snapshot: a zoom's and a pan's preview show, at each column, the picture
/// and the bytes that the old view had at that column's step; a step the old view did
/// not show is left empty.
#[test]
fn a_preview_shows_each_step_where_the_new_window_puts_it() {
    let Some(bytes) = testkit::read_or_skip("pt25-cs336-fullstep-annotations.pickle") else { return };
    let mut e = Engine::new();
    let info = open(&mut e, "pt25", &bytes, 1 << 20).unwrap();
    let whole = view(&mut e, info.doc, 0, Kind::Blocks, 0.0, 0.0, 400);
    let (a, b) = (whole.start, whole.end);
    let width = b - a;
    let n = whole.columns.len();
    let rows = whole.pixels.len() / 4 / n;
    assert!(rows > 0 && whole.columns.iter().any(|c| c.total > 0), "a picture with bytes in it");
    for (start, end) in [(a + width / 4.0, a + width / 2.0), (a + width / 3.0, b + width / 3.0)] {
        let p = engine::preview::preview(&whole, start, end).expect("a preview");
        assert_eq!((p.start, p.end, p.columns.len(), p.pixels.len()), (start, end, n, whole.pixels.len()));
        let mut empty = 0usize;
        for c in 0..n {
            let middle = start + (c as f64 + 0.5) * (end - start) / n as f64;
            let pixel = |v: &ViewModel, col: usize, row: usize| v.pixels[(row * n + col) * 4..][..4].to_vec();
            if middle >= b {
                empty += 1;
                assert_eq!(p.columns[c].total, 0, "column {c} is past the old window");
                assert!((0..rows).all(|r| pixel(&p, c, r) == [0, 0, 0, 0]));
                continue;
            }
            let j = ((middle - a) / width * n as f64) as usize;
            assert_eq!(p.columns[c].total, whole.columns[j].total, "column {c}: the bytes of old column {j}");
            assert!((0..rows).all(|r| pixel(&p, c, r) == pixel(&whole, j, r)), "column {c}: old column {j}");
        }
        let expected_empty = if end > b { ((end - b) / (end - start) * n as f64) as usize } else { 0 };
        assert!(empty.abs_diff(expected_empty) <= 1, "{empty} empty columns, {expected_empty} expected");
        assert_eq!(p.y_top, whole.y_top, "the memory axis stays");
    }
    assert!(engine::preview::preview(&whole, 5.0, 5.0).is_none(), "an empty window has no preview");
}

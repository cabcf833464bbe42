//! Turns a view's bands into pixels, so the page only copies an image: each band (an
//! element, or a blend of elements too thin to draw alone) adds its colour to the pixel rows
//! it covers in proportion to the area it covers (thin bands blend, nothing is lost). Grey
//! is only for bytes no element accounts for.

use crate::protocol::{BandVm, ColumnVm};

/// What the plot area looks like, as RGBA rows from the top.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Raster {
    pub width: u32,
    pub height: u32,
    pub rgba: Vec<u8>,
}

/// Colours for the roles that are not an element's own.
#[derive(Clone, Copy, Debug)]
pub struct Palette {
    pub summarized: u32,
    pub hit: u32,
    pub pinned: u32,
    /// Opacity (0..1) of bands that are not search hits while a search is on.
    pub dimmed: f32,
}

impl Default for Palette {
    fn default() -> Self {
        Palette { summarized: 0xa4aab1, hit: 0xd3372c, pinned: 0x1d1f23, dimmed: 0.2 }
    }
}

/// The plot's pixel rows and the bytes they span.
#[derive(Clone, Copy, Debug)]
pub struct Rows {
    pub count: u32,
    /// Bytes at the bottom edge and at the top edge.
    pub lo: f64,
    pub top: f64,
}

/// Rasterizes `bands` and `columns` into `columns.len() x rows.count` pixels. `searching`
/// dims what is not a hit (a blend shows its share of hits in the hit colour); `pinned`
/// paints one element in its own colour.
pub fn raster(
    bands: &[BandVm],
    columns: &[ColumnVm],
    rows: Rows,
    searching: bool,
    pinned: Option<u32>,
    pal: &Palette,
) -> Raster {
    let (w, h) = (columns.len(), rows.count as usize);
    // Premultiplied colour and coverage per pixel, rows from the top.
    let mut acc = vec![[0f32; 4]; w * h];
    let scale = h as f64 / (rows.top - rows.lo).max(1.0);
    let y_of = |bytes: f64| (bytes - rows.lo) * scale;
    // Paints columns `cols` between heights y0 and y1 (pixel rows from the bottom): the
    // coverage of each row is worked out once, then added along the row's pixels.
    let mut paint = |cols: std::ops::RangeInclusive<usize>, y0: f64, y1: f64, rgb: u32, alpha: f32| {
        let (y0, y1) = (max(y0, 0.0), min(y1, h as f64));
        if y1 <= y0 || alpha <= 0.0 || cols.is_empty() {
            return;
        }
        let (r, g, b) = (((rgb >> 16) & 255) as f32, ((rgb >> 8) & 255) as f32, (rgb & 255) as f32);
        let first = y0.floor() as usize;
        let last = (y1.ceil() as usize).min(h);
        for row in first..last {
            let cover = (min(y1, row as f64 + 1.0) - max(y0, row as f64)) as f32 * alpha;
            let add = [r * cover, g * cover, b * cover, cover];
            let line = (h - 1 - row) * w;
            for px in &mut acc[line + cols.start()..=line + cols.end()] {
                for (p, a) in px.iter_mut().zip(add) {
                    *p += a;
                }
            }
        }
    };
    for b in bands {
        let (y0, y1) = (y_of(b.offset as f64), y_of(b.offset as f64 + b.size as f64));
        if y1 <= 0.0 || y0 >= h as f64 || w == 0 {
            continue;
        }
        // (colour, opacity) layers: a blend with some hits shows them in proportion.
        let hit = if b.size == 0 { 0.0 } else { b.hit_bytes as f32 / b.size as f32 };
        let layers: [(u32, f32); 2] = if pinned.is_some() && pinned == b.element {
            [(pal.pinned, 1.0), (0, 0.0)]
        } else if searching {
            [(pal.hit, hit), (b.rgb, (1.0 - hit) * pal.dimmed)]
        } else {
            [(b.rgb, 1.0), (0, 0.0)]
        };
        let cols = b.first as usize..=(b.last as usize).min(w - 1);
        for (rgb, alpha) in layers {
            paint(cols.clone(), y0, y1, rgb, alpha);
        }
    }
    for (col, c) in columns.iter().enumerate() {
        if c.total > c.drawn {
            paint(col..=col, y_of(c.drawn as f64), y_of(c.total as f64), pal.summarized, 1.0);
        }
    }
    // To bytes, rounded half up (the values are never negative; `round` is a library call
    // in wasm, and so is a float `min`: the clamp is on the integer).
    let byte = |v: f32| ((v + 0.5) as u32).min(255) as u8;
    let mut rgba = vec![0u8; w * h * 4];
    for (px, out) in acc.iter().zip(rgba.chunks_exact_mut(4)) {
        let a = px[3];
        if a > 0.0 {
            let k = 1.0 / a;
            out.copy_from_slice(&[byte(px[0] * k), byte(px[1] * k), byte(px[2] * k), byte(a * 255.0)]);
        }
    }
    Raster { width: w as u32, height: rows.count, rgba }
}

/// The smaller of two numbers that are not NaN. `f64::min` is a library call in wasm (its
/// NaN rule is not wasm's `f64.min`), in the loop over every band's pixel rows.
fn min(a: f64, b: f64) -> f64 {
    if b < a {
        b
    } else {
        a
    }
}

/// The larger of two numbers that are not NaN (see [`min`]).
fn max(a: f64, b: f64) -> f64 {
    if b > a {
        b
    } else {
        a
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(count: u32, top: f64) -> Rows {
        Rows { count, lo: 0.0, top }
    }

    fn col(total: u64, drawn: u64) -> ColumnVm {
        ColumnVm { step: 0, total, drawn, time_us: None, allocated: None }
    }

    #[test]
    fn bands_fill_their_rows_and_thin_ones_blend() {
        let bands = vec![
            BandVm { element: Some(0), first: 0, last: 1, offset: 0, size: 50, rgb: 0xff0000, hit_bytes: 0 },
            BandVm { element: Some(1), first: 1, last: 1, offset: 50, size: 25, rgb: 0x0000ff, hit_bytes: 0 },
            BandVm { element: Some(2), first: 1, last: 1, offset: 75, size: 25, rgb: 0x00ff00, hit_bytes: 0 },
        ];
        let r = raster(&bands, &[col(50, 50), col(100, 100)], rows(2, 100.0), false, None, &Palette::default());
        let px = |x: usize, y: usize| &r.rgba[(y * 2 + x) * 4..(y * 2 + x) * 4 + 4];
        assert_eq!(px(0, 1), &[255, 0, 0, 255]); // bottom left: red
        assert_eq!(px(0, 0), &[0, 0, 0, 0]); // top left: empty
        assert_eq!(px(1, 0), &[0, 128, 128, 255]); // top right: blue and green half each
                                                   // Summarized bytes are grey on top of the drawn ones.
        let r = raster(&bands[..1], &[col(100, 50), col(50, 50)], rows(2, 100.0), false, None, &Palette::default());
        assert_eq!(&r.rgba[0..4], &[0xa4, 0xaa, 0xb1, 255]);
    }

    #[test]
    fn search_dims_and_pin_marks() {
        let bands = vec![
            BandVm { element: Some(0), first: 0, last: 0, offset: 0, size: 10, rgb: 0x00ff00, hit_bytes: 10 },
            BandVm { element: Some(1), first: 1, last: 1, offset: 0, size: 10, rgb: 0x00ff00, hit_bytes: 0 },
        ];
        let pal = Palette::default();
        let r = raster(&bands, &[col(10, 10), col(10, 10)], rows(1, 10.0), true, Some(1), &pal);
        assert_eq!(&r.rgba[0..3], &[0xd3, 0x37, 0x2c]);
        assert_eq!(&r.rgba[4..7], &[0x1d, 0x1f, 0x23]);
        let r = raster(&bands, &[col(10, 10), col(10, 10)], rows(1, 10.0), true, None, &pal);
        assert_eq!(r.rgba[7], 51, "a dimmed band is drawn at 20% opacity");
    }
    #[test]
    fn a_memory_range_maps_its_bytes_onto_the_rows() {
        // Bytes 50..100 on two rows: the band at 50..75 is the bottom row, 75..100 the top;
        // the band below 50 is not drawn.
        let bands = vec![
            BandVm { element: Some(0), first: 0, last: 0, offset: 0, size: 50, rgb: 0xff0000, hit_bytes: 0 },
            BandVm { element: Some(1), first: 0, last: 0, offset: 50, size: 25, rgb: 0x00ff00, hit_bytes: 0 },
            BandVm { element: None, first: 0, last: 0, offset: 75, size: 25, rgb: 0x0000ff, hit_bytes: 0 },
        ];
        let r =
            raster(&bands, &[col(100, 100)], Rows { count: 2, lo: 50.0, top: 100.0 }, false, None, &Palette::default());
        assert_eq!(&r.rgba[0..4], &[0, 0, 255, 255]);
        assert_eq!(&r.rgba[4..8], &[0, 255, 0, 255]);
    }

    #[test]
    fn a_blend_shows_its_share_of_search_hits() {
        let bands =
            vec![BandVm { element: None, first: 0, last: 0, offset: 0, size: 100, rgb: 0x00ff00, hit_bytes: 100 }];
        let pal = Palette::default();
        let r = raster(&bands, &[col(100, 100)], rows(1, 100.0), true, None, &pal);
        assert_eq!(&r.rgba[0..4], &[0xd3, 0x37, 0x2c, 255], "all hits: the hit colour");
        let bands =
            vec![BandVm { element: None, first: 0, last: 0, offset: 0, size: 100, rgb: 0x00ff00, hit_bytes: 0 }];
        let r = raster(&bands, &[col(100, 100)], rows(1, 100.0), true, None, &pal);
        assert_eq!(r.rgba[3], 51, "no hits: dimmed");
    }
}

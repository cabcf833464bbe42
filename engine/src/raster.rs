//! Turns a view's bands into pixels, so the page only copies an image: each band (an
//! element, or a blend of elements too thin to draw alone) adds its colour to the pixel rows
//! it covers in proportion to the area it covers (thin bands blend: nothing is lost down to
//! a 65536th of a pixel row). Grey is only for bytes no element accounts for.

use crate::protocol::{Band, ColumnVm};

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

/// Coverage of a whole pixel in the accumulator's fixed point.
const ONE: f64 = 65536.0;

/// Rasterizes `bands` and `columns` into `columns.len() x rows.count` pixels. `searching`
/// dims what is not a hit (a blend shows its share of hits in the hit colour); `pinned`
/// paints one element in its own colour.
///
/// A band covers the same share of each pixel row in every column it spans, so it adds its
/// colour where it begins on a row and takes it away after it ends there, and one pass along
/// each row sums what is present at each pixel: a band costs its rows, not its rows times its
/// columns (most of a file's bands are thinner than a row and span many columns). The sums are
/// integers (coverage in 1/65536ths of a pixel), so what a band adds it takes away exactly.
pub fn raster(
    bands: &[Band],
    columns: &[ColumnVm],
    rows: Rows,
    searching: bool,
    pinned: Option<u32>,
    pal: &Palette,
) -> Raster {
    let (w, h) = (columns.len(), rows.count as usize);
    if w == 0 || h == 0 {
        return Raster { width: w as u32, height: rows.count, rgba: Vec::new() };
    }
    // Per pixel, rows from the top: the change, from the pixel to its left, of the
    // premultiplied colour and the coverage present (wrapping: only the sums are in range).
    let mut delta = vec![[0u32; 4]; w * h];
    let scale = h as f64 / (rows.top - rows.lo).max(1.0);
    let y_of = |bytes: f64| (bytes - rows.lo) * scale;
    // Paints columns `cols` between heights y0 and y1 (pixel rows from the bottom).
    let mut paint = |cols: std::ops::RangeInclusive<usize>, y0: f64, y1: f64, rgb: u32, alpha: f32| {
        let (y0, y1) = (max(y0, 0.0), min(y1, h as f64));
        if y1 <= y0 || alpha <= 0.0 || cols.is_empty() {
            return;
        }
        let channels = [(rgb >> 16) & 255, (rgb >> 8) & 255, rgb & 255, 1];
        let (first, end) = (*cols.start(), *cols.end() + 1);
        for row in y0.floor() as usize..(y1.ceil() as usize).min(h) {
            // Rounded half up (never negative; `round` is a library call in wasm).
            let cover = ((min(y1, row as f64 + 1.0) - max(y0, row as f64)) * f64::from(alpha) * ONE + 0.5) as u32;
            let line = (h - 1 - row) * w;
            for (k, ch) in channels.iter().enumerate() {
                let add = ch.wrapping_mul(cover);
                delta[line + first][k] = delta[line + first][k].wrapping_add(add);
                if end < w {
                    delta[line + end][k] = delta[line + end][k].wrapping_sub(add);
                }
            }
        }
    };
    for b in bands {
        let (y0, y1) = (y_of(b.offset_bytes as f64), y_of(b.offset_bytes as f64 + b.size_bytes as f64));
        if y1 <= 0.0 || y0 >= h as f64 {
            continue;
        }
        // (colour, opacity) layers: a blend with some hits shows them in proportion.
        let hit = if b.size_bytes == 0 { 0.0 } else { b.hit_bytes as f32 / b.size_bytes as f32 };
        let layers: [(u32, f32); 2] = if pinned.is_some() && pinned == b.element {
            [(pal.pinned, 1.0), (0, 0.0)]
        } else if searching {
            [(pal.hit, hit), (b.rgb, (1.0 - hit) * pal.dimmed)]
        } else {
            [(b.rgb, 1.0), (0, 0.0)]
        };
        let cols = b.first_column as usize..=(b.last_column as usize).min(w - 1);
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
    for (line, out) in delta.chunks_exact(w).zip(rgba.chunks_exact_mut(w * 4)) {
        let (mut sum, mut px) = ([0u32; 4], [0u8; 4]);
        for (d, out) in line.iter().zip(out.chunks_exact_mut(4)) {
            // Where nothing begins or ends, the pixel is its left neighbour's colour.
            if *d != [0; 4] {
                for (s, d) in sum.iter_mut().zip(d) {
                    *s = s.wrapping_add(*d);
                }
                px = if sum[3] > 0 {
                    let k = 1.0 / sum[3] as f32;
                    let a = sum[3] as f32 * (255.0 / ONE as f32);
                    [byte(sum[0] as f32 * k), byte(sum[1] as f32 * k), byte(sum[2] as f32 * k), byte(a)]
                } else {
                    [0; 4]
                };
            }
            out.copy_from_slice(&px);
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

    /// A band of `element` over `cols`: `size` bytes at `offset`, `hit` of them search hits.
    fn band(
        element: Option<u32>,
        cols: std::ops::RangeInclusive<u32>,
        offset: u64,
        size: u64,
        rgb: u32,
        hit: u64,
    ) -> Band {
        let (first_column, last_column) = (*cols.start(), *cols.end());
        Band { element, first_column, last_column, offset_bytes: offset, size_bytes: size, rgb, hit_bytes: hit }
    }

    fn col(total: u64, drawn: u64) -> ColumnVm {
        ColumnVm { step: 0, total, drawn, time_us: None, allocated: None }
    }

    #[test]
    fn bands_fill_their_rows_and_thin_ones_blend() {
        let bands = vec![
            band(Some(0), 0..=1, 0, 50, 0xff0000, 0),
            band(Some(1), 1..=1, 50, 25, 0x0000ff, 0),
            band(Some(2), 1..=1, 75, 25, 0x00ff00, 0),
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
        let bands = vec![band(Some(0), 0..=0, 0, 10, 0x00ff00, 10), band(Some(1), 1..=1, 0, 10, 0x00ff00, 0)];
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
            band(Some(0), 0..=0, 0, 50, 0xff0000, 0),
            band(Some(1), 0..=0, 50, 25, 0x00ff00, 0),
            band(None, 0..=0, 75, 25, 0x0000ff, 0),
        ];
        let r =
            raster(&bands, &[col(100, 100)], Rows { count: 2, lo: 50.0, top: 100.0 }, false, None, &Palette::default());
        assert_eq!(&r.rgba[0..4], &[0, 0, 255, 255]);
        assert_eq!(&r.rgba[4..8], &[0, 255, 0, 255]);
    }

    #[test]
    fn a_blend_shows_its_share_of_search_hits() {
        let bands = vec![band(None, 0..=0, 0, 100, 0x00ff00, 100)];
        let pal = Palette::default();
        let r = raster(&bands, &[col(100, 100)], rows(1, 100.0), true, None, &pal);
        assert_eq!(&r.rgba[0..4], &[0xd3, 0x37, 0x2c, 255], "all hits: the hit colour");
        let bands = vec![band(None, 0..=0, 0, 100, 0x00ff00, 0)];
        let r = raster(&bands, &[col(100, 100)], rows(1, 100.0), true, None, &pal);
        assert_eq!(r.rgba[3], 51, "no hits: dimmed");
    }
}

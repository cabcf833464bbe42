//! Turns a view's bands into pixels, so the page only copies an image: each band adds its
//! colour to the pixel rows it covers in proportion to the area it covers (thin bands blend,
//! nothing is lost), then the summarized bytes of each column are added in grey on top.

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

/// Rasterizes `bands` and `columns` into `columns.len() x rows` pixels, `y_max` bytes at the
/// top. `searching` dims what is not a hit; `pinned` paints one element in its own colour.
pub fn raster(
    bands: &[BandVm],
    columns: &[ColumnVm],
    rows: u32,
    y_max: f64,
    searching: bool,
    pinned: Option<u32>,
    pal: &Palette,
) -> Raster {
    let (w, h) = (columns.len(), rows as usize);
    // Premultiplied colour and coverage per pixel.
    let mut acc = vec![[0f32; 4]; w * h];
    let scale = h as f64 / y_max.max(1.0);
    let mut paint = |col: usize, lo: f64, hi: f64, rgb: u32, alpha: f32| {
        let (y0, y1) = ((lo * scale).max(0.0), (hi * scale).min(h as f64));
        if y1 <= y0 {
            return;
        }
        let (r, g, b) = (((rgb >> 16) & 255) as f32, ((rgb >> 8) & 255) as f32, (rgb & 255) as f32);
        let first = y0.floor() as usize;
        let last = (y1.ceil() as usize).min(h);
        for row in first..last {
            let cover = (y1.min(row as f64 + 1.0) - y0.max(row as f64)) as f32 * alpha;
            let px = &mut acc[(h - 1 - row) * w + col];
            px[0] += r * cover;
            px[1] += g * cover;
            px[2] += b * cover;
            px[3] += cover;
        }
    };
    for b in bands {
        let (rgb, alpha) = if pinned == Some(b.element) {
            (pal.pinned, 1.0)
        } else if searching {
            if b.hit {
                (pal.hit, 1.0)
            } else {
                (b.rgb, pal.dimmed)
            }
        } else {
            (b.rgb, 1.0)
        };
        let (lo, hi) = (b.offset as f64, (b.offset + b.size) as f64);
        for col in b.first as usize..=(b.last as usize).min(w.saturating_sub(1)) {
            paint(col, lo, hi, rgb, alpha);
        }
    }
    for (col, c) in columns.iter().enumerate() {
        if c.total > c.drawn {
            paint(col, c.drawn as f64, c.total as f64, pal.summarized, 1.0);
        }
    }
    let mut rgba = Vec::with_capacity(w * h * 4);
    for px in &acc {
        let a = px[3];
        if a <= 0.0 {
            rgba.extend_from_slice(&[0, 0, 0, 0]);
        } else {
            let k = 1.0 / a;
            rgba.extend_from_slice(&[
                (px[0] * k).round().min(255.0) as u8,
                (px[1] * k).round().min(255.0) as u8,
                (px[2] * k).round().min(255.0) as u8,
                (a.min(1.0) * 255.0).round() as u8,
            ]);
        }
    }
    Raster { width: w as u32, height: rows, rgba }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn col(total: u64, drawn: u64) -> ColumnVm {
        ColumnVm { step: 0, total, drawn, time_us: None, allocated: None }
    }

    #[test]
    fn bands_fill_their_rows_and_thin_ones_blend() {
        let bands = vec![
            BandVm { element: 0, first: 0, last: 1, offset: 0, size: 50, rgb: 0xff0000, hit: false },
            BandVm { element: 1, first: 1, last: 1, offset: 50, size: 25, rgb: 0x0000ff, hit: false },
            BandVm { element: 2, first: 1, last: 1, offset: 75, size: 25, rgb: 0x00ff00, hit: false },
        ];
        let r = raster(&bands, &[col(50, 50), col(100, 100)], 2, 100.0, false, None, &Palette::default());
        let px = |x: usize, y: usize| &r.rgba[(y * 2 + x) * 4..(y * 2 + x) * 4 + 4];
        assert_eq!(px(0, 1), &[255, 0, 0, 255]); // bottom left: red
        assert_eq!(px(0, 0), &[0, 0, 0, 0]); // top left: empty
        assert_eq!(px(1, 0), &[0, 128, 128, 255]); // top right: blue and green half each
                                                   // Summarized bytes are grey on top of the drawn ones.
        let r = raster(&bands[..1], &[col(100, 50), col(50, 50)], 2, 100.0, false, None, &Palette::default());
        assert_eq!(&r.rgba[0..4], &[0xa4, 0xaa, 0xb1, 255]);
    }

    #[test]
    fn search_dims_and_pin_marks() {
        let bands = vec![
            BandVm { element: 0, first: 0, last: 0, offset: 0, size: 10, rgb: 0x00ff00, hit: true },
            BandVm { element: 1, first: 1, last: 1, offset: 0, size: 10, rgb: 0x00ff00, hit: false },
        ];
        let pal = Palette::default();
        let r = raster(&bands, &[col(10, 10), col(10, 10)], 1, 10.0, true, Some(1), &pal);
        assert_eq!(&r.rgba[0..3], &[0xd3, 0x37, 0x2c]);
        assert_eq!(&r.rgba[4..7], &[0x1d, 0x1f, 0x23]);
        let r = raster(&bands, &[col(10, 10), col(10, 10)], 1, 10.0, true, None, &pal);
        assert_eq!(r.rgba[7], 51, "a dimmed band is drawn at 20% opacity");
    }
}

//! `PYTORCH_CUDA_ALLOC_CONF`, read as `CUDAAllocatorConfig::parseArgs` reads it: the settings
//! the simulator models, applied onto a policy. Options it does not model (`backend`,
//! `release_lock_on_cudamalloc`, the pinned-memory ones) are accepted and left alone.

use super::Policy;
use crate::settings::INTERVALS;

impl Policy {
    /// This policy with the settings of `conf` (`"expandable_segments:True,max_split_size_mb:128"`)
    /// applied. An error names the item it could not read.
    pub fn with_conf(&self, conf: &str) -> Result<Policy, String> {
        let mut p = self.clone();
        for (key, value) in items(conf)? {
            let bad = || format!("{key}:{value}: not a value PyTorch accepts for {key}");
            match key.as_str() {
                "expandable_segments" => {
                    p.expandable = match value.as_str() {
                        "True" | "true" | "1" => true,
                        "False" | "false" | "0" => false,
                        _ => return Err(bad()),
                    }
                }
                "max_split_size_mb" => {
                    let mb: u64 = value.parse().map_err(|_| bad())?;
                    // PyTorch takes at least kLargeBuffer (20 MiB).
                    p.max_split = Some(mb.max(20).saturating_mul(1 << 20));
                }
                "garbage_collection_threshold" => {
                    let t: f64 = value.parse().map_err(|_| bad())?;
                    if !(t > 0.0 && t < 1.0) {
                        return Err(format!("{key}:{value}: must be between 0.0 and 1.0, as PyTorch requires"));
                    }
                    p.gc_threshold = t;
                }
                "roundup_power2_divisions" => p.divisions = divisions(&value).ok_or_else(bad)?,
                _ => {}
            }
        }
        Ok(p)
    }
}

/// The `key:value` items of a configuration; a bracketed value keeps its commas.
fn items(conf: &str) -> Result<Vec<(String, String)>, String> {
    let mut out = Vec::new();
    let mut rest = conf.trim();
    while !rest.is_empty() {
        let (key, after) = rest.split_once(':').ok_or_else(|| format!("{rest}: expected key:value"))?;
        let after = after.trim_start();
        let (value, next) = if let Some(inner) = after.strip_prefix('[') {
            let end = inner.find(']').ok_or_else(|| format!("{key}: an unclosed ["))?;
            (format!("[{}]", &inner[..end]), inner[end + 1..].trim_start())
        } else {
            match after.find(',') {
                Some(i) => (after[..i].to_string(), &after[i..]),
                None => (after.to_string(), ""),
            }
        };
        out.push((key.trim().to_string(), value.trim().to_string()));
        rest = next.trim_start_matches(',').trim();
    }
    Ok(out)
}

/// `roundup_power2_divisions`: one power of two for every interval, or `[256:1,512:2,>:8]`
/// (sizes in MiB: the first sets every interval up to its own, `>` every one after the last).
fn divisions(value: &str) -> Option<[u64; INTERVALS]> {
    let ok = |d: u64| d == 0 || d.is_power_of_two();
    let Some(list) = value.strip_prefix('[').and_then(|v| v.strip_suffix(']')) else {
        let d: u64 = value.parse().ok()?;
        return ok(d).then_some([d; INTERVALS]);
    };
    let mut out = [0; INTERVALS];
    let mut last: Option<usize> = None;
    for item in list.split(',') {
        let (k, v) = item.split_once(':')?;
        let d: u64 = v.trim().parse().ok().filter(|&d| ok(d))?;
        if k.trim() == ">" {
            let from = last.map_or(0, |l| l + 1);
            out[from.min(INTERVALS)..].fill(d);
            continue;
        }
        let mib: u64 = k.trim().parse().ok().filter(|m: &u64| m.is_power_of_two())?;
        let index = (mib.ilog2() as usize).min(INTERVALS - 1);
        if last.is_none() {
            out[..index].fill(d);
        }
        out[index] = d;
        last = Some(index);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_configuration_is_read_as_pytorch_reads_it() {
        let p = Policy::default()
            .with_conf("expandable_segments:True, max_split_size_mb:128,roundup_power2_divisions:[256:1,512:2,>:8],backend:native")
            .unwrap();
        assert!(p.expandable);
        assert_eq!(p.max_split, Some(128 << 20));
        assert_eq!(p.divisions[..10], [1, 1, 1, 1, 1, 1, 1, 1, 1, 2]);
        assert_eq!(p.divisions[10..], [8; 6]);
        assert_eq!(Policy::default().with_conf("roundup_power2_divisions:4").unwrap().divisions, [4; INTERVALS]);
        assert_eq!(Policy::default().with_conf("garbage_collection_threshold:0.6").unwrap().gc_threshold, 0.6);
        for bad in [
            "expandable_segments:yes",
            "max_split_size_mb:x",
            "garbage_collection_threshold:2",
            "roundup_power2_divisions:3",
            "nonsense",
        ] {
            assert!(Policy::default().with_conf(bad).is_err(), "{bad}");
        }
        assert_eq!(Policy::default().with_conf("").unwrap(), Policy::default());
    }
}
